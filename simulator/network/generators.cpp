#include "network/generators.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sluice::net {

namespace {
// A server's GPUs and what joins them: an NVSwitch crossbar (one link a GPU), or a full mesh
// of direct links (one a pair).
std::vector<int> add_server_gpus(Topology& t, int index, const ServerSpec& s) {
  std::vector<int> gpus;
  auto gpu = [&](int g) { return t.add_node(NodeInfo{fmt::format("gpu{}.{}", index, g), NodeKind::Device, 0, s.gpu_usd, {-1, -1, -1}, index}); };
  if (s.mesh) {
    if (s.switch_uplinks > 0) throw TopologyError("a mesh server has no switch to carry a server NIC");
    for (int g = 0; g < s.gpus; ++g) gpus.push_back(gpu(g));
    for (int a = 0; a < s.gpus; ++a)
      for (int b = a + 1; b < s.gpus; ++b)
        t.add_link(gpus[static_cast<size_t>(a)], gpus[static_cast<size_t>(b)], s.nvlink_Bps, s.nvlink_latency_ns, "xgmi");
    return gpus;
  }
  const int sw = t.add_node(NodeInfo{fmt::format("nvswitch{}", index), NodeKind::Switch, s.gpus + s.switch_uplinks, 0, {-1, -1, -1}, index, s.nvls});
  for (int g = 0; g < s.gpus; ++g) {
    gpus.push_back(gpu(g));
    t.add_link(gpus.back(), sw, s.nvlink_Bps, s.nvlink_latency_ns, "nvlink");
  }
  return gpus;
}
}  // namespace

std::vector<int> add_server(Topology& t, int index, const ServerSpec& s) {
  std::vector<int> gpus = add_server_gpus(t, index, s);
  // (A server of fewer GPUs than host CPUs uses as many CPUs as it has GPUs: a CPU without a
  // GPU would be a host cut off from the fabric.)
  const int hosts = std::min(s.host_cpus, s.gpus);
  for (int h = 0; h < hosts; ++h) {
    const int hv = t.add_node(NodeInfo{fmt::format("host{}.{}", index, h), NodeKind::Host, 0, s.host_usd, {-1, -1, -1}, index});
    for (int g = h * s.gpus / hosts; g < (h + 1) * s.gpus / hosts; ++g)
      t.add_link(gpus[static_cast<size_t>(g)], hv, s.pcie_Bps, s.pcie_latency_ns, "pcie");
  }
  if (s.nvswitch_chips > 0 && s.nvswitch_usd > 0) {
    bool found = false;
    for (auto& x : t.extra_capex)
      if (x.name == "nvswitch chips") { x.count += s.nvswitch_chips; found = true; }
    if (!found) t.extra_capex.push_back(CapexItem{"nvswitch chips", s.nvswitch_chips, s.nvswitch_usd});
  }
  if (s.server_other_usd > 0) {
    bool found = false;
    for (auto& x : t.extra_capex)
      if (x.name == "server chassis, CPUs, memory") { ++x.count; found = true; }
    if (!found) t.extra_capex.push_back(CapexItem{"server chassis, CPUs, memory", 1, s.server_other_usd});
  }
  return gpus;
}

namespace {
// The switch tiers above a set of leaves (one plane of the fabric): two tiers, spines that
// every leaf spreads its `up` uplinks over; three, pods of radix/2 leaves whose uplinks go to
// their pod's aggregation switches, each of which sends radix/2 uplinks to its core group.
// `prefix` names this plane's switches ("" for a single plane: the names of old).
void add_upper_tiers(Topology& t, const ClosSpec& c, const std::vector<int>& leaf_ids, int up, const std::string& prefix) {
  const int radix = c.switch_radix;
  const int leaves = static_cast<int>(leaf_ids.size());
  if (leaves == 1) return;  // one leaf switches everything
  if (c.tiers == 2) {
    const int spines = (leaves * up + radix - 1) / radix;
    std::vector<int> spine_ids;
    for (int k = 0; k < spines; ++k)
      spine_ids.push_back(t.add_node(NodeInfo{fmt::format("{}spine{}", prefix, k), NodeKind::Switch, radix, c.switch_usd, {-1, -1, -1}, -1}));
    for (int l = 0; l < leaves; ++l)
      for (int u = 0; u < up; ++u)
        t.add_link(leaf_ids[static_cast<size_t>(l)], spine_ids[static_cast<size_t>(u % spines)], c.nic_Bps, c.link_latency_ns, "uplink", c.cable_usd);
    for (int k = 0; k < spines; ++k)
      if (t.ports_used(spine_ids[static_cast<size_t>(k)]) > radix)
        throw TopologyError(fmt::format("spine '{}' needs {} ports for {} leaves but its radix is {}; use tiers: 3",
                                        t.node(spine_ids[static_cast<size_t>(k)]).name, t.ports_used(spine_ids[static_cast<size_t>(k)]), leaves, radix));
    return;
  }
  if (c.tiers != 3) throw TopologyError(fmt::format("tiers must be 2 or 3, got {}", c.tiers));
  const int leaves_per_pod = std::max(1, radix / 2);
  const int pods = (leaves + leaves_per_pod - 1) / leaves_per_pod;
  if (pods > radix)  // a core switch has a port for each pod at most: more would split the fabric
    throw TopologyError(fmt::format("{} pods of {} leaves, but a 3-tier Clos of radix {} joins at most {} pods", pods, leaves_per_pod, radix, radix));
  const int agg_up = radix / 2;
  const int cores_per_group = std::max(1, (pods * agg_up + radix - 1) / radix);
  std::vector<std::vector<int>> core_groups(static_cast<size_t>(up));
  for (int g = 0; g < up; ++g)
    for (int k = 0; k < cores_per_group; ++k)
      core_groups[static_cast<size_t>(g)].push_back(
          t.add_node(NodeInfo{fmt::format("{}core{}.{}", prefix, g, k), NodeKind::Switch, radix, c.switch_usd, {-1, -1, -1}, -1}));
  for (int p = 0; p < pods; ++p) {
    std::vector<int> aggs;
    for (int a = 0; a < up; ++a)
      aggs.push_back(t.add_node(NodeInfo{fmt::format("{}agg{}.{}", prefix, p, a), NodeKind::Switch, radix, c.switch_usd, {-1, -1, -1}, -1}));
    for (int l = p * leaves_per_pod; l < std::min(leaves, (p + 1) * leaves_per_pod); ++l)
      for (int a = 0; a < up; ++a)
        t.add_link(leaf_ids[static_cast<size_t>(l)], aggs[static_cast<size_t>(a)], c.nic_Bps, c.link_latency_ns, "uplink", c.cable_usd);
    // Pod p's uplinks continue where pod p-1's stopped, so a core group's switches share every
    // pod's uplinks evenly (each within its radix) even when they do not divide agg_up.
    for (int a = 0; a < up; ++a)
      for (int u = 0; u < agg_up; ++u) {
        const auto& grp = core_groups[static_cast<size_t>(a)];
        t.add_link(aggs[static_cast<size_t>(a)], grp[static_cast<size_t>((p * agg_up + u) % static_cast<int>(grp.size()))], c.nic_Bps,
                   c.link_latency_ns, "core", c.cable_usd);
      }
  }
}
}  // namespace

Topology build_clos(const ClosSpec& c, const std::string& name) {
  Topology t(name);
  t.family = c.planes > 1 ? "multi-plane" : c.rail_optimized ? "rail-optimized" : "fat-tree";
  if (c.servers < 1) throw TopologyError("a fabric needs at least one server");
  const int radix = c.switch_radix;
  const int down = static_cast<int>(std::floor(radix * c.oversubscription / (c.oversubscription + 1.0)));
  const int up = radix - down;
  if (down < 1 || up < 1)
    throw TopologyError(fmt::format("switch radix {} with oversubscription {} leaves {} down and {} up ports", radix, c.oversubscription, down, up));
  if (c.tiers != 2 && c.tiers != 3) throw TopologyError(fmt::format("tiers must be 2 or 3, got {}", c.tiers));
  std::vector<std::vector<int>> servers;
  std::vector<int> switch_of;  // each server's NVSwitch node (add_server adds it first)
  ServerSpec server = c.server;
  if (c.nic_per_server) server.switch_uplinks = 1;
  if (c.nic_per_server && c.rail_optimized) throw TopologyError("a rail-optimized fabric needs a NIC per GPU");
  const int gpn = c.nic_per_server ? 1 : c.server.gpus;  // NICs per server
  if (c.planes < 1 || (c.planes > 1 && (!c.rail_optimized || gpn % c.planes != 0)))
    throw TopologyError(fmt::format("{} planes need a rail-optimized fabric whose {} GPUs per server they divide", c.planes, gpn));
  for (int s = 0; s < c.servers; ++s) {
    switch_of.push_back(t.node_count());
    servers.push_back(add_server(t, s, server));
  }
  const int total = c.servers * gpn;
  // Leaves: each GPU's NIC goes to one leaf port.
  int leaves = 0;
  std::vector<int> leaf_of(static_cast<size_t>(total));
  if (c.rail_optimized) {
    const int groups = (c.servers + down - 1) / down;
    leaves = groups * gpn;
    for (int s = 0; s < c.servers; ++s)
      for (int r = 0; r < gpn; ++r) leaf_of[static_cast<size_t>(s * gpn + r)] = (s / down) * gpn + r;
  } else {
    leaves = (total + down - 1) / down;
    for (int i = 0; i < total; ++i) leaf_of[static_cast<size_t>(i)] = i / down;
  }
  // A plane is the rails r with r mod planes equal (rail leaf l carries rail l mod gpn).
  const auto plane_of_leaf = [&](int l) { return c.planes > 1 ? (l % gpn) % c.planes : 0; };
  std::vector<int> leaf_ids;
  for (int l = 0; l < leaves; ++l)
    leaf_ids.push_back(t.add_node(NodeInfo{c.planes > 1 ? fmt::format("p{}.leaf{}", plane_of_leaf(l), l) : fmt::format("leaf{}", l),
                                           NodeKind::Switch, radix, c.switch_usd, {-1, -1, -1}, -1}));
  for (int s = 0; s < c.servers; ++s)
    for (int r = 0; r < gpn; ++r)
      t.add_link(c.nic_per_server ? switch_of[static_cast<size_t>(s)] : servers[static_cast<size_t>(s)][static_cast<size_t>(r)],
                 leaf_ids[static_cast<size_t>(leaf_of[static_cast<size_t>(s * gpn + r)])], c.nic_Bps, c.link_latency_ns, "nic",
                 c.cable_usd);
  if (c.nic_usd > 0) t.extra_capex.push_back(CapexItem{c.nic_per_server ? "NICs (one per server)" : "NICs (one per GPU)", total, c.nic_usd});
  if (c.planes == 1) {
    add_upper_tiers(t, c, leaf_ids, up, "");
    return t;
  }
  // Independent planes: each plane's leaves get switch tiers of their own, with no link
  // between planes; traffic between ranks of different planes crosses inside a server first.
  for (int p = 0; p < c.planes; ++p) {
    std::vector<int> mine;
    for (int l = 0; l < leaves; ++l)
      if (plane_of_leaf(l) == p) mine.push_back(leaf_ids[static_cast<size_t>(l)]);
    add_upper_tiers(t, c, mine, up, fmt::format("p{}.", p));
  }
  return t;
}

std::vector<int> add_storage(Topology& t, int count, double Bps, int64_t latency_ns, double usd) {
  if (count <= 0) return {};
  // Hops from the nearest device, by breadth-first search from every device at once; a
  // server's own switch (group >= 0) and switches with no device below are never chosen.
  std::vector<int> hops(static_cast<size_t>(t.node_count()), -1);
  std::vector<int> frontier;
  for (int d : t.devices()) hops[static_cast<size_t>(d)] = 0, frontier.push_back(d);
  for (size_t i = 0; i < frontier.size(); ++i) {
    const int v = frontier[i];
    for (int e : t.out_links(v)) {
      const int w = t.link(e).dst;
      if (hops[static_cast<size_t>(w)] >= 0 || t.node(w).kind != NodeKind::Switch) continue;
      hops[static_cast<size_t>(w)] = hops[static_cast<size_t>(v)] + 1;
      frontier.push_back(w);
    }
  }
  int top = 0;
  for (int v = 0; v < t.node_count(); ++v)
    if (t.node(v).kind == NodeKind::Switch && t.node(v).group < 0) top = std::max(top, hops[static_cast<size_t>(v)]);
  std::vector<int> tops;
  for (int v = 0; v < t.node_count(); ++v)
    if (top > 0 && t.node(v).kind == NodeKind::Switch && t.node(v).group < 0 && hops[static_cast<size_t>(v)] == top) tops.push_back(v);
  if (tops.empty())
    throw TopologyError(fmt::format("'{}' has no fabric switch to attach storage to (storage servers need a switched scale-out fabric)", t.name()));
  // Server i goes to the first top switch with a free port from position i·n/count on, so
  // they spread over the tier (its planes, a dragonfly's groups) instead of filling its start.
  const size_t n = tops.size();
  std::vector<int> out;
  for (int i = 0; i < count; ++i) {
    const size_t from = static_cast<size_t>(i) * n / static_cast<size_t>(count);
    int sw = -1;
    for (size_t k = 0; k < n && sw < 0; ++k) {
      const int v = tops[(from + k) % n];
      if (t.node(v).radix == 0 || t.ports_used(v) < t.node(v).radix) sw = v;
    }
    if (sw < 0)
      throw TopologyError(fmt::format("every port of '{}''s top-tier switches is in use: no room for storage server {} (a larger "
                                      "switch_radix, an oversubscribed or larger fabric, or fewer storage servers)",
                                      t.name(), i));
    const int v = t.add_node(NodeInfo{fmt::format("storage{}", i), NodeKind::Host, 0, usd, {-1, -1, -1}, -1});
    t.add_link(v, sw, Bps, latency_ns, "storage");
    out.push_back(v);
  }
  t.check();
  return out;
}

bool twist_allowed(const std::vector<int>& dims) {
  if (dims.size() < 2) return false;
  const int k = *std::min_element(dims.begin(), dims.end());
  if (k < 3) return false;  // a 2-ring has no separate wrap link to twist
  int shorts = 0, longs = 0;
  for (int d : dims) {
    if (d == k) ++shorts;
    else if (d == 2 * k) ++longs;
    else return false;
  }
  return k >= 2 && shorts >= 1 && longs >= 1;
}

Topology build_torus(const TorusSpec& s, const std::string& name) {
  const int nd = static_cast<int>(s.dims.size());
  if (nd < 1 || nd > 3) throw TopologyError(fmt::format("a torus has 1 to 3 dimensions, got {}", nd));
  for (int d : s.dims)
    if (d < 1) throw TopologyError(fmt::format("torus dimension {} must be at least 1", d));
  if (s.twisted && !twist_allowed(s.dims)) {
    const std::string shape = fmt::format("{}", fmt::join(s.dims, "x"));
    throw TopologyError(fmt::format("shape {} cannot be twisted: the twist needs extents k and 2k only (k×k×2k, k×2k×2k, k×2k), k >= 3", shape));
  }
  Topology t(name);
  t.family = s.wrap ? (nd == 3 ? "torus-3d" : "torus-2d") : "mesh";
  TorusShape ts;
  ts.ndims = nd;
  for (int i = 0; i < nd; ++i) ts.dims[static_cast<size_t>(i)] = s.dims[static_cast<size_t>(i)];
  ts.twisted = s.twisted;
  ts.wrap = s.wrap;
  const int X = ts.dims[0], Y = ts.dims[1], Z = ts.dims[2];
  ts.node_at.resize(static_cast<size_t>(X * Y * Z));
  for (int z = 0; z < Z; ++z)
    for (int y = 0; y < Y; ++y)
      for (int x = 0; x < X; ++x) {
        const int cube_id = s.cube > 0 ? (x / s.cube) + ((X + s.cube - 1) / s.cube) * ((y / s.cube) + ((Y + s.cube - 1) / s.cube) * (z / s.cube)) : -1;
        const std::string nm = nd == 1 ? fmt::format("chip{}", x) : nd == 2 ? fmt::format("chip{}.{}", x, y) : fmt::format("chip{}.{}.{}", x, y, z);
        ts.node_at[static_cast<size_t>(ts.index(x, y, z))] = t.add_node(NodeInfo{nm, NodeKind::Device, 0, s.device_usd, {x, y, z}, cube_id});
      }
  const int k = *std::min_element(s.dims.begin(), s.dims.end());
  for (int z = 0; z < Z; ++z)
    for (int y = 0; y < Y; ++y)
      for (int x = 0; x < X; ++x) {
        const std::array<int, 3> c{x, y, z};
        for (int d = 0; d < nd; ++d) {
          const int ext = ts.dims[static_cast<size_t>(d)];
          if (ext == 1) continue;
          if (ext == 2 && c[static_cast<size_t>(d)] == 1) continue;  // a 2-ring has one link per pair
          std::array<int, 3> n = c;
          const bool wraps = c[static_cast<size_t>(d)] == ext - 1;
          if (wraps && !s.wrap) continue;
          n[static_cast<size_t>(d)] = (c[static_cast<size_t>(d)] + 1) % ext;
          if (wraps && s.twisted && ext == k) {
            for (int l = 0; l < nd; ++l)
              if (ts.dims[static_cast<size_t>(l)] == 2 * k) n[static_cast<size_t>(l)] = (n[static_cast<size_t>(l)] + k) % (2 * k);
          }
          const bool optical = s.cube > 0 && (wraps || (c[static_cast<size_t>(d)] + 1) % s.cube == 0);
          t.add_link(ts.node_at[static_cast<size_t>(ts.index(c[0], c[1], c[2]))], ts.node_at[static_cast<size_t>(ts.index(n[0], n[1], n[2]))],
                     s.link_Bps, s.link_latency_ns, "ici", optical ? s.optical_link_usd : s.link_usd, optical);
        }
      }
  if (s.devices_per_host > 0)
    t.extra_capex.push_back(CapexItem{"hosts", (X * Y * Z + s.devices_per_host - 1) / s.devices_per_host, s.host_usd});
  t.torus = std::move(ts);
  return t;
}

Topology build_tpu_pod(const PodSpec& p, const std::string& name) {
  const int e = p.cube_edge;
  const int X = p.cubes[0] * e, Y = p.cubes[1] * e, Z = p.cubes[2] * e;
  Topology t(name);
  t.family = p.ocs ? "tpu-v4-pod-ocs" : "tpu-v4-pod-static";
  TorusShape ts;
  ts.ndims = 3;
  ts.dims = {X, Y, Z};
  ts.node_at.resize(static_cast<size_t>(X * Y * Z));
  for (int z = 0; z < Z; ++z)
    for (int y = 0; y < Y; ++y)
      for (int x = 0; x < X; ++x) {
        const int cube = (x / e) + p.cubes[0] * ((y / e) + p.cubes[1] * (z / e));
        ts.node_at[static_cast<size_t>(ts.index(x, y, z))] =
            t.add_node(NodeInfo{fmt::format("chip{}.{}.{}", x, y, z), NodeKind::Device, 0, p.chip_usd, {x, y, z}, cube});
      }
  // One OCS per (dimension, position on a cube face): 3 × e² switches (48 for e = 4).
  std::vector<int> ocs_ids;
  if (p.ocs)
    for (int d = 0; d < 3; ++d)
      for (int q = 0; q < e * e; ++q)
        ocs_ids.push_back(t.add_node(NodeInfo{fmt::format("ocs{}.{}", "xyz"[d], q), NodeKind::Ocs, p.ocs_radix, p.ocs_usd, {-1, -1, -1}, -1}));
  for (int z = 0; z < Z; ++z)
    for (int y = 0; y < Y; ++y)
      for (int x = 0; x < X; ++x) {
        const std::array<int, 3> c{x, y, z};
        for (int d = 0; d < 3; ++d) {
          std::array<int, 3> n = c;
          const int ext = ts.dims[static_cast<size_t>(d)];
          n[static_cast<size_t>(d)] = (c[static_cast<size_t>(d)] + 1) % ext;
          const bool face = (c[static_cast<size_t>(d)] + 1) % e == 0;  // leaves the cube through a face
          const int a = ts.node_at[static_cast<size_t>(ts.index(c[0], c[1], c[2]))];
          const int b = ts.node_at[static_cast<size_t>(ts.index(n[0], n[1], n[2]))];
          if (!face) {
            t.add_link(a, b, p.link_Bps, p.link_latency_ns, "ici", p.electrical_link_usd);
          } else if (p.ocs) {
            // Face position: the two coordinates other than d, within the cube.
            const int u = c[static_cast<size_t>((d + 1) % 3)] % e, w = c[static_cast<size_t>((d + 2) % 3)] % e;
            // A circuit joins two fibers (one from each chip), each with its own optics.
            t.add_link(a, b, p.link_Bps, p.link_latency_ns, "ici-ocs", 2 * p.optical_link_usd, true,
                       ocs_ids[static_cast<size_t>(d * e * e + u * e + w)]);
          } else {
            t.add_link(a, b, p.link_Bps, p.link_latency_ns, "ici-cable", p.cable_usd);
          }
        }
      }
  t.extra_capex.push_back(CapexItem{"hosts", (X * Y * Z) / p.chips_per_host, p.host_usd});
  t.torus = std::move(ts);
  t.pod = PodShape{e, p.cubes, p.ocs};
  return t;
}

}  // namespace sluice::net
