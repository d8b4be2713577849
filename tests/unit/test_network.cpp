// Network: topology checks, routing, max-min fair flows, collectives, OCS, TPU pod placement.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>
#include <algorithm>
#include <bit>
#include <map>
#include <limits>
#include <queue>
#include <set>
#include <filesystem>

#include <fmt/format.h>

#include "config/error.h"
#include "config/node.h"
#include "config/schema.h"
#include "network/collective.h"
#include "network/generators.h"
#include "network/ocs.h"
#include "network/pod.h"
#include "registry/registry.h"

using namespace sluice;
using namespace sluice::net;

namespace {

// Records delivery times by tag.
struct Sink : FlowSink {
  std::vector<std::pair<uint64_t, int64_t>> done;
  void on_flow_done(Engine& e, uint64_t tag) override { done.push_back({tag, e.now().count_ns()}); }
};

Topology pair_topology(double bw, int64_t lat) {
  Topology t("pair");
  const int a = t.add_node(NodeInfo{"a", NodeKind::Device});
  const int b = t.add_node(NodeInfo{"b", NodeKind::Device});
  t.add_link(a, b, bw, lat);
  return t;
}

using sluice::testing::registry;

}  // namespace

TEST_CASE("flow: two flows on one link each get half") {
  const Topology t = pair_topology(100e9, 1000);
  Engine e(1);
  Router r(t);
  FlowSim sim(e, t, r);
  Sink s;
  const uint32_t f1 = sim.start(0, 1, 1e9, &s, 1);
  const uint32_t f2 = sim.start(0, 1, 1e9, &s, 2);
  e.step();  // the single batched recomputation
  CHECK(sim.stats().recomputes == 1);
  CHECK(sim.rate_Bps(f1) == doctest::Approx(50e9));
  CHECK(sim.rate_Bps(f2) == doctest::Approx(50e9));
  e.run();
  REQUIRE(s.done.size() == 2);
  // 1 GB at 50 GB/s = 20 ms, plus the hop latency.
  CHECK(s.done[0].second == 20'000'000 + 1000);
  CHECK(s.done[1].second == 20'000'000 + 1000);
}

TEST_CASE("flow: max-min fair shares and re-sharing when a flow ends") {
  // a -> m -> b: link a-m 100 GB/s, link m-b 30 GB/s. Flow X a->b, flow Y a->m, flow Z m->b.
  Topology t("chain");
  const int a = t.add_node(NodeInfo{"a", NodeKind::Device});
  const int m = t.add_node(NodeInfo{"m", NodeKind::Device});
  const int b = t.add_node(NodeInfo{"b", NodeKind::Device});
  t.add_link(a, m, 100e9, 0);
  t.add_link(m, b, 30e9, 0);
  Engine e(1);
  Router r(t);
  FlowSim sim(e, t, r);
  Sink s;
  const uint32_t x = sim.start(a, b, 30e6, &s, 1);
  const uint32_t y = sim.start(a, m, 1e9, &s, 2);
  const uint32_t z = sim.start(m, b, 15e6, &s, 3);
  e.step();
  // m-b is the bottleneck: X and Z get 15 GB/s each; Y takes the rest of a-m: 85 GB/s.
  CHECK(sim.rate_Bps(x) == doctest::Approx(15e9));
  CHECK(sim.rate_Bps(z) == doctest::Approx(15e9));
  CHECK(sim.rate_Bps(y) == doctest::Approx(85e9));
  e.run();
  // Z ends at 1 ms; X then runs alone at 30 GB/s: 15 MB left -> 0.5 ms more.
  int64_t tx = 0, tz = 0;
  for (auto [tag, t_ns] : s.done) {
    if (tag == 1) tx = t_ns;
    if (tag == 3) tz = t_ns;
  }
  CHECK(tz == 1'000'000);
  CHECK(tx == 1'500'000);
}

TEST_CASE("flow: starts at one instant share one recomputation, only the touched component is re-rated") {
  // Two disjoint pairs: a flow ending on one never re-rates the other.
  Topology t("two-pairs");
  for (int i = 0; i < 4; ++i) t.add_node(NodeInfo{fmt::format("d{}", i), NodeKind::Device});
  t.add_link(0, 1, 10e9, 0);
  t.add_link(2, 3, 10e9, 0);
  t.add_link(1, 2, 10e9, 0);
  Engine e(1);
  Router r(t);
  FlowSim sim(e, t, r);
  Sink s;
  for (int k = 0; k < 10; ++k) sim.start(0, 1, 1e6 * (k + 1), &s, static_cast<uint64_t>(k));
  sim.start(2, 3, 1e9, &s, 99);
  e.step();
  CHECK(sim.stats().recomputes == 1);
  CHECK(sim.stats().flows_rated == 11);
  const uint64_t before = sim.stats().flows_rated;
  e.step();  // the first flow on 0->1 ends
  e.step();  // its recomputation: only the 9 flows left on 0->1
  CHECK(sim.stats().flows_rated - before == 9);
  e.run();
  CHECK(s.done.size() == 11);
}

TEST_CASE("flow: ring all-reduce takes 2(n-1)/n*S/B + 2(n-1) hop latencies") {
  for (int n : {4, 8, 16}) {
    TorusSpec spec;
    spec.dims = {n};
    spec.link_Bps = 50e9;
    spec.link_latency_ns = 700;
    const Topology t = build_torus(spec, "ring");
    const double S = 64.0 * 1024 * 1024 * n;  // S/n/B is a whole number of ns
    const SimTime got = collective_time(t, CollectiveKind::AllReduceRing, ring_order(t), S);
    const double expect = 2.0 * (n - 1) / n * S / 50e9 * 1e9 + 2.0 * (n - 1) * 700;
    CHECK(std::fabs(static_cast<double>(got.count_ns()) - expect) <= 2.0 * (n - 1));  // within per-step rounding
  }
  // On a 3D torus, the snake ring keeps neighbours adjacent: same formula, 64 chips.
  TorusSpec spec;
  spec.dims = {4, 4, 4};
  const Topology cube = build_torus(spec, "cube");
  const double S = 1e9;
  const SimTime got = collective_time(cube, CollectiveKind::AllReduceRing, ring_order(cube), S);
  const double expect = 2.0 * 63 / 64 * S / 50e9 * 1e9 + 2.0 * 63 * 500;
  CHECK(std::fabs(static_cast<double>(got.count_ns()) - expect) <= 2.0 * 63);
}

TEST_CASE("collectives: all-gather, reduce-scatter, send/recv, tree and hierarchical all-reduce") {
  TorusSpec spec;
  spec.dims = {8};
  spec.link_latency_ns = 0;
  const Topology t = build_torus(spec, "ring8");
  const auto devs = ring_order(t);
  const double S = 8e8;
  const int64_t step = static_cast<int64_t>(S / 8 / 50e9 * 1e9);
  CHECK(collective_time(t, CollectiveKind::AllGather, devs, S).count_ns() == 7 * step);
  CHECK(collective_time(t, CollectiveKind::ReduceScatter, devs, S).count_ns() == 7 * step);
  CHECK(collective_time(t, CollectiveKind::SendRecv, {devs[0], devs[1]}, S).count_ns() == static_cast<int64_t>(S / 50e9 * 1e9));
  // A pipelined tree is slower than the ring here but finishes; more chunks help it.
  CollectiveOptions one, many;
  many.chunks = 16;
  const SimTime tree1 = collective_time(t, CollectiveKind::AllReduceTree, devs, S, one);
  const SimTime tree16 = collective_time(t, CollectiveKind::AllReduceTree, devs, S, many);
  CHECK(tree16 < tree1);
  CHECK(tree1 > SimTime::zero());
  // Hierarchical all-reduce on a fat-tree: groups are servers; faster than one flat ring (whose
  // server crossings share one NIC each), slower than NCCL's channels (every NIC, no phases).
  ClosSpec c;
  c.servers = 4;
  c.server.host_cpus = 0;
  const Topology ft = build_clos(c, "ft");
  CollectiveOptions single;
  single.channels = 1;
  const SimTime flat = collective_time(ft, CollectiveKind::AllReduceRing, ft.devices(), 1e9, single);
  const SimTime hier = collective_time(ft, CollectiveKind::AllReduceHierarchical, ft.devices(), 1e9);
  const SimTime channels = collective_time(ft, CollectiveKind::AllReduceRing, ft.devices(), 1e9);
  CHECK(hier < flat);
  CHECK(channels < hier);
}

TEST_CASE("collectives: all-to-all through one switch is limited by each NIC") {
  Topology t("star");
  const int sw = t.add_node(NodeInfo{"sw", NodeKind::Switch, 8});
  std::vector<int> devs;
  for (int i = 0; i < 4; ++i) {
    devs.push_back(t.add_node(NodeInfo{fmt::format("d{}", i), NodeKind::Device}));
    t.add_link(devs.back(), sw, 10e9, 0);
  }
  // Each device sends 3/4 of S out of a 10 GB/s port.
  const double S = 4e9;
  CHECK(collective_time(t, CollectiveKind::AllToAll, devs, S).count_ns() == static_cast<int64_t>(0.75 * S / 10e9 * 1e9));
}

TEST_CASE("routing: dimension order takes the shorter way round each ring") {
  TorusSpec spec;
  spec.dims = {8, 4, 4};
  const Topology t = build_torus(spec, "t");
  Router r(t);
  CHECK(r.dimension_order());
  const auto& ts = *t.torus;
  const int src = ts.node_at[static_cast<size_t>(ts.index(0, 0, 0))];
  const int dst = ts.node_at[static_cast<size_t>(ts.index(7, 3, 2))];
  const auto path = r.route(src, dst);
  CHECK(path.size() == 1 + 1 + 2);  // x: 0->7 wraps (1 hop); y: 0->3 wraps (1); z: 2 either way
  CHECK(t.link(path.front()).dst == ts.node_at[static_cast<size_t>(ts.index(7, 0, 0))]);
  CHECK(t.link(path.back()).dst == dst);
  // Shortest-path routing agrees on the length.
  Router sp(t, RoutePolicy::ShortestPath);
  CHECK(sp.route(src, dst).size() == 4);
}

TEST_CASE("topology: fat-tree, rail-optimized and 3-tier fabrics / intra-server traffic stays on NVLink") {
  ClosSpec c;
  c.servers = 32;
  c.server.host_cpus = 0;
  const Topology ft = build_clos(c, "ft");
  ft.check();
  CHECK(ft.devices().size() == 256);
  CHECK(diameter_hops(ft) == 4);
  CHECK(bisection_bandwidth(ft).bandwidth_Bps == doctest::Approx(256 * 50e9 / 2));
  c.oversubscription = 3;
  const Topology over = build_clos(c, "ft3");
  CHECK(bisection_bandwidth(over).bandwidth_Bps < bisection_bandwidth(ft).bandwidth_Bps);
  Router r(ft);
  const auto p = r.route(ft.devices()[0], ft.devices()[1]);
  REQUIRE(p.size() == 2);
  CHECK(ft.link(p[0]).label == "nvlink");
  c.oversubscription = 1;
  c.rail_optimized = true;
  const Topology rail = build_clos(c, "rail");
  Router rr(rail);
  // Local rank 0 of server 0 to local rank 0 of server 5: one rail leaf, no spine.
  CHECK(rr.route(rail.devices()[0], rail.devices()[5 * 8]).size() == 2);
  c.rail_optimized = false;
  c.servers = 256;
  c.switch_radix = 32;
  CHECK_THROWS_AS(build_clos(c, "too-big").check(), TopologyError);
  c.tiers = 3;
  const Topology ft3 = build_clos(c, "ft3tier");
  ft3.check();
  CHECK(diameter_hops(ft3) == 6);
}

TEST_CASE("topology: tori, twisted tori and the TPU v4 pod") {
  TorusSpec spec;
  spec.dims = {4, 4, 8};
  const Topology reg = build_torus(spec, "r");
  spec.twisted = true;
  const Topology tw = build_torus(spec, "t");
  tw.check();
  for (int v : tw.devices()) CHECK(tw.out_links(v).size() == 6);
  CHECK(diameter_hops(reg) == 8);
  CHECK(diameter_hops(tw) < diameter_hops(reg));
  CHECK(bisection_bandwidth(reg).bandwidth_Bps == doctest::Approx(2 * 16 * 50e9));
  CHECK(bisection_bandwidth(tw).bandwidth_Bps > bisection_bandwidth(reg).bandwidth_Bps);
  spec.dims = {4, 4, 12};
  CHECK_THROWS_AS(build_torus(spec, "bad"), TopologyError);
  PodSpec p;
  const Topology pod = build_tpu_pod(p, "pod");
  pod.check();
  CHECK(pod.devices().size() == 4096);
  int ocs = 0, optical = 0;
  for (int v = 0; v < pod.node_count(); ++v)
    if (pod.node(v).kind == NodeKind::Ocs) {
      ++ocs;
      CHECK(pod.ports_used(v) == 128);  // 64 cubes x 2 faces, of 136 ports
    }
  for (int e = 0; e < pod.link_count(); e += 2) optical += pod.link(e).optical;
  CHECK(ocs == 48);
  CHECK(optical == 3072);  // 6,144 fibers, two per circuit
  for (int v : pod.devices()) CHECK(pod.out_links(v).size() == 6);
  CHECK(diameter_hops(pod) == 24);
}

TEST_CASE("topology: every catalog entry loads and checks / bad entries name the element") {
  for (const auto& name : catalog_names("topologies")) {
    CAPTURE(name);
    const Topology t = load_topology_by_name(name, registry());
    CHECK(t.devices().size() >= 8);
    CHECK(capex(t).total_usd() > 0);
  }
  auto fails = [&](const std::string& yaml, const std::string& needle) {
    const Node n = load_yaml_string(yaml, "test.yaml");
    try {
      load_topology(n, registry(), "topology");
      FAIL("expected a ConfigError");
    } catch (const ConfigError& e) {
      CAPTURE(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  fails("{kind: explicit, nodes: [{name: a, kind: device}, {name: b, kind: device}], links: [{a: a, b: c, bandwidth: 1GB/s}]}", "'c'");
  fails("{kind: explicit, nodes: [{name: a, kind: device}, {name: b, kind: device}, {name: s, kind: switch, radix: 1}], "
        "links: [{a: a, b: s, bandwidth: 1GB/s}, {a: b, b: s, bandwidth: 1GB/s}]}",
        "switch 's' uses 2 ports but its radix is 1");
  fails("{kind: explicit, nodes: [{name: a, kind: device}, {name: b, kind: device}], links: []}", "'b' is not connected");
  fails("{kind: torus-3d, dims: [4, 4, 6], twisted: true}", "cannot be twisted");
  fails("{kind: fat-tree, servers: 200}", "use tiers: 3");
  fails("nonexistent-topology", "dangling catalog reference");
}

TEST_CASE("ocs: reprogrammed circuits carry nothing during the reconfiguration delay") {
  Topology t("ocs-test");
  std::vector<int> d;
  for (int i = 0; i < 6; ++i) d.push_back(t.add_node(NodeInfo{fmt::format("d{}", i), NodeKind::Device}));
  const int node = t.add_node(NodeInfo{"ocs0", NodeKind::Ocs, 8});
  Engine e(1);
  Router r(t, RoutePolicy::ShortestPath);
  FlowSim sim(e, t, r);
  const SimTime delay = SimTime::ms(5);
  Ocs ocs(node, 8, delay, 10e9, 100);
  for (int i = 0; i < 6; ++i) ocs.attach(i, d[static_cast<size_t>(i)]);
  CHECK(ocs.program(t, sim, {{0, 1}, {2, 3}}) == delay);
  Sink s;
  sim.start(d[0], d[1], 10e6, &s, 1);  // 1 ms at 10 GB/s, but only once the circuit is up
  e.run();
  REQUIRE(s.done.size() == 1);
  CHECK(s.done[0].second == 5'000'000 + 1'000'000 + 100);
  // Reprogram 2-3 into 2-4 while flows run: 0-1 is untouched; the flow on 2-3 stalls.
  const int64_t t0 = e.now().count_ns();
  sim.start(d[0], d[1], 10e6, &s, 2);
  const uint32_t stalled = sim.start(d[2], d[3], 10e6, &s, 3);
  e.step();
  CHECK_THROWS_AS(ocs.program(t, sim, {{0, 1}, {2, 4}, {4, 5}}), std::invalid_argument);
  ocs.program(t, sim, {{0, 1}, {2, 4}});
  sim.start(d[2], d[4], 10e6, &s, 4);
  e.run();
  int64_t t2 = -1, t4 = -1;
  for (auto [tag, when] : s.done) {
    if (tag == 2) t2 = when;
    if (tag == 4) t4 = when;
    CHECK(tag != 3);
  }
  CHECK(t2 == t0 + 1'000'000 + 100);
  CHECK(t4 == t0 + 5'000'000 + 1'000'000 + 100);
  CHECK(sim.flow_active(stalled));
  CHECK(sim.rate_Bps(stalled) == 0);
}

TEST_CASE("ocs pod: any free healthy cubes vs a contiguous static block") {
  PodAllocator with_ocs({4, 4, 4}, true, PlacementPolicy::FirstFit);
  PodAllocator fixed({4, 4, 4}, false, PlacementPolicy::FirstFit);
  // Free cubes scattered like a checkerboard: no 2x1x1 block is free, yet 32 cubes are.
  uint64_t checker = 0;
  for (int z = 0; z < 4; ++z)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x)
        if ((x + y + z) % 2 == 0) checker |= uint64_t{1} << (x + 4 * (y + 4 * z));
  CHECK(with_ocs.place(CubeShape{2, 2, 2}, checker).has_value());
  CHECK_FALSE(fixed.place(CubeShape{2, 1, 1}, checker).has_value());
  CHECK(fixed.place(CubeShape{1, 1, 1}, checker).has_value());
  // A static block may wrap round the torus and turn.
  const uint64_t all = ~uint64_t{0};
  const auto m = fixed.place(CubeShape{1, 1, 4}, all);
  REQUIRE(m.has_value());
  CHECK(std::popcount(*m) == 4);
  CHECK(fixed.feasible(CubeShape{4, 4, 4}));
  CHECK_FALSE(fixed.feasible(CubeShape{1, 1, 5}));
  // Best-fit packs next to busy cubes: with cube 0 busy it starts beside it, not far away.
  PodAllocator best({4, 4, 4}, false, PlacementPolicy::BestFit);
  const uint64_t free = all & ~(uint64_t{1} << 21);
  const auto b = best.place(CubeShape{1, 1, 1}, free);
  REQUIRE(b.has_value());
  CHECK((fixed.place(CubeShape{1, 1, 1}, free).value() & (uint64_t{1} << 0)) != 0);
  const int chosen = std::countr_zero(*b);
  const int dx = std::abs(chosen % 4 - 21 % 4), dy = std::abs(chosen / 4 % 4 - 21 / 4 % 4), dz = std::abs(chosen / 16 - 21 / 16);
  CHECK(dx + dy + dz == 1);
}

TEST_CASE("topology: a torus with a 2-ring cannot be twisted (no separate wrap link to twist)") {
  CHECK_FALSE(twist_allowed({2, 2, 4}));
  CHECK_FALSE(twist_allowed({2, 4}));
  CHECK(twist_allowed({4, 4, 8}));
  CHECK(twist_allowed({4, 8, 8}));
}

namespace {
// `servers` 8-GPU servers (no host CPUs) on a rail-optimized or a non-blocking fat-tree Clos.
Topology servers_clos(int servers, bool rail) {
  ClosSpec c;
  c.servers = servers;
  c.rail_optimized = rail;
  c.server.host_cpus = 0;
  return build_clos(c, rail ? "rail" : "fat-tree");
}
}  // namespace

TEST_CASE("collectives as NCCL runs them: a data-parallel ring over two 8-GPU servers uses every NIC, on fat-tree and rail-optimized alike") {
  // tp 1, dp 16 on two servers with eight 400 Gb/s NICs each: NCCL's bus bandwidth is about
  // the sum of the NICs, so the all-reduce takes 2(n-1)/n S / (8 x 50 GB/s); the NVLink hops
  // inside the servers (450 GB/s) and the latencies add a little.
  const double S = 2.6e9;
  const double ideal_s = 2.0 * 15 / 16 * S / (8 * 50e9);
  for (const bool rail : {false, true}) {
    CAPTURE(rail);
    const Topology t = servers_clos(2, rail);
    const std::vector<int> devs = t.devices();
    REQUIRE(devs.size() == 16);
    const double got = collective_time(t, CollectiveKind::AllReduceRing, devs, S).to_seconds();
    CAPTURE(got);
    CHECK(got >= ideal_s);
    CHECK(got <= 1.15 * ideal_s);
    // One ring crosses each server boundary through one NIC: about 8x slower.
    CollectiveOptions one;
    one.channels = 1;
    CHECK(collective_time(t, CollectiveKind::AllReduceRing, devs, S, one).to_seconds() > 6 * ideal_s);
    // All-gather and reduce-scatter run the same channels: half the all-reduce's bytes.
    CHECK(collective_time(t, CollectiveKind::AllGather, devs, S).to_seconds() <= 1.15 * ideal_s / 2);
    // Hierarchical stays an explicit choice: its phases inside the servers come on top.
    CHECK(collective_time(t, CollectiveKind::AllReduceHierarchical, devs, S).to_seconds() <= 1.5 * ideal_s);
  }
}

TEST_CASE("ring channels: every device sends and receives one channel across servers, rail to rail") {
  ClosSpec c;
  c.servers = 4;
  c.rail_optimized = true;
  c.server.host_cpus = 0;
  const Topology t = build_clos(c, "rail");
  const std::vector<int> devs = t.devices();
  const auto channels = ring_channels(t, devs);
  REQUIRE(channels.size() == 8);
  std::map<int, int> sends, receives;
  for (const auto& ring : channels) {
    std::vector<int> sorted = ring;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::vector<int>(devs.begin(), devs.end()));  // a permutation of the group
    for (size_t i = 0; i < ring.size(); ++i) {
      const int a = ring[i], b = ring[(i + 1) % ring.size()];
      if (t.node(a).group == t.node(b).group) continue;
      ++sends[a];
      ++receives[b];
      // Rail to rail: the same local rank on both sides (an even number of servers, so the
      // crossing that closes the ring too).
      const auto rank = [&](int d) { return static_cast<int>(std::find(devs.begin(), devs.end(), d) - devs.begin()) % 8; };
      CHECK(rank(a) == rank(b));
    }
  }
  CHECK(sends.size() == 32);  // every device's NIC sends...
  CHECK(receives.size() == 32);
  for (const auto& [d, n] : sends) CHECK(n == 1);  // ...one channel's share
  for (const auto& [d, n] : receives) CHECK(n == 1);
  // An odd number of servers: the same shares, and only the hop closing each ring changes rail.
  const std::vector<int> three(devs.begin(), devs.begin() + 24);
  std::map<int, int> sends3;
  for (const auto& ring : ring_channels(t, three)) {
    int cross_rail = 0;
    for (size_t i = 0; i < ring.size(); ++i) {
      const int a = ring[i], b = ring[(i + 1) % ring.size()];
      if (t.node(a).group == t.node(b).group) continue;
      ++sends3[a];
      const auto rank = [&](int d) { return static_cast<int>(std::find(devs.begin(), devs.end(), d) - devs.begin()) % 8; };
      cross_rail += rank(a) != rank(b);
    }
    CHECK(cross_rail == 1);
  }
  CHECK(sends3.size() == 24);
  for (const auto& [d, n] : sends3) CHECK(n == 1);
  // One device per server, or a group inside one server: a single ring in the given order.
  CHECK(ring_channels(t, {devs[0], devs[8], devs[16]}).size() == 1);
  CHECK(ring_channels(t, std::vector<int>(devs.begin(), devs.begin() + 8)).size() == 1);
}

TEST_CASE("routing: the ECMP hash seed re-draws equal-cost choices deterministically, seed 0 is the built-in hash") {
  ClosSpec c;
  c.servers = 16;
  c.server.host_cpus = 0;
  c.switch_radix = 16;  // several leaves and spines: choices at the leaf
  const Topology t = build_clos(c, "ft");
  const auto devs = t.devices();
  auto routes = [&](uint64_t seed) {
    Router r(t);
    r.set_hash_seed(seed);
    std::vector<std::vector<int>> all;
    for (size_t i = 0; i < devs.size(); i += 9) all.push_back(r.route(devs[i], devs[(i + 64) % devs.size()], i));
    return all;
  };
  Router plain(t);
  std::vector<std::vector<int>> builtin;
  for (size_t i = 0; i < devs.size(); i += 9) builtin.push_back(plain.route(devs[i], devs[(i + 64) % devs.size()], i));
  CHECK(routes(0) == builtin);
  CHECK(routes(7) == routes(7));
  CHECK(routes(7) != routes(0));
  for (const auto& r : routes(7)) CHECK(r.size() == builtin.front().size());  // still shortest
}

TEST_CASE("adaptive routing: a flow is split evenly over the equal-cost paths and delivered once") {
  ClosSpec c;
  c.servers = 16;
  c.server.host_cpus = 0;
  c.switch_radix = 16;
  const Topology t = build_clos(c, "ft");
  const auto devs = t.devices();
  Engine e(1);
  Router r(t);
  FlowSim sim(e, t, r);
  sim.set_adaptive(true);
  const int width = r.spray_width(devs[0], devs[100]);
  REQUIRE(width > 1);
  // Its parts take distinct first branches.
  std::set<std::vector<int>> paths;
  for (int i = 0; i < width; ++i) {
    std::vector<int> p;
    r.route_part(devs[0], devs[100], 0, i, p);
    paths.insert(p);
  }
  CHECK(static_cast<int>(paths.size()) == width);
  Sink s;
  sim.start(devs[0], devs[100], 1e9, &s, 42);
  e.run();
  REQUIRE(s.done.size() == 1);
  CHECK(s.done[0].first == 42);
  CHECK(sim.stats().sprayed == 1);
  CHECK(sim.stats().completed == static_cast<uint64_t>(width));
  // Between switches each part crosses a leaf-spine and a spine-leaf link of its own: 2 x width
  // distinct links, which together carried the bytes twice (up and down), each part 1/width.
  double between = 0;
  int used = 0;
  const auto carried = sim.carried_link_bytes();
  for (int l = 0; l < t.link_count(); ++l)
    if (t.node(t.link(l).src).kind == NodeKind::Switch && t.node(t.link(l).dst).kind == NodeKind::Switch && carried[static_cast<size_t>(l)] > 0) {
      between += carried[static_cast<size_t>(l)];
      ++used;
      CHECK(carried[static_cast<size_t>(l)] == doctest::Approx(1e9 / width));
    }
  CHECK(used == 2 * width);
  CHECK(between == doctest::Approx(2e9));
  CHECK(sim.stats().bytes_started == doctest::Approx(1e9));
  // A dimension-order torus has one path: nothing is split.
  TorusSpec ts;
  ts.dims = {4, 4, 1};
  const Topology torus = build_torus(ts, "t");
  Router rt(torus);
  CHECK(rt.spray_width(torus.devices()[0], torus.devices()[5]) == 1);
}

TEST_CASE("routing you choose: a fat-tree's DP all-reduce is ECMP luck, adaptive routing reaches rail-optimized's") {
  // GPT-3 13B (training-gpt3-13b.yaml): per-flow ECMP collides the DP rings on the spine
  // uplinks depending on the hash; split flows do not, and match rail-optimized wiring.
  const std::string file = std::string(SLUICE_TESTS_DIR) + "/../scenarios/training-gpt3-13b.yaml";
  auto dp_ms = [&](std::vector<std::string> sets) {
    sets.push_back("workloads.0.iterations=1");
    Scenario sc = load_scenario(file, sets, registry());
    Recorder rec;
    run_into(sc, rec, {});
    return rec.metrics()["training"]["dp_allreduce_ms"].get<double>();
  };
  const double rail = dp_ms({"cluster.topology=rail-optimized"});
  const double adaptive = dp_ms({"cluster.routing=adaptive"});
  double lo = 1e18, hi = 0;
  for (int seed = 0; seed < 6; ++seed) {
    const double x = dp_ms({fmt::format("cluster.hash_seed={}", seed)});
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  CAPTURE(rail);
  CAPTURE(adaptive);
  CAPTURE(lo);
  CAPTURE(hi);
  CHECK(adaptive == doctest::Approx(rail).epsilon(0.02));
  CHECK(lo > 1.5 * adaptive);  // every seed collides somewhere
  CHECK(hi > 1.2 * lo);        // and how much is luck
  CHECK(dp_ms({"cluster.topology=rail-optimized", "cluster.hash_seed=3"}) == doctest::Approx(rail));
  // The fabric's own account: the routing, the most loaded link, and how many flows shared
  // their bottleneck (ECMP's collisions make some; split flows' parts nearly all share links,
  // with each other, so the fraction is no measure of adaptive routing's gain).
  auto fabric = [&](const std::string& routing) {
    Scenario sc = load_scenario(file, {"workloads.0.iterations=1", "cluster.routing=" + routing}, registry());
    Recorder rec;
    run_into(sc, rec, {});
    return rec.metrics()["world"]["fabric"];
  };
  const Json ecmp = fabric("ecmp"), ar = fabric("adaptive");
  CHECK(ecmp["routing"] == "ecmp");
  CHECK(ar["routing"] == "adaptive");
  CHECK(ar["flows_split"].get<double>() > 0);
  CHECK(ecmp["flows_split"].get<double>() == 0);
  CHECK(ecmp["most_loaded_link"]["bytes"].get<double>() > 0);
  CHECK(ecmp["most_loaded_link"]["mean_utilization"].get<double>() > 0);
  CHECK(ecmp["most_loaded_link"]["mean_utilization"].get<double>() <= 1);
  CHECK(ecmp["shared_bottleneck_fraction"].get<double>() > 0);
  CHECK(ecmp["shared_bottleneck_fraction"].get<double>() <= 1);
  CHECK(ar["shared_bottleneck_fraction"].get<double>() <= 1);
}

TEST_CASE("collectives as NCCL runs them: its tree (chains inside servers, a double binary tree across) and its choice") {
  // tp 1, dp 16 on two servers with eight 400 Gb/s NICs each. Per channel (one per NIC) each
  // server's devices form a chain to its head, and the two heads form both binary trees, each
  // carrying S / 16: a head's NIC carries S / 8 each way (its parent or child in each tree),
  // half the ring's 2(n-1)/n S / 8. But every chain device but a head sends up and every one
  // but a tail sends down, in all 16 trees: 2(m-1)/m S = 1.75 S over its 450 GB/s NVLink, the
  // bound at two servers (10.1 ms against the NICs' 6.5 ms; the ring takes 12.2 ms).
  const double S = 2.6e9;
  const double nic_bound = S / (8 * 50e9), nvlink_bound = 2.0 * 7 / 8 * S / 450e9;
  CHECK(nvlink_bound * 1e3 == doctest::Approx(10.11).epsilon(0.001));
  for (const bool rail : {false, true}) {
    CAPTURE(rail);
    const Topology t = servers_clos(2, rail);
    const std::vector<int> devs = t.devices();
    const double ring = collective_time(t, CollectiveKind::AllReduceRing, devs, S).to_seconds();
    const double tree = collective_time(t, CollectiveKind::AllReduceNcclTree, devs, S).to_seconds();
    MESSAGE("dp 16 on 2 servers (" << std::string(rail ? "rail" : "fat-tree") << "): ring " << ring * 1e3 << " ms, NCCL tree "
                                     << tree * 1e3 << " ms");
    CHECK(tree >= std::max(nic_bound, nvlink_bound));
    CHECK(tree <= 1.05 * std::max(nic_bound, nvlink_bound));
    // The choice follows the predicted times, and the prediction is close to what runs.
    Router router(t, RoutePolicy::Auto);
    const AllReduceEstimate e = allreduce_choice(t, router, devs, S);
    CHECK(e.ring_ns / 1e9 == doctest::Approx(ring).epsilon(0.05));
    CHECK(e.tree_ns / 1e9 == doctest::Approx(tree).epsilon(0.1));
    CHECK(e.choice == CollectiveKind::AllReduceNcclTree);
    CHECK(collective_time(t, CollectiveKind::AllReduceAuto, devs, S).to_seconds() == doctest::Approx(tree));
  }
  // 16 servers (128 GPUs): the ring's 2(n-1) = 254 steps of latency against the tree's 2(7 + 4)
  // hops. Small all-reduces go by the tree, large ones by the ring, as NCCL's tuner picks; the
  // pick is the faster of the two as simulated.
  const Topology t = servers_clos(16, true);
  Router router(t, RoutePolicy::Auto);
  for (const double bytes : {1e5, 1e6, 1e8, 1e9}) {
    CAPTURE(bytes);
    const double ring = collective_time(t, CollectiveKind::AllReduceRing, t.devices(), bytes).to_seconds();
    const double tree = collective_time(t, CollectiveKind::AllReduceNcclTree, t.devices(), bytes).to_seconds();
    const AllReduceEstimate e = allreduce_choice(t, router, t.devices(), bytes);
    CHECK((e.choice == CollectiveKind::AllReduceNcclTree) == (bytes <= 1e6));
    CHECK((e.choice == CollectiveKind::AllReduceNcclTree ? tree : ring) <= std::min(tree, ring));
  }
}

TEST_CASE("collectives as NCCL runs them: NVLink SHARP inside an NVSwitch server, and across servers") {
  // One HGX server, 8 GPUs, 450 GB/s NVLink each way. NVLS: each GPU's share is read-reduced by
  // the switch and multicast back, so a GPU's link carries S(1 + 1/8) each way; the ring's
  // 2(n-1)/n S = 1.75 S: NVLS is 1.56x faster on bandwidth (an ideal the switch's reduction
  // engines may not reach: a known gap, no H100 measurement to fit it to).
  Topology one("hgx");
  ServerSpec spec;
  spec.host_cpus = 0;
  spec.nvls = true;
  const std::vector<int> devs = add_server(one, 0, spec);
  one.check();
  const double S = 1e9;
  const double nvls = collective_time(one, CollectiveKind::AllReduceNvls, devs, S).to_seconds();
  const double ring = collective_time(one, CollectiveKind::AllReduceRing, devs, S).to_seconds();
  CHECK(nvls == doctest::Approx(S * 9 / 8 / 450e9).epsilon(0.01));
  CHECK(ring / nvls == doctest::Approx(1.75 / 1.125).epsilon(0.02));
  Router router(one, RoutePolicy::Auto);
  const AllReduceEstimate e = allreduce_choice(one, router, devs, S);
  CHECK(e.nvls_ns / 1e9 == doctest::Approx(nvls).epsilon(0.02));
  CHECK(e.choice == CollectiveKind::AllReduceNvls);
  CHECK(collective_time(one, CollectiveKind::AllReduceAuto, devs, S).to_seconds() == doctest::Approx(nvls));
  // A tiny all-reduce: NVLS pays two hops, the ring 2(n-1) of them.
  CHECK(collective_time(one, CollectiveKind::AllReduceNvls, devs, 1e3) < collective_time(one, CollectiveKind::AllReduceRing, devs, 1e3));
  // Where the NVSwitch does not reduce (A100's, or nvls: false), NVLS is refused and auto never picks it.
  Topology plain("hgx-a100");
  spec.nvls = false;
  const std::vector<int> pdevs = add_server(plain, 0, spec);
  plain.check();
  CHECK_THROWS_WITH_AS(collective_time(plain, CollectiveKind::AllReduceNvls, pdevs, S), doctest::Contains("NVLink SHARP"), std::invalid_argument);
  Router prouter(plain, RoutePolicy::Auto);
  CHECK(allreduce_choice(plain, prouter, pdevs, S).choice != CollectiveKind::AllReduceNvls);
  // Two servers with NVLS: the switches reduce-scatter, a ring per local rank crosses the
  // network with S/8, the switches all-gather. Its estimate tracks the simulation, and auto
  // runs the fastest of the three as simulated.
  ClosSpec c;
  c.servers = 2;
  c.rail_optimized = true;
  c.server.host_cpus = 0;
  c.server.nvls = true;
  const Topology two = build_clos(c, "rail-nvls");
  Router router2(two, RoutePolicy::Auto);
  for (const double bytes : {1e5, 1e7, 2.6e9}) {
    CAPTURE(bytes);
    const double n2 = collective_time(two, CollectiveKind::AllReduceNvls, two.devices(), bytes).to_seconds();
    const double r2 = collective_time(two, CollectiveKind::AllReduceRing, two.devices(), bytes).to_seconds();
    const double t2 = collective_time(two, CollectiveKind::AllReduceNcclTree, two.devices(), bytes).to_seconds();
    const AllReduceEstimate e2 = allreduce_choice(two, router2, two.devices(), bytes);
    MESSAGE("dp 16 on 2 NVLS servers, " << bytes << " B: ring " << r2 * 1e3 << " ms, tree " << t2 * 1e3 << " ms, nvls " << n2 * 1e3 << " ms");
    CHECK(e2.nvls_ns / 1e9 == doctest::Approx(n2).epsilon(0.1));
    const double picked = collective_time(two, CollectiveKind::AllReduceAuto, two.devices(), bytes).to_seconds();
    CHECK(picked <= 1.1 * std::min({n2, r2, t2}));
  }
}

TEST_CASE("NVLS from a scenario: tp_algorithm allreduce-nvls speeds a TP8 deployment and a training job, and is refused without it") {
  auto metrics = [](const std::string& name, std::vector<std::string> sets) {
    Scenario sc = load_scenario(std::string(SLUICE_TESTS_DIR) + "/../scenarios/" + name, sets, registry());
    Recorder rec;
    run_into(sc, rec, {});
    return rec.metrics();
  };
  // Llama-2-70B at TP 8 on a DGX H200 (its NVSwitch has nvls: true).
  const Json ring = metrics("llama2-70b-tp8-dgx.yaml", {"deployment.tp_algorithm=allreduce-ring"});
  const Json nvls = metrics("llama2-70b-tp8-dgx.yaml", {"deployment.tp_algorithm=allreduce-nvls"});
  const Json autom = metrics("llama2-70b-tp8-dgx.yaml", {"deployment.tp_algorithm=allreduce-auto"});
  const auto ar = [](const Json& m) { return m["serving"]["communication"]["tp_allreduce_ms_mean"].get<double>(); };
  const auto ttft = [](const Json& m) { return m["serving"]["latency_ms"]["ttft"]["p50"].get<double>(); };
  CAPTURE(ar(ring));
  CAPTURE(ar(nvls));
  CHECK(ar(nvls) < 0.6 * ar(ring));
  CHECK(ttft(nvls) < ttft(ring));
  CHECK(ar(autom) == doctest::Approx(ar(nvls)));
  // GPT-3 13B (TP 8 x PP 4 x DP 8) on the fat-tree of DGX H100s: the TP all-reduces shrink.
  const std::vector<std::string> one = {"workloads.0.iterations=1"};
  auto it = [&](const std::string& a) {
    auto sets = one;
    sets.push_back("workloads.0.tp_algorithm=" + a);
    return metrics("training-gpt3-13b.yaml", sets)["training"]["iteration_s_mean"].get<double>();
  };
  const double t_ring = it("allreduce-ring"), t_nvls = it("allreduce-nvls");
  CAPTURE(t_ring);
  CAPTURE(t_nvls);
  CHECK(t_nvls < 0.97 * t_ring);
  CHECK(t_nvls > 0.8 * t_ring);  // the TP all-reduces are a part of the iteration, not most of it
  // Where the NVSwitch does not reduce, the scenario is refused before it runs, naming the key.
  CHECK_THROWS_WITH(metrics("llama2-70b-tp8-dgx.yaml", {"deployment.tp_algorithm=allreduce-nvls", "topology={catalog: dgx-h100, nvls: false}"}),
                    doctest::Contains("tp_algorithm allreduce-nvls"));
}

TEST_CASE("collectives as NCCL runs them: a training job's dp_algorithm allreduce-auto runs the faster of ring and tree") {
  // GPT-3 13B's DP all-reduce (8 devices, one a server, ~3.3 GB of gradients a stage) on
  // rail-optimized: measured ring 28.1 ms, NCCL tree 32.6 ms (a binary tree's inner servers
  // carry twice a leaf's bytes), so the choice is the ring.
  const std::string file = std::string(SLUICE_TESTS_DIR) + "/../scenarios/training-gpt3-13b.yaml";
  auto dp_ms = [&](const std::string& algorithm) {
    Scenario sc = load_scenario(file, {"workloads.0.iterations=1", "cluster.topology=rail-optimized", "workloads.0.dp_algorithm=" + algorithm},
                                registry());
    Recorder rec;
    run_into(sc, rec, {});
    return rec.metrics()["training"]["dp_allreduce_ms"].get<double>();
  };
  const double ring = dp_ms("allreduce-ring"), tree = dp_ms("allreduce-nccl-tree"), chosen = dp_ms("allreduce-auto");
  CAPTURE(ring);
  CAPTURE(tree);
  CHECK(tree > ring);
  CHECK(tree < 1.5 * ring);
  CHECK(chosen == doctest::Approx(std::min(ring, tree)));
}

TEST_CASE("routing: routes composed from neighbours' distances (dead-end NVSwitches included) are shortest paths") {
  // The router composes a device's distances from its switches' (and a server's NVSwitch from
  // its devices' switches) instead of a Dijkstra each: every route must still be a path from
  // source to destination whose weight is the shortest, checked against a plain Dijkstra here
  // over the router's weights (hops first, then the slower links: 1024 + min(512, 64 x 50 GB/s
  // / bandwidth) a link, hosts 2^20).
  // Catalog topologies, and rail-optimized servers of 12 GPUs and a host, whose NVSwitch's
  // composition fills the terms a distance holds and must leave room for the device's own.
  for (const char* name : {"rail-optimized", "fat-tree", "dgx-h200", "gb200-nvl72", "mi300x-8",
                           "{catalog: rail-optimized, servers: 4, gpus_per_server: 12, host_cpus: 1, tiers: 3}",
                           "{catalog: rail-optimized, servers: 4, gpus_per_server: 7, host_cpus: 7}"}) {
    const std::string which = name;
    CAPTURE(which);
    const Topology t = name[0] == '{' ? load_topology(load_yaml_string(name, "t.yaml"), registry(), "t.yaml")
                                      : load_topology_by_name(name, registry());
    auto w = [&](int e) -> int64_t {
      const auto& l = t.link(e);
      if (t.node(l.src).kind == NodeKind::Host || t.node(l.dst).kind == NodeKind::Host) return 1 << 20;
      return 1024 + std::lround(std::min(512.0, 64.0 * 50e9 / l.bandwidth_Bps));
    };
    auto dijkstra = [&](int src) {
      std::vector<int64_t> d(static_cast<size_t>(t.node_count()), std::numeric_limits<int64_t>::max());
      using Item = std::pair<int64_t, int>;
      std::priority_queue<Item, std::vector<Item>, std::greater<Item>> q;
      d[static_cast<size_t>(src)] = 0;
      q.push({0, src});
      while (!q.empty()) {
        const auto [dv, v] = q.top();
        q.pop();
        if (dv > d[static_cast<size_t>(v)]) continue;
        for (int e : t.out_links(v))
          if (dv + w(e) < d[static_cast<size_t>(t.link(e).dst)]) q.push({d[static_cast<size_t>(t.link(e).dst)] = dv + w(e), t.link(e).dst});
      }
      return d;
    };
    // Composed from searched distances, and (the Clos shapes) from the fabric's structure.
    for (const bool structural : {false, true}) {
      CAPTURE(structural);
      Router rt(t);
      rt.set_structural(structural);
      const auto& devs = t.devices();
      const size_t n = devs.size(), step = std::max<size_t>(1, n / 48);
      int checked = 0;
      for (size_t i = 0; i < n; i += step) {
        const auto d = dijkstra(devs[i]);
        for (size_t j = 0; j < n; j += (j % 3 == 0 ? 1 : step)) {
          if (i == j) continue;
          const auto path = rt.route(devs[i], devs[j], i * 7919 + j);
          int v = devs[i];
          int64_t len = 0;
          for (int e : path) {
            REQUIRE(t.link(e).src == v);
            v = t.link(e).dst;
            len += w(e);
          }
          CHECK(v == devs[j]);
          CHECK(len == d[static_cast<size_t>(devs[j])]);
          ++checked;
        }
      }
      CHECK(checked >= static_cast<int>(std::min<size_t>(56, n * (n - 1))));
    }
  }
}
