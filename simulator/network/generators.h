// Topology generators (parametric families) and the catalog loader (topologies/<name>.yaml).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "config/node.h"
#include "config/schema.h"
#include "network/topology.h"
#include "registry/registry.h"

namespace sluice::net {

// An 8-GPU NVSwitch server: NVLink to one logical NVSwitch crossbar, PCIe to the host CPUs.
struct ServerSpec {
  int gpus = 8;
  double nvlink_Bps = 450e9;      // per GPU per direction (NVIDIA quotes 900 GB/s as both directions)
  int64_t nvlink_latency_ns = 250;
  int host_cpus = 2;              // 0: no host nodes (fabric studies that never touch the host)
  double pcie_Bps = 64e9;         // per GPU per direction (PCIe Gen5 x16)
  int64_t pcie_latency_ns = 600;
  double gpu_usd = 0, nvswitch_usd = 0, host_usd = 0, server_other_usd = 0;
  int nvswitch_chips = 4;         // physical chips behind the logical crossbar (capex only)
  int switch_uplinks = 0;         // NVSwitch ports beyond the GPUs' (a server NIC)
  bool nvls = false;              // the NVSwitch reduces in the network (NVLink SHARP; third-generation NVSwitch, HGX H100/H200)
  // No switch: every pair of GPUs joined by one direct link of nvlink_Bps per direction (AMD's
  // xGMI / Infinity Fabric on an MI300X platform: seven links a GPU, one to each peer).
  bool mesh = false;
};
// Adds server `index` to `t`: returns its GPU node ids in local-rank order.
std::vector<int> add_server(Topology& t, int index, const ServerSpec& s);

// A two- or three-tier Clos of NVSwitch servers; rail-optimized puts local rank r of every
// server on rail leaf r, a plain fat-tree puts a whole server on one leaf.
struct ClosSpec {
  int servers = 32;
  ServerSpec server;
  bool rail_optimized = false;
  int tiers = 2;
  int switch_radix = 64;
  double oversubscription = 1.0;  // leaf down-ports : up-ports
  double nic_Bps = 50e9;          // 400 Gb/s per GPU
  int64_t link_latency_ns = 500;  // NIC or switch hop
  double switch_usd = 0, nic_usd = 0, cable_usd = 0;
  bool nic_per_server = false;    // one NIC per server (from its NVSwitch), shared by its GPUs; fat-tree only
  // Independent planes (rail-optimized only): the rails r with r mod planes = p form plane p,
  // with switch tiers of its own and no link to another plane (DeepSeek's multi-plane fat-tree).
  int planes = 1;
};
Topology build_clos(const ClosSpec& c, const std::string& name);

// A 2D/3D torus (or mesh) of devices; `twisted` applies the TPU v4 twist when the shape is
// k×k×2k or k×2k×2k (2D: k×2k): every wrap-around link of a short axis also steps +k along
// each long axis. Coordinates are kept for dimension-order routing.
struct TorusSpec {
  std::vector<int> dims{4, 4, 4};
  bool wrap = true;
  bool twisted = false;
  double link_Bps = 50e9;
  int64_t link_latency_ns = 500;
  int cube = 0;                   // >0: links crossing a cube of this edge are optical (marked)
  double device_usd = 0, link_usd = 0, optical_link_usd = 0;
  int devices_per_host = 0;
  double host_usd = 0;
};
Topology build_torus(const TorusSpec& s, const std::string& name);
// True when dims admit the twist (two distinct extents k and 2k, at least one of each).
bool twist_allowed(const std::vector<int>& dims);

// A TPU v4 pod: cubes of 4×4×4 chips wired into one full torus; with OCS the cube-face links
// are circuits through 48 OCS (one per face position and dimension), without OCS they are
// static cables.
struct PodSpec {
  std::array<int, 3> cubes{4, 4, 4};
  int cube_edge = 4;
  bool ocs = true;
  int ocs_radix = 136;
  double link_Bps = 50e9;
  int64_t link_latency_ns = 500;
  int chips_per_host = 4;
  double chip_usd = 0, host_usd = 0, ocs_usd = 0, optical_link_usd = 0, electrical_link_usd = 0, cable_usd = 0;
};
Topology build_tpu_pod(const PodSpec& p, const std::string& name);

// Builds a topology from a validated generator entry (category "topology").
using TopologyFactory = std::function<Topology(const Params& p, const std::string& name)>;

// Storage servers on the fabric (where checkpoints are written): `count` nodes, each joined by
// one link of `Bps` per direction to a switch of the fabric's top tier (the switches farthest
// from every device, spread over it, each within its radix), so writes cross the fabric as any
// flow does. Returns their node ids; throws TopologyError when the topology has no switch
// beyond the servers' own (a torus, one server) or no free port on its top tier (a full
// non-blocking Clos: every spine port carries a leaf).
std::vector<int> add_storage(Topology& t, int count, double Bps, int64_t latency_ns, double usd);

// The generators: one file each in network/topologies/, registered in category "topology".

// Loads a topology from a scenario value: a catalog name (topologies/NAME.yaml), a mapping
// {catalog: NAME, overrides...}, or an inline {kind: GENERATOR, ...}; builds and checks it.
// Every problem is a ConfigError positioned at the offending value.
Topology load_topology(const Node& spec, const Registry& reg, const std::string& path);
// The same from a catalog name, for `sluice topo NAME` and tests.
Topology load_topology_by_name(const std::string& name, const Registry& reg);

}  // namespace sluice::net
