// Topology: a Boost.Graph of devices, switches, hosts and optical circuit switches joined by
// full-duplex links. Each physical link is two directed links (one per direction), so flows
// in opposite directions never share bandwidth. Quantities carry their unit in the name.
#pragma once
#include <array>
#include <memory>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

namespace sluice::net {

// What a vertex is; OCS vertices own ports but never forward packets (their circuits are links).
enum class NodeKind : uint8_t { Device, Switch, Host, Ocs };
const char* node_kind_name(NodeKind k);

// One vertex of the topology.
struct NodeInfo {
  std::string name;
  NodeKind kind = NodeKind::Device;
  int radix = 0;                       // ports; 0 = not limited (devices, hosts)
  double price_usd = 0;                // capex of this component
  std::array<int, 3> coord{-1, -1, -1};  // torus coordinates, -1 when not on a torus
  int group = -1;                      // server or cube index, -1 when none
  bool reduces = false;                // a switch that reduces and multicasts in the network (NVLink SHARP: NVLS)
};

// One direction of a full-duplex link.
struct LinkInfo {
  int src = -1, dst = -1;
  double bandwidth_Bps = 0;  // per direction
  int64_t latency_ns = 0;    // per hop (propagation + switch traversal)
  int reverse = -1;          // the opposite direction
  int ocs = -1;              // index of the OCS node carrying this circuit, -1 when electrical
  bool optical = false;
  double price_usd = 0;      // capex of the physical link (cable/optics), on the forward direction only
  std::string label;         // nvlink, pcie, nic, ici, uplink, ...
  bool up = true;            // false: torn down (an OCS circuit removed); routes avoid it
  int route_penalty = 0;     // added to the link's routing weight (a dragonfly's global hop: one global hop, not two shorter ones)
};

// Raised by topology construction and checks; the message names the offending element.
class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Torus metadata kept by the torus generators, for dimension-order routing and closed forms.
struct TorusShape {
  std::array<int, 3> dims{1, 1, 1};
  int ndims = 0;
  bool twisted = false;
  bool wrap = true;
  std::vector<int> node_at;  // device node id by linear coordinate x + X*(y + Y*z)
  int index(int x, int y, int z) const { return x + dims[0] * (y + dims[1] * z); }
};

// What a TPU v4-style pod generator knows of its pod: cubes of edge^3 chips on a grid of cubes,
// their faces joined by optical circuit switches (or by fixed cables: a static torus). The
// world's slices are formed from it.
struct PodShape {
  int cube_edge = 0;
  std::array<int, 3> grid{0, 0, 0};  // cubes along x, y, z
  bool ocs = false;
};

// An item of capex that is not a graph element (hosts, racks, chassis).
struct CapexItem {
  std::string name;
  long count = 0;
  double unit_usd = 0;
};

// The graph with link and node attributes; vertex and edge ids are dense indices.
class Topology {
 public:
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                                      boost::property<boost::edge_index_t, int>>;

  Topology() = default;
  explicit Topology(std::string name) : name_(std::move(name)) {}

  int add_node(NodeInfo n);
  // Adds a full-duplex link as two directed links; returns the id of the a->b direction.
  int add_link(int a, int b, double bandwidth_Bps, int64_t latency_ns, const std::string& label = "",
               double price_usd = 0, bool optical = false, int ocs = -1);

  int node_count() const { return static_cast<int>(nodes_.size()); }
  int link_count() const { return static_cast<int>(links_.size()); }  // directed
  const NodeInfo& node(int v) const { return nodes_.at(static_cast<size_t>(v)); }
  const LinkInfo& link(int e) const { return links_[static_cast<size_t>(e)]; }
  LinkInfo& mutable_link(int e) { return links_[static_cast<size_t>(e)]; }
  const std::vector<int>& out_links(int v) const { return out_[static_cast<size_t>(v)]; }
  const Graph& graph() const { return *graph_; }
  const std::vector<int>& devices() const { return devices_; }
  int find(const std::string& name) const;  // -1 when absent
  // Ports in use at a node: physical links incident to it, plus circuits through an OCS.
  int ports_used(int v) const;

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  std::string family;  // generator name
  std::optional<TorusShape> torus;
  std::optional<PodShape> pod;  // set by the TPU pod generator
  // A pod's OCS slices, each wired as its own torus (in the slice's coordinates; node_at in
  // them): kept by SliceManager while the slice's circuits stand, for the router's closed forms.
  std::vector<TorusShape> slices;
  std::vector<CapexItem> extra_capex;

  // Checks: endpoints exist, ports within each switch's radix, the routable part connected,
  // at least one device. Throws TopologyError naming the element.
  void check() const;

 private:
  std::string name_;
  std::unique_ptr<Graph> graph_ = std::make_unique<Graph>();  // held by pointer: moving a Topology never copies it
  std::vector<NodeInfo> nodes_;
  std::vector<LinkInfo> links_;
  std::vector<std::vector<int>> out_;
  std::vector<int> devices_;
  std::vector<int> ocs_circuits_;  // per node: circuits programmed through it (OCS only)
};

// Hop diameter between devices. Exact: BFS from every device, or from one device when the
// topology is a (regular or twisted) torus, which is vertex-transitive.
int diameter_hops(const Topology& t);

// Bisection bandwidth (bytes/s, one direction across the cut) and how it was found.
struct Bisection {
  double bandwidth_Bps = 0;
  std::string method;
};
// Min over candidate balanced device bipartitions (device-index halves; coordinate halves
// along each torus dimension; server/cube halves) of the max-flow min-cut between the two
// halves, switches free to fall on either side (Boost push-relabel). Exact for regular tori
// and for fat-trees; an upper bound on the true bisection in general.
Bisection bisection_bandwidth(const Topology& t);

// Capex by category: devices, switches, hosts, ocs, electrical links, optical links, extras.
struct Capex {
  double devices_usd = 0, switches_usd = 0, hosts_usd = 0, ocs_usd = 0, electrical_links_usd = 0,
         optical_links_usd = 0, extra_usd = 0;
  double total_usd() const {
    return devices_usd + switches_usd + hosts_usd + ocs_usd + electrical_links_usd + optical_links_usd + extra_usd;
  }
};
Capex capex(const Topology& t);

// Graphviz DOT text: devices as boxes, switches as ellipses, OCS as diamonds, optical dashed.
std::string to_dot(const Topology& t);

}  // namespace sluice::net
