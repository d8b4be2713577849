// The fabrics of the largest clusters (issue 25): a dragonfly (groups of routers joined
// all-to-all by local links, every pair of groups by global links) and a multi-plane fat-tree
// (a rail-optimized Clos split into independent planes). Their shape by count, minimal routes,
// plane isolation, and the located refusals of shapes whose ports do not add up.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "config/error.h"
#include "config/node.h"
#include "engine/engine.h"
#include "network/collective.h"
#include "network/flow.h"
#include "network/generators.h"
#include "network/routing.h"
#include "network/topologies/keys.h"

using namespace sluice;
using namespace sluice::net;

namespace {

Topology load(const std::string& yaml) { return load_topology(load_yaml_string(yaml, "t.yaml"), testing::registry(), "topology"); }

// The group a dragonfly router belongs to, from its name "g<group>.r<k>".
int group_of_router(const Topology& t, int v) { return std::stoi(t.node(v).name.substr(1, t.node(v).name.find('.') - 1)); }

// A multi-plane switch's plane, from its name "p<plane>.<...>" (-1: not a plane's switch).
int plane_of(const Topology& t, int v) {
  const auto& n = t.node(v).name;
  if (t.node(v).kind != NodeKind::Switch || n.rfind('p', 0) != 0) return -1;
  return std::stoi(n.substr(1, n.find('.') - 1));
}

int count_label(const Topology& t, const std::vector<int>& path, const std::string& label) {
  int n = 0;
  for (int e : path) n += t.link(e).label == label;
  return n;
}

// A 3-tier fat-tree of `servers` 8-GPU servers (switches of radix 16, no host CPUs), and route
// asks (source, destination, salt) over its devices: every `si`-th source to every `sj`-th
// destination from `j0`, each its own salt.
Topology three_tier(int servers) {
  ClosSpec c;
  c.servers = servers;
  c.server.host_cpus = 0;
  c.tiers = 3;
  c.switch_radix = 16;
  return build_clos(c, "ft3");
}
std::vector<std::array<int, 3>> route_asks(const Topology& t, size_t si, size_t j0, size_t sj, size_t mix) {
  const auto& d = t.devices();
  std::vector<std::array<int, 3>> asks;
  for (size_t i = 0; i < d.size(); i += si)
    for (size_t j = j0; j < d.size(); j += sj)
      if (i != j) asks.push_back({d[i], d[j], static_cast<int>(i * mix + j)});
  return asks;
}
// A cable up or down, both ways (as the world fails links).
void both_ways(Topology& t, int e, bool up) { t.mutable_link(e).up = t.mutable_link(t.link(e).reverse).up = up; }
// How many of the asks `r` routes otherwise than a fresh router over the same links (with hash
// seed `seed`), every ask asked twice (the second time from r's kept routes).
size_t differ_from_fresh(Router& r, const Topology& t, const std::vector<std::array<int, 3>>& asks, uint64_t seed = 0) {
  Router fresh(t);
  if (seed != 0) fresh.set_hash_seed(seed);
  size_t differ = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& a : asks) differ += r.route(a[0], a[1], static_cast<uint64_t>(a[2])) != fresh.route(a[0], a[1], static_cast<uint64_t>(a[2]));
  return differ;
}

}  // namespace

TEST_CASE("dragonfly: groups of routers all joined locally, every pair of groups by the same number of global links") {
  const Topology t = load("{catalog: dragonfly}");  // 32 servers, 8 NICs a router, 8 routers a group, 4 global links a router
  t.check();
  CHECK(t.family == "dragonfly");
  CHECK(t.devices().size() == 256);
  std::map<std::pair<int, int>, int> global;  // (group, group) -> links
  std::map<int, int> ports;                   // router -> ports used
  int routers = 0, local = 0;
  for (int v = 0; v < t.node_count(); ++v) routers += t.node(v).kind == NodeKind::Switch && t.node(v).name[0] == 'g';
  CHECK(routers == 32);  // 256 NICs / 8 a router
  for (int e = 0; e < t.link_count(); e += 2) {  // one direction of each full-duplex link
    const auto& l = t.link(e);
    if (l.label == "local") {
      ++local;
      CHECK(group_of_router(t, l.src) == group_of_router(t, l.dst));
    } else if (l.label == "global") {
      const int a = group_of_router(t, l.src), b = group_of_router(t, l.dst);
      CHECK(a != b);
      CHECK(l.optical);
      ++global[{std::min(a, b), std::max(a, b)}];
    }
  }
  CHECK(local == 4 * (8 * 7 / 2));  // every pair of a group's 8 routers, in 4 groups
  REQUIRE(global.size() == 6);      // every pair of the 4 groups ...
  for (const auto& [pair, n] : global) CHECK(n == 32 / 3);  // ... as many times as 8 x 4 ports a group allow
  for (int v = 0; v < t.node_count(); ++v)
    if (t.node(v).kind == NodeKind::Switch && t.node(v).name[0] == 'g') CHECK(t.ports_used(v) <= 8 + 7 + 4);
}

TEST_CASE("dragonfly: a minimal route crosses at most one global link, none inside a group") {
  const Topology t = load("{catalog: dragonfly}");
  Router r(t);
  const auto& d = t.devices();
  // GPU 0 (server 0, group 0) to every GPU: servers 0..7 are group 0 (8 routers of one server each).
  for (size_t i = 1; i < d.size(); ++i) {
    const auto path = r.route(d[0], d[i], i);
    const bool same_group = i < 64;
    CHECK(count_label(t, path, "global") == (same_group ? 0 : 1));
    CHECK(count_label(t, path, "local") <= 2);
    CHECK(path.size() <= 5);  // NIC, local, global, local, NIC
  }
  // Traffic between groups shares the global links: an all-to-all's bytes are on them.
  Engine e(1);
  FlowSim sim(e, t, r);
  const std::vector<int> pair{d[0], d[200]};
  Collective c(sim, CollectiveKind::AllToAll, pair, 1e9);
  c.start();
  e.run();
  REQUIRE(c.finished());
  double global_bytes = 0;
  const auto carried = sim.carried_link_bytes();
  for (int l = 0; l < t.link_count(); ++l)
    if (t.link(l).label == "global") global_bytes += carried[static_cast<size_t>(l)];
  CHECK(global_bytes == doctest::Approx(1e9));  // each sends half of 1 GB to the other, over one global link each way
}

TEST_CASE("dragonfly: shapes whose ports do not add up are refused at their key") {
  CHECK_THROWS_WITH_AS(load("{catalog: dragonfly, switch_radix: 16}"), doctest::Contains("switch_radix"), ConfigError);
  // 4 routers x 1 global link join at most 5 groups: 2048 servers need 512.
  CHECK_THROWS_WITH_AS(load("{catalog: dragonfly, servers: 2048, routers_per_group: 4, global_links_per_router: 1}"),
                       doctest::Contains("servers"), ConfigError);
  // Routers that do not each reach every group (4 routers, 2 global links each, 10 groups):
  // the route to another group still crosses one global link, never two through a third group.
  const Topology sparse = load("{catalog: dragonfly, servers: 36, nics_per_router: 8, routers_per_group: 4, global_links_per_router: 2, switch_radix: 16}");
  Router rs(sparse);
  int pairs = 0;
  for (size_t a = 0; a < sparse.devices().size(); a += 8)
    for (size_t b = 0; b < sparse.devices().size(); b += 8) {
      if (a == b) continue;
      CHECK(count_label(sparse, rs.route(sparse.devices()[a], sparse.devices()[b], a * 977 + b), "global") <= 1);
      ++pairs;
    }
  CHECK(pairs == 36 * 35);
  // One group: local links only, no global ones.
  const Topology one = load("{catalog: dragonfly, servers: 8}");
  int global = 0;
  for (int e = 0; e < one.link_count(); ++e) global += one.link(e).label == "global";
  CHECK(global == 0);
}

TEST_CASE("multi-plane: each plane is its own Clos, rail r on plane r mod planes, and ranks cross planes over NVLink") {
  const Topology t = load("{catalog: multi-plane, servers: 128}");  // 1024 GPUs, 8 planes of two tiers
  t.check();
  CHECK(t.family == "multi-plane");
  std::set<int> planes;
  for (int e = 0; e < t.link_count(); ++e) {
    const auto& l = t.link(e);
    const int a = plane_of(t, l.src), b = plane_of(t, l.dst);
    if (a >= 0 && b >= 0) CHECK(a == b);  // no switch-to-switch link between planes
    if (l.label == "nic" && t.node(l.src).kind == NodeKind::Device) {
      const int rank = std::stoi(t.node(l.src).name.substr(t.node(l.src).name.find('.') + 1));
      CHECK(b == rank % 8);
      planes.insert(b);
    }
  }
  CHECK(planes.size() == 8);
  Router r(t);
  const auto& d = t.devices();
  // Rank 0 of server 0 to rank 3 of server 100: over NVLink to rank 3, then plane 3 only.
  const auto path = r.route(d[0], d[100 * 8 + 3]);
  CHECK(count_label(t, path, "nvlink") == 2);
  for (int e : path) {
    const int p = plane_of(t, t.link(e).dst);
    if (p >= 0) CHECK(p == 3);
  }
  // With planes: 2, ranks 0 and 2 share plane 0's spines (server 100 is behind another leaf
  // group): the route stays on plane 0; ranks 0 and 1 do not, so it crosses over NVLink.
  const Topology two = load("{catalog: multi-plane, servers: 128, planes: 2}");
  Router r2(two);
  const auto p02 = r2.route(two.devices()[0], two.devices()[100 * 8 + 2]);
  CHECK(count_label(two, p02, "nvlink") == 0);
  for (int e : p02) CHECK(plane_of(two, two.link(e).dst) <= 0);
  const auto p01 = r2.route(two.devices()[0], two.devices()[100 * 8 + 1]);
  CHECK(count_label(two, p01, "nvlink") == 2);
}

TEST_CASE("multi-plane: three tiers a plane, and planes that do not divide a server's GPUs are refused") {
  // 32-port switches, 3 tiers: every plane gets its own aggregation and core switches.
  const Topology t = load("{catalog: multi-plane, servers: 4096, switch_radix: 32, tiers: 3}");
  t.check();
  CHECK(t.devices().size() == 32768);
  std::map<int, int> cores;
  for (int v = 0; v < t.node_count(); ++v)
    if (t.node(v).name.find(".core") != std::string::npos) ++cores[plane_of(t, v)];
  REQUIRE(cores.size() == 8);
  for (const auto& [p, n] : cores) CHECK(n == cores.begin()->second);
  CHECK_THROWS_WITH_AS(load("{catalog: multi-plane, planes: 3}"), doctest::Contains("planes"), ConfigError);
  CHECK_THROWS_WITH_AS(load("{catalog: fat-tree, planes: 2}"), doctest::Contains("planes"), ConfigError);  // rail-optimized only
}

TEST_CASE("clos: a 3-tier core group that does not divide an aggregation switch's uplinks still fits every core's radix") {
  // Radix 16: 8 leaves a pod, 8 uplinks an aggregation switch; 48 servers make 6 pods and core
  // groups of 3, which do not divide 8. Dealt per pod from 0, core 0 of a group took 3 links a
  // pod (18 > 16 ports); dealt on from where the last pod stopped, each core takes 16.
  // More pods than a core has ports would split the fabric: refused at the key and by the builder.
  CHECK_THROWS_WITH_AS(load("{catalog: fat-tree, servers: 16384, tiers: 3}"), doctest::Contains("pods"), ConfigError);
  ClosSpec c;
  c.servers = 48;
  c.server.host_cpus = 0;
  c.tiers = 3;
  c.switch_radix = 16;
  const Topology t = build_clos(c, "ft3");
  t.check();
  for (int v = 0; v < t.node_count(); ++v)
    if (t.node(v).name.rfind("core", 0) == 0) CHECK(t.ports_used(v) == 16);
}

TEST_CASE("fabrics: a cluster whose estimated memory exceeds the machine's is refused at its size, before it is built") {
  // 4,096 servers (32,768 GPUs): 1,024 leaves' distance vectors over ~41k nodes, about 266 MB.
  ::setenv("SLUICE_MEMORY_LIMIT", "100MiB", 1);
  CHECK_THROWS_WITH_AS(load("{catalog: fat-tree, servers: 4096, tiers: 3}"), doctest::Contains("would need about"), ConfigError);
  CHECK_THROWS_WITH_AS(load("{catalog: dragonfly, servers: 4096, routers_per_group: 32, nics_per_router: 16}"),
                       doctest::Contains("servers"), ConfigError);
  CHECK_THROWS_WITH_AS(load("{catalog: gb200-nvl72, racks: 512}"), doctest::Contains("racks"), ConfigError);
  CHECK_NOTHROW(load("{catalog: fat-tree, servers: 32}"));
  ::setenv("SLUICE_MEMORY_LIMIT", "1GiB", 1);
  CHECK_NOTHROW(load("{catalog: fat-tree, servers: 4096, tiers: 3}"));
  ::unsetenv("SLUICE_MEMORY_LIMIT");
  CHECK(machine_memory_bytes() > 1e9);
}

TEST_CASE("storage servers: on a multi-plane fabric they spread over the planes' top switches, each within its radix") {
  Topology t = load("{catalog: multi-plane, servers: 128, oversubscription: 3}");
  const auto st = add_storage(t, 8, 50e9, 500, 0);
  REQUIRE(st.size() == 8);
  std::set<int> planes;
  for (int v : st) {
    REQUIRE(t.out_links(v).size() == 1);
    const int sw = t.link(t.out_links(v)[0]).dst;
    planes.insert(plane_of(t, sw));
    CHECK(t.ports_used(sw) <= t.node(sw).radix);
  }
  CHECK(planes.size() == 8);
}

TEST_CASE("routing: routes do not depend on the order a router is asked in, and a failed link is avoided until repaired") {
  // A 3-tier fat-tree of 48 servers: every pair's route (a salt each) from one router asked in
  // order and from another asked in reverse order (so the distances each has cached, composed or
  // whole, differ) must agree hop for hop; after a link fails both ways and the router is told,
  // no route uses it; repaired and told, the first routes come back.
  Topology t = three_tier(48);
  const auto asks = route_asks(t, 5, 1, 7, 131);
  Router forward(t), backward(t);
  forward.set_min_set_aside_bytes(0);  // (a fabric this small is set aside only when told to)
  forward.set_structural(false);  // (searched distances, cached in the order asked: a Clos's structural ones have no order)
  backward.set_structural(false);
  std::vector<std::vector<int>> a(asks.size()), b(asks.size());
  for (size_t k = 0; k < asks.size(); ++k) a[k] = forward.route(asks[k][0], asks[k][1], static_cast<uint64_t>(asks[k][2]));
  for (size_t k = asks.size(); k-- > 0;) b[k] = backward.route(asks[k][0], asks[k][1], static_cast<uint64_t>(asks[k][2]));
  size_t differ = 0;
  for (size_t k = 0; k < asks.size(); ++k) differ += a[k] != b[k];
  CHECK(differ == 0);
  // Asked again, each route comes from the router's kept routes: the same hops, and after them
  // the links of the route asked after it, where the caller's vector already holds some.
  differ = 0;
  for (size_t k = 0; k + 1 < asks.size(); ++k) {
    std::vector<int> both{-7};
    forward.route(asks[k][0], asks[k][1], static_cast<uint64_t>(asks[k][2]), both);
    forward.route(asks[k + 1][0], asks[k + 1][1], static_cast<uint64_t>(asks[k + 1][2]), both);
    std::vector<int> want{-7};
    want.insert(want.end(), a[k].begin(), a[k].end());
    want.insert(want.end(), a[k + 1].begin(), a[k + 1].end());
    differ += both != want;
  }
  CHECK(differ == 0);
  // Fail the first route's second link (a leaf uplink), both ways, and tell the router (it
  // forgets the routes it kept).
  const int failed = a[0].at(1), back = t.link(failed).reverse;
  REQUIRE(back >= 0);
  both_ways(t, failed, false);
  forward.invalidate();
  size_t through = 0;
  for (size_t k = 0; k < asks.size(); ++k)
    for (int e : forward.route(asks[k][0], asks[k][1], static_cast<uint64_t>(asks[k][2]))) through += e == failed || e == back;
  CHECK(through == 0);
  // Repaired and told: the first routes again.
  both_ways(t, failed, true);
  forward.invalidate();
  CHECK(forward.revived() == 1);  // the links as they were before the failure: that state came back
  differ = 0;
  for (size_t k = 0; k < asks.size(); ++k) differ += forward.route(asks[k][0], asks[k][1], static_cast<uint64_t>(asks[k][2])) != a[k];
  CHECK(differ == 0);
}

TEST_CASE("routing: with links torn down, a device's distances are still composed from its neighbours', and route as a Dijkstra of its own") {
  // A failed chip (every link of one GPU down, both ways) and a failed cable (a leaf uplink):
  // the distances to every other device are still composed from its switches' (a Dijkstra of
  // their own each would be a vector per GPU: 1.3 GB on a 16k-GPU fat-tree during a 54-day
  // fault run), while routes to the failed GPU, which must cross a torn-down link, take its own
  // Dijkstra run to the end. Every route must be the one a router with no composition gives,
  // each asked twice (kept routes), on a fat-tree and on rail-optimized servers of 12 GPUs and a
  // host (a dead-end NVSwitch composed a level further).
  for (const char* shape : {"three-tier", "{catalog: rail-optimized, servers: 4, gpus_per_server: 12, host_cpus: 1, tiers: 3}"}) {
    CAPTURE(shape);
    Topology t = shape[0] == '{' ? load(shape) : three_tier(48);
    auto asks = route_asks(t, 7, 0, 1, 53);  // every GPU a destination
    // The failed GPU: every 7th source's destination, and the source of a few routes (which must
    // leave it over a torn-down link, where its destinations' composed terms stop: they take a
    // Dijkstra of their own, run past it).
    const int sick = t.devices()[1];
    for (size_t j = 2; j < 6; ++j) asks.push_back({sick, t.devices()[j * 5], static_cast<int>(j)});
    size_t healthy = 0;  // the vectors of the same asks on the healthy fabric
    {
      Router h(t);
      h.set_structural(false);  // (searched, as every route is once a link is down)
      for (const auto& a : asks) h.route(a[0], a[1], static_cast<uint64_t>(a[2]));
      healthy = h.distance_vectors();
    }
    std::vector<int> down;
    for (int e : t.out_links(sick)) down.push_back(e), down.push_back(t.link(e).reverse);
    for (int e : down) t.mutable_link(e).up = false;
    Router probe(t);  // a cable on a healthy route between two other servers: a leaf uplink
    const auto& d = t.devices();
    const std::vector<int> far = probe.route(d[2], d[d.size() - 1], 1);
    REQUIRE(far.size() >= 4);
    both_ways(t, far[1], false);
    down.push_back(far[1]), down.push_back(t.link(far[1]).reverse);
    Router composed(t), whole(t);
    whole.set_compose(false);
    size_t differ = 0, crossing = 0, to_sick = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& a : asks) {
        const auto r = composed.route(a[0], a[1], static_cast<uint64_t>(a[2]));
        differ += r != whole.route(a[0], a[1], static_cast<uint64_t>(a[2]));
        const bool ends_sick = a[0] == sick || a[1] == sick;
        to_sick += ends_sick;
        for (int e : r)
          if (std::find(down.begin(), down.end(), e) != down.end()) crossing += ends_sick ? 0 : 1;
      }
    CHECK(differ == 0);
    CHECK(crossing == 0);  // between healthy GPUs, no torn-down link
    CHECK(to_sick > 0);
    CAPTURE(composed.distance_vectors());
    CAPTURE(whole.distance_vectors());
    CHECK(whole.distance_vectors() >= t.devices().size());
    CHECK(2 * healthy < t.devices().size());
    CHECK(composed.distance_vectors() <= healthy + 1 + 4);  // the failed GPU's own and the 4 routes from it
  }
}

TEST_CASE("routing: a state set aside at a change comes back only for links exactly as it had them, and routes as a fresh router") {
  // Failures and repairs each invalidate the router. What it computed for the links as they
  // were is set aside and brought back when they are so again (a repair undoing a failure); for
  // any other set of links it starts from nothing. Every route, revived or not, must be a fresh
  // router's over the same links, its kept routes included (each asked twice).
  Topology t = three_tier(32);
  const auto asks = route_asks(t, 3, 2, 11, 37);
  Router r(t);
  r.set_min_set_aside_bytes(0);  // (a fabric this small is set aside only when told to)
  CHECK(differ_from_fresh(r, t, asks) == 0);
  r.invalidate();  // told of a change that changed nothing: what was computed stands, nothing is set aside twice
  CHECK(r.set_aside() == 0);
  CHECK(differ_from_fresh(r, t, asks) == 0);
  size_t far = 0;  // the first ask that leaves its server
  while (far < asks.size() && r.route(asks[far][0], asks[far][1], static_cast<uint64_t>(asks[far][2])).size() < 4) ++far;
  REQUIRE(far < asks.size());
  const std::vector<int> first = r.route(asks[far][0], asks[far][1], static_cast<uint64_t>(asks[far][2]));
  const int x = first[1], y = first[2];  // a leaf's uplink and the aggregation switch's above it
  both_ways(t, x, false);
  r.invalidate();
  CHECK(r.revived() == 0);
  CHECK(r.set_aside() == 1);  // the healthy state
  CHECK(differ_from_fresh(r, t, asks) == 0);
  {  // some route of the one-failure state crosses y, so reviving that state with y down would show
    Router fresh(t);
    size_t over_y = 0;
    for (const auto& a : asks)
      for (int e : fresh.route(a[0], a[1], static_cast<uint64_t>(a[2]))) over_y += e == y;
    REQUIRE(over_y > 0);
  }
  both_ways(t, y, false);  // a second failure: neither the healthy state nor the one-failure state fits
  r.invalidate();
  CHECK(r.revived() == 0);
  CHECK(differ_from_fresh(r, t, asks) == 0);
  both_ways(t, y, true);  // back to one failure: that state comes back
  r.invalidate();
  CHECK(r.revived() == 1);
  CHECK(differ_from_fresh(r, t, asks) == 0);
  both_ways(t, x, true);  // healthy: its state comes back
  r.invalidate();
  CHECK(r.revived() == 2);
  CHECK(differ_from_fresh(r, t, asks) == 0);
  CHECK(r.route(asks[far][0], asks[far][1], static_cast<uint64_t>(asks[far][2])) == first);
  // A new hash seed re-draws every equal-cost choice: nothing set aside before it comes back.
  both_ways(t, x, false);  // the one failure again: its state too
  r.invalidate();
  CHECK(r.revived() == 3);
  CHECK(differ_from_fresh(r, t, asks) == 0);
  r.set_hash_seed(7);
  both_ways(t, x, true);
  r.invalidate();
  CHECK(r.revived() == 3);
  CHECK(differ_from_fresh(r, t, asks, 7) == 0);
  // A link added between a failure and its repair (an OCS circuit, a new cable): the states set
  // aside for fewer links never fit again; nothing is revived and routes are a fresh router's.
  both_ways(t, x, false);
  r.invalidate();
  const int revived = static_cast<int>(r.revived());
  t.add_link(t.link(x).src, t.link(y).dst, t.link(x).bandwidth_Bps, t.link(x).latency_ns, "extra");
  r.invalidate();
  both_ways(t, x, true);
  r.invalidate();
  CHECK(static_cast<int>(r.revived()) == revived);
  CHECK(differ_from_fresh(r, t, asks, 7) == 0);
}

TEST_CASE("routing: a state smaller than the threshold is computed again, not set aside, and routes the same") {
  // A small fabric's state costs less to compute again than to keep: at every failure and
  // repair its memory is reused, nothing is set aside or revived, and routes are a fresh router's.
  Topology t = three_tier(32);
  const auto asks = route_asks(t, 3, 2, 11, 37);
  Router r(t);
  REQUIRE(r.min_set_aside_bytes() == size_t{16} << 20);
  CHECK(differ_from_fresh(r, t, asks) == 0);
  const std::vector<int> first = r.route(asks[0][0], asks[0][1], static_cast<uint64_t>(asks[0][2]));
  REQUIRE(first.size() >= 2);
  const int x = first[1];
  for (bool up : {false, true, false, true}) {
    both_ways(t, x, up);
    r.invalidate();
    CHECK(r.set_aside() == 0);
    CHECK(r.revived() == 0);
    CHECK(differ_from_fresh(r, t, asks) == 0);
  }
  // A link down one way only breaks the symmetric weights the distances rest on (the world
  // always fails both ways): the walk says so instead of wandering.
  t.mutable_link(x).up = false;
  r.invalidate();
  CHECK_THROWS_AS(r.route(asks[0][0], asks[0][1], static_cast<uint64_t>(asks[0][2])), std::logic_error);
  t.mutable_link(x).up = true;
  r.invalidate();
  CHECK(differ_from_fresh(r, t, asks) == 0);
  // Told to keep states of any size, the same router sets the healthy one aside and revives it.
  r.set_min_set_aside_bytes(0);
  both_ways(t, x, false);
  r.invalidate();
  CHECK(r.set_aside() == 1);
  both_ways(t, x, true);
  r.invalidate();
  CHECK(r.revived() == 1);
  CHECK(differ_from_fresh(r, t, asks) == 0);
}

TEST_CASE("routing: distances settled only as far as each route needs give the routes of distances settled to the end") {
  // A router settles a destination's distances only up to the source a route starts from, and
  // resumes when a farther source asks. Its routes must be those of a router whose distances
  // were all settled first (each destination asked for once from a host, the farthest kind of
  // node: it settles every switch and device), on a multi-plane fat-tree with three tiers
  // (where a plane's routes leave the other planes unsettled) and on a fat-tree with hosts.
  for (const char* yaml : {"{catalog: multi-plane, servers: 48, planes: 4, tiers: 3, switch_radix: 8, host_cpus: 2}",
                           "{catalog: fat-tree, servers: 16, tiers: 3, switch_radix: 8, host_cpus: 2}"}) {
    CAPTURE(yaml);
    const Topology t = load(yaml);
    const auto& d = t.devices();
    int host = -1;
    for (int v = 0; v < t.node_count() && host < 0; ++v)
      if (t.node(v).kind == NodeKind::Host) host = v;
    REQUIRE(host >= 0);
    // Near sources and far ones interleaved, for every destination: asked near first, a
    // destination's distances stop early and resume for the far ones.
    std::vector<std::array<int, 3>> asks;
    for (size_t j = 0; j < d.size(); j += 3)
      for (size_t i : {j ^ 1u, (j + d.size() / 2) % d.size(), j ^ 2u, (j + 8) % d.size(), (j * 7 + 5) % d.size()})
        if (i < d.size() && i != j) asks.push_back({d[i], d[j], static_cast<int>(i * 977 + j)});
    Router lazy(t), settled(t);
    lazy.set_structural(false);  // (both searched: these Clos shapes would be routed from their structure)
    settled.set_structural(false);
    for (size_t j = 0; j < d.size(); j += 3) settled.route(host, d[j], 1);
    size_t differ = 0, hops = 0;
    for (const auto& a : asks) {
      const auto p = lazy.route(a[0], a[1], static_cast<uint64_t>(a[2]));
      differ += p != settled.route(a[0], a[1], static_cast<uint64_t>(a[2]));
      hops += p.size();
    }
    CHECK(asks.size() > 100);
    CHECK(hops > 3 * asks.size());
    CHECK(differ == 0);
    // Switches as destinations (each its own Dijkstra, not composed), and adaptive routing's
    // parts and spray widths, from fresh routers the same two ways.
    std::vector<int> sw;
    for (int v = 0; v < t.node_count(); ++v)
      if (t.node(v).kind == NodeKind::Switch) sw.push_back(v);
    REQUIRE(sw.size() > 4);
    Router lazy_sw(t), settled_sw(t), lazy_part(t), settled_part(t);
    lazy_part.set_structural(false);
    settled_part.set_structural(false);
    for (int x : sw) settled_sw.route(host, x, 1);
    for (size_t j = 0; j < d.size(); j += 3) settled_part.route(host, d[j], 1);
    size_t differ_sw = 0, differ_part = 0, parts = 0;
    for (size_t k = 0; k < sw.size(); ++k)
      for (size_t i : {k, k * 5 + 3, k * 11 + 1}) {
        const int src = d[i % d.size()];
        differ_sw += lazy_sw.route(src, sw[k], i) != settled_sw.route(src, sw[k], i);
      }
    for (const auto& a : asks) {
      const int w = lazy_part.spray_width(a[0], a[1]);
      differ_part += w != settled_part.spray_width(a[0], a[1]);
      for (int part = 0; part < w; ++part, ++parts) {
        std::vector<int> x, y;
        lazy_part.route_part(a[0], a[1], static_cast<uint64_t>(a[2]), part, x);
        settled_part.route_part(a[0], a[1], static_cast<uint64_t>(a[2]), part, y);
        differ_part += x != y;
      }
    }
    CHECK(differ_sw == 0);
    CHECK(parts > asks.size());
    CHECK(differ_part == 0);
  }
}

TEST_CASE("routing: a route's second ask copies its first walk from the ring of recent walks, and a ring come round walks it again") {
  // The first ask of a (src, dst, salt) walks the route and leaves the walk in a ring; the
  // second (the one that keeps it) copies it from there instead of walking again, and later
  // asks read the kept route. Every ask must give a fresh router's route, and each key be walked
  // once; with a ring of a few dozen routes, the second asks (4,224 routes later) walk again
  // (the same routes). After a change of the links nothing in the ring is read.
  Topology t = three_tier(48);
  const auto asks = route_asks(t, 5, 1, 7, 131);
  const size_t n = asks.size();
  REQUIRE(n > 100);
  Router fresh(t);
  std::vector<std::vector<int>> want(n);
  for (size_t k = 0; k < n; ++k) want[k] = fresh.route(asks[k][0], asks[k][1], static_cast<uint64_t>(asks[k][2]));
  auto differ = [&](Router& r) {
    size_t d = 0;
    for (size_t k = 0; k < n; ++k) d += r.route(asks[k][0], asks[k][1], static_cast<uint64_t>(asks[k][2])) != want[k];
    return d;
  };
  // (Keys whose hashes share a slot of the table of keys asked once take it from each other and
  // are walked at every ask, ring or not: a few in a thousand here, c of them.)
  Router r(t);
  CHECK(differ(r) == 0);
  CHECK(r.walks() == n);
  CHECK(differ(r) == 0);  // from the ring
  const uint64_t c = r.walks() - n;
  CHECK(c < n / 100);
  CHECK(differ(r) == 0);  // kept
  CHECK(r.walks() == n + 2 * c);
  CHECK_THROWS_AS(r.set_walked_capacity(1000), std::logic_error);

  Router small(t);
  small.set_walked_capacity(300);  // (512 integers: a few dozen routes)
  CHECK(differ(small) == 0);
  CHECK(differ(small) == 0);
  CHECK(small.walks() >= 2 * n - 1);  // (the last route asked may still be there)
  const uint64_t walked = small.walks();
  CHECK(differ(small) == 0);  // kept at the second ask
  CHECK(small.walks() == walked + c);

  // A leaf uplink of the first route fails: every route is walked again, none through it.
  const int failed = want[0].at(1), back = t.link(failed).reverse;
  both_ways(t, failed, false);
  r.invalidate();
  size_t through = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& a : asks)
      for (int e : r.route(a[0], a[1], static_cast<uint64_t>(a[2]))) through += e == failed || e == back;
  CHECK(through == 0);
  CHECK(r.walks() == 2 * n + 3 * c);
  CHECK(differ_from_fresh(r, t, asks) == 0);
}

TEST_CASE("routing: a route too long for the ring of recent walks, asked again after a link change, is walked over the links as they are") {
  // 400 switches in a ring, a device on switch 0 and one on switch 10: 12 links one way. The
  // ring link 0 -> 1 fails: the route goes the long way round (392 links, too many for the
  // ring of recent walks or the kept routes). Every ask after the change must give a fresh
  // router's route (the first walk, 12 links, sits where the ring starts: it must not be read).
  Topology t("ring");
  const int n = 400;
  std::vector<int> sw, ring;
  for (int i = 0; i < n; ++i) sw.push_back(t.add_node(NodeInfo{fmt::format("s{}", i), NodeKind::Switch}));
  for (int i = 0; i < n; ++i) ring.push_back(t.add_link(sw[static_cast<size_t>(i)], sw[static_cast<size_t>((i + 1) % n)], 50e9, 100, "r"));
  const int a = t.add_node(NodeInfo{"a", NodeKind::Device}), b = t.add_node(NodeInfo{"b", NodeKind::Device});
  t.add_link(a, sw[0], 50e9, 100, "nic");
  t.add_link(b, sw[10], 50e9, 100, "nic");
  Router r(t, RoutePolicy::ShortestPath);
  CHECK(r.route(a, b, 7).size() == 12);
  both_ways(t, ring[0], false);
  r.invalidate();
  const auto want = Router(t, RoutePolicy::ShortestPath).route(a, b, 7);
  CHECK(want.size() == 392);
  for (int ask = 0; ask < 3; ++ask) CHECK(r.route(a, b, 7) == want);
}
