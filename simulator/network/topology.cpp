#include "network/topology.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/push_relabel_max_flow.hpp>
#include <fmt/format.h>

namespace sluice::net {

const char* node_kind_name(NodeKind k) {
  switch (k) {
    case NodeKind::Device: return "device";
    case NodeKind::Switch: return "switch";
    case NodeKind::Host: return "host";
    case NodeKind::Ocs: return "ocs";
  }
  return "?";
}

int Topology::add_node(NodeInfo n) {
  const int id = static_cast<int>(nodes_.size());
  if (n.name.empty()) n.name = fmt::format("n{}", id);
  if (n.kind == NodeKind::Device) devices_.push_back(id);
  nodes_.push_back(std::move(n));
  out_.emplace_back();
  ocs_circuits_.push_back(0);
  const auto v = boost::add_vertex(*graph_);
  (void)v;
  return id;
}

int Topology::add_link(int a, int b, double bandwidth_Bps, int64_t latency_ns, const std::string& label,
                       double price_usd, bool optical, int ocs) {
  const int n = node_count();
  if (a < 0 || a >= n || b < 0 || b >= n)
    throw TopologyError(fmt::format("link {} -> {} in '{}' names a node that does not exist (nodes 0..{})", a, b, name_, n - 1));
  if (a == b) throw TopologyError(fmt::format("link from '{}' to itself in '{}'", nodes_[a].name, name_));
  if (!(bandwidth_Bps > 0))
    throw TopologyError(fmt::format("link '{}' - '{}' in '{}' has bandwidth {} (must be > 0)", nodes_[a].name, nodes_[b].name, name_, bandwidth_Bps));
  if (nodes_[a].kind == NodeKind::Ocs || nodes_[b].kind == NodeKind::Ocs)
    throw TopologyError(fmt::format("link '{}' - '{}': an OCS carries circuits between other nodes, it is not a link endpoint",
                                    nodes_[a].name, nodes_[b].name));
  const int fwd = link_count();
  LinkInfo f{a, b, bandwidth_Bps, latency_ns, fwd + 1, ocs, optical, price_usd, label};
  LinkInfo r{b, a, bandwidth_Bps, latency_ns, fwd, ocs, optical, 0.0, label};
  links_.push_back(std::move(f));
  links_.push_back(std::move(r));
  out_[static_cast<size_t>(a)].push_back(fwd);
  out_[static_cast<size_t>(b)].push_back(fwd + 1);
  boost::add_edge(static_cast<size_t>(a), static_cast<size_t>(b), fwd, *graph_);
  boost::add_edge(static_cast<size_t>(b), static_cast<size_t>(a), fwd + 1, *graph_);
  if (ocs >= 0) {
    if (ocs >= n || nodes_[ocs].kind != NodeKind::Ocs)
      throw TopologyError(fmt::format("circuit '{}' - '{}' names OCS {} which is not an OCS node", nodes_[a].name, nodes_[b].name, ocs));
    ++ocs_circuits_[static_cast<size_t>(ocs)];
  }
  return fwd;
}

int Topology::find(const std::string& name) const {
  for (int i = 0; i < node_count(); ++i)
    if (nodes_[i].name == name) return i;
  return -1;
}

int Topology::ports_used(int v) const {
  if (nodes_[v].kind == NodeKind::Ocs) return 2 * ocs_circuits_[static_cast<size_t>(v)];
  return static_cast<int>(out_[static_cast<size_t>(v)].size());
}

void Topology::check() const {
  if (devices_.empty()) throw TopologyError(fmt::format("topology '{}' has no devices", name_));
  for (int v = 0; v < node_count(); ++v) {
    const auto& n = nodes_[v];
    if (n.radix > 0 && ports_used(v) > n.radix)
      throw TopologyError(fmt::format("{} '{}' uses {} ports but its radix is {}", node_kind_name(n.kind), n.name, ports_used(v), n.radix));
  }
  for (const auto& l : links_)
    if (l.src < 0 || l.src >= node_count() || l.dst < 0 || l.dst >= node_count())
      throw TopologyError(fmt::format("a link of '{}' leads to nowhere (node {} -> {})", name_, l.src, l.dst));
  // Connected: every non-OCS node reachable from the first device (links are symmetric).
  std::vector<char> seen(static_cast<size_t>(node_count()), 0);
  std::vector<int> stack{devices_.front()};
  seen[static_cast<size_t>(devices_.front())] = 1;
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    for (int e : out_[static_cast<size_t>(v)]) {
      int w = links_[static_cast<size_t>(e)].dst;
      if (!seen[static_cast<size_t>(w)]) { seen[static_cast<size_t>(w)] = 1; stack.push_back(w); }
    }
  }
  for (int v = 0; v < node_count(); ++v)
    if (!seen[static_cast<size_t>(v)] && nodes_[v].kind != NodeKind::Ocs)
      throw TopologyError(fmt::format("{} '{}' is not connected to device '{}' (topology '{}' is disconnected)",
                                      node_kind_name(nodes_[v].kind), nodes_[v].name, nodes_[devices_.front()].name, name_));
}

namespace {

// Hop distances from `src` to every node by Boost's breadth-first search.
std::vector<int> bfs_hops(const Topology& t, int src) {
  std::vector<int> dist(static_cast<size_t>(t.node_count()), -1);
  dist[static_cast<size_t>(src)] = 0;
  struct Visitor : boost::default_bfs_visitor {
    std::vector<int>* d;
    void tree_edge(Topology::Graph::edge_descriptor e, const Topology::Graph& g) const {
      (*d)[boost::target(e, g)] = (*d)[boost::source(e, g)] + 1;
    }
  } vis;
  vis.d = &dist;
  std::vector<boost::default_color_type> color(static_cast<size_t>(t.node_count()));
  boost::breadth_first_search(t.graph(), static_cast<size_t>(src),
                              boost::visitor(vis).color_map(boost::make_iterator_property_map(
                                  color.begin(), boost::get(boost::vertex_index, t.graph()))));
  return dist;
}

}  // namespace

int diameter_hops(const Topology& t) {
  const auto& devs = t.devices();
  std::vector<int> sources = devs;
  if (t.torus) sources.assign(1, devs.front());
  int diam = 0;
  for (int s : sources) {
    auto d = bfs_hops(t, s);
    for (int v : devs) diam = std::max(diam, d[static_cast<size_t>(v)]);
  }
  return diam;
}

namespace {

// Capacities are whole bytes per second in int64: push-relabel checks flow conservation
// exactly (an assertion in debug builds), which double rounding breaks.
using FlowTraits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS, boost::no_property,
    boost::property<boost::edge_capacity_t, int64_t,
                    boost::property<boost::edge_residual_capacity_t, int64_t,
                                    boost::property<boost::edge_reverse_t, FlowTraits::edge_descriptor>>>>;

// Max flow from the devices marked side A to those marked side B: the min cut between them.
double min_cut_Bps(const Topology& t, const std::vector<char>& side_a, const std::vector<char>& side_b) {
  const size_t n = static_cast<size_t>(t.node_count());
  FlowGraph g(n + 2);
  auto cap = boost::get(boost::edge_capacity, g);
  auto rev = boost::get(boost::edge_reverse, g);
  auto add = [&](size_t u, size_t v, int64_t c) {
    auto e1 = boost::add_edge(u, v, g).first;
    auto e2 = boost::add_edge(v, u, g).first;
    cap[e1] = c;
    cap[e2] = 0;
    rev[e1] = e2;
    rev[e2] = e1;
  };
  int64_t total = 0;
  for (int e = 0; e < t.link_count(); ++e) {
    const auto& l = t.link(e);
    const int64_t c = std::llround(l.bandwidth_Bps);
    add(static_cast<size_t>(l.src), static_cast<size_t>(l.dst), c);
    total += c;
  }
  const int64_t inf = total + 1;  // more than any cut: the source and sink edges never saturate
  const size_t s = n, k = n + 1;
  for (size_t v = 0; v < n; ++v) {
    if (side_a[v]) add(s, v, inf);
    if (side_b[v]) add(v, k, inf);
  }
  return static_cast<double>(boost::push_relabel_max_flow(g, s, k));
}

}  // namespace

Bisection bisection_bandwidth(const Topology& t) {
  const auto& devs = t.devices();
  const size_t n = static_cast<size_t>(t.node_count());
  Bisection best{std::numeric_limits<double>::infinity(), ""};
  auto consider = [&](const std::vector<char>& a, const std::string& what) {
    std::vector<char> b(n, 0);
    size_t na = 0, nb = 0;
    for (int v : devs) {
      if (a[static_cast<size_t>(v)]) ++na;
      else { b[static_cast<size_t>(v)] = 1; ++nb; }
    }
    if (na == 0 || nb == 0 || (na > nb ? na - nb : nb - na) > 1) return;  // balanced only
    const double c = min_cut_Bps(t, a, b);
    if (c < best.bandwidth_Bps) best = Bisection{c, what};
  };
  if (devs.size() < 2) return Bisection{0, "fewer than two devices"};
  {
    std::vector<char> a(n, 0);
    for (size_t i = 0; i < devs.size() / 2; ++i) a[static_cast<size_t>(devs[i])] = 1;
    consider(a, "min-cut between the two halves of the device list");
  }
  if (t.torus) {
    for (int d = 0; d < t.torus->ndims; ++d) {
      const int half = t.torus->dims[d] / 2;
      if (t.torus->dims[d] % 2) continue;
      std::vector<char> a(n, 0);
      for (int v : devs) a[static_cast<size_t>(v)] = t.node(v).coord[d] < half;
      consider(a, fmt::format("min-cut across the middle of torus dimension {}", "xyz"[d]));
    }
  }
  {
    std::map<int, std::vector<int>> groups;
    for (int v : devs) groups[t.node(v).group].push_back(v);
    if (groups.size() > 1 && groups.size() % 2 == 0) {
      std::vector<char> a(n, 0);
      size_t i = 0;
      for (const auto& [g, vs] : groups) {
        if (i++ < groups.size() / 2)
          for (int v : vs) a[static_cast<size_t>(v)] = 1;
      }
      consider(a, "min-cut between the two halves of the servers/cubes");
    }
  }
  if (!std::isfinite(best.bandwidth_Bps)) return Bisection{0, "no balanced partition found"};
  best.method += "; minimum over candidate balanced cuts, push-relabel max-flow";
  return best;
}

Capex capex(const Topology& t) {
  Capex c;
  for (int v = 0; v < t.node_count(); ++v) {
    const auto& n = t.node(v);
    switch (n.kind) {
      case NodeKind::Device: c.devices_usd += n.price_usd; break;
      case NodeKind::Switch: c.switches_usd += n.price_usd; break;
      case NodeKind::Host: c.hosts_usd += n.price_usd; break;
      case NodeKind::Ocs: c.ocs_usd += n.price_usd; break;
    }
  }
  for (int e = 0; e < t.link_count(); ++e) {
    const auto& l = t.link(e);
    (l.optical ? c.optical_links_usd : c.electrical_links_usd) += l.price_usd;
  }
  for (const auto& x : t.extra_capex) c.extra_usd += static_cast<double>(x.count) * x.unit_usd;
  return c;
}

std::string to_dot(const Topology& t) {
  std::string s = fmt::format("// {} ({}): generated by `sluice topo`\ngraph \"{}\" {{\n  layout=neato; overlap=false;\n",
                              t.name(), t.family, t.name());
  for (int v = 0; v < t.node_count(); ++v) {
    const auto& n = t.node(v);
    const char* shape = n.kind == NodeKind::Device ? "box" : n.kind == NodeKind::Ocs ? "diamond" : n.kind == NodeKind::Host ? "house" : "ellipse";
    s += fmt::format("  n{} [label=\"{}\", shape={}];\n", v, n.name, shape);
  }
  for (int e = 0; e < t.link_count(); e += 2) {
    const auto& l = t.link(e);
    s += fmt::format("  n{} -- n{} [label=\"{:.0f}GB/s\"{}];\n", l.src, l.dst, l.bandwidth_Bps / 1e9,
                     l.optical ? ", style=dashed" : "");
  }
  s += "}\n";
  return s;
}

}  // namespace sluice::net
