// Structural routes on Clos fabrics and dragonflies (network/clos_distances.h): every route a router computes
// from the fabric's structure equals the route a router that searches (a Dijkstra per
// destination) gives, hop for hop, on small instances of each shape the structure accepts; the
// shapes its closed forms do not hold for are refused (and searched); a failed link sends the
// router back to searching until it is repaired.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/node.h"
#include "network/generators.h"
#include "network/routing.h"
#include "route_compare.h"
#include "test_support.h"

using namespace sluice::net;

namespace {

struct Shape {
  std::string what;
  ClosSpec c;
  int storage = 0;  // storage servers on the top tier
};

ClosSpec clos(int servers, int tiers, int radix, bool rail, int planes = 1) {
  ClosSpec c;
  c.servers = servers;
  c.tiers = tiers;
  c.switch_radix = radix;
  c.rail_optimized = rail;
  c.planes = planes;
  return c;
}

// Every route from every node (GPUs, NVSwitches, hosts, switches, storage) to every GPU, two
// salts each, and every spray width, the same from both routers. Returns how many were compared.
size_t compare_all(const Topology& t, Router& structural, Router& searched) {
  return sluice::testing::compare_routes(t, structural, searched, sluice::testing::all_nodes(t), t.devices());
}

}  // namespace

TEST_CASE("structural routes on Clos fabrics equal searched shortest paths, hop for hop, on every accepted shape") {
  std::vector<Shape> shapes;
  shapes.push_back({"fat-tree, 2 tiers, a server over two leaves", clos(4, 2, 8, false)});
  shapes.push_back({"fat-tree, 3 tiers", clos(16, 3, 8, false)});
  {
    Shape s{"fat-tree, 3 tiers, oversubscribed 3:1, storage on the cores", clos(8, 3, 8, false), 2};
    s.c.oversubscription = 3;
    shapes.push_back(s);
  }
  {
    Shape s{"fat-tree, one NIC per server, 3 tiers", clos(24, 3, 8, false)};
    s.c.nic_per_server = true;
    shapes.push_back(s);
  }
  shapes.push_back({"rail-optimized, 2 tiers", clos(4, 2, 8, true)});
  shapes.push_back({"rail-optimized, 3 tiers, a pod a rail group", clos(16, 3, 16, true)});
  shapes.push_back({"multi-plane, 2 planes of 3 tiers", clos(12, 3, 8, true, 2)});
  shapes.push_back({"multi-plane, 8 planes of 3 tiers", clos(10, 3, 4, true, 8)});
  shapes.push_back({"multi-plane, 4 planes of 2 tiers", clos(6, 2, 8, true, 4)});
  {
    Shape s{"multi-plane, 8 planes, NVLink as slow as a NIC, host CPUs", clos(6, 3, 4, true, 8)};
    s.c.server.nvlink_Bps = 50e9;
    s.c.server.host_cpus = 2;
    shapes.push_back(s);
  }
  {
    Shape s{"fat-tree, fast NICs and NVLink, 2 tiers", clos(4, 2, 8, false)};
    s.c.nic_Bps = 100e9;
    s.c.server.nvlink_Bps = 900e9;
    shapes.push_back(s);
  }
  for (const Shape& s : shapes) {
    CAPTURE(s.what);
    Topology t = build_clos(s.c, "clos");
    if (s.storage > 0) add_storage(t, s.storage, 50e9, 500, 0);
    Router structural(t), searched(t);
    searched.set_structural(false);
    const size_t n = compare_all(t, structural, searched);
    CHECK(structural.structural());  // (so the comparison above was not of two searches)
    CHECK_FALSE(searched.structural());
    CHECK(structural.distance_vectors() == 0);  // no search at all
    CHECK(searched.distance_vectors() > 0);
    CHECK(n > 0);
    // Hashed seeds re-draw the same equal-cost sets.
    structural.set_hash_seed(7);
    searched.set_hash_seed(7);
    for (int dst : t.devices()) CHECK(structural.route(t.devices().front(), dst, 3) == searched.route(t.devices().front(), dst, 3));
  }
}

TEST_CASE("structural routes on dragonflies equal searched minimal routes, hop for hop") {
  // Groups of routers, all-to-all local links, every pair of groups joined by global links (a
  // penalty on each, so a route crosses one); servers over one or several routers of a group.
  for (const char* yaml :
       {"{kind: dragonfly, servers: 8, nics_per_router: 4, routers_per_group: 4, switch_radix: 16, global_links_per_router: 2}",
        "{kind: dragonfly, servers: 16, nics_per_router: 16, routers_per_group: 4, switch_radix: 32, host_cpus: 2}",
        "{kind: dragonfly, servers: 12, nics_per_router: 8, routers_per_group: 2, switch_radix: 16, global_links_per_router: 3, "
        "global_bandwidth: 800Gb/s, nvlink_bandwidth: 100GB/s}"}) {
    CAPTURE(yaml);
    const Topology t = load_topology(sluice::load_yaml_string(yaml, "t.yaml"), sluice::testing::registry(), "topology");
    Router structural(t), searched(t);
    searched.set_structural(false);
    CHECK(compare_all(t, structural, searched) > 0);
    CHECK(structural.structural());
    CHECK(structural.distance_vectors() == 0);
  }
  // Three GPUs a router, two routers a group: server 0's GPUs on routers 0 to 2, in two groups (a
  // path through it joins the groups without a global link): searched.
  const Topology t = load_topology(
      sluice::load_yaml_string("{kind: dragonfly, servers: 6, nics_per_router: 3, routers_per_group: 2, switch_radix: 8}", "t.yaml"),
      sluice::testing::registry(), "topology");
  Router structural(t), searched(t);
  searched.set_structural(false);
  CHECK(compare_all(t, structural, searched) > 0);
  CHECK_FALSE(structural.structural());
}

TEST_CASE("structural routes are refused where their closed forms do not hold, and those fabrics are searched") {
  // Radix 12: 6 GPUs a leaf, 6 leaves a pod; server 4's GPUs (32-39) fall on leaves 5 and 6, in
  // two pods: a path through the server joins the pods shorter than the cores do.
  Topology straddling = build_clos(clos(10, 3, 12, false), "straddling");
  // Rail-optimized with pods of 4 leaves: a server's 8 rail leaves span two pods of its plane.
  Topology rails = build_clos(clos(12, 3, 8, true), "rails");
  // An NVLink mesh server (no NVSwitch): not a shape the closed forms know.
  ClosSpec mesh = clos(4, 2, 8, false);
  mesh.server.mesh = true;
  Topology meshed = build_clos(mesh, "mesh");
  for (Topology* t : {&straddling, &rails, &meshed}) {
    CAPTURE(t->name());
    Router structural(*t), searched(*t);
    searched.set_structural(false);
    CHECK(compare_all(*t, structural, searched) > 0);
    CHECK_FALSE(structural.structural());
  }
  // A torus is never taken for a Clos.
  TorusSpec ts;
  ts.dims = {4, 4};
  const Topology torus = build_torus(ts, "torus");
  CHECK(ClosDistances::detect(torus, std::vector<int32_t>(static_cast<size_t>(torus.link_count()), 1088)) == nullptr);
}

TEST_CASE("structural routes refuse hand-made servers whose inside the closed forms do not describe") {
  // (A review's two cases, which no generator makes.) 1: a server with a NIC on its NVSwitch and
  // one on a GPU, in different planes: a detour through it pays one NVLink hop, not two.
  // 2: a GPU with a NIC but no NVLink to its switch.
  auto node = [](Topology& t, const std::string& name, NodeKind kind, int group) {
    return t.add_node(NodeInfo{name, kind, 0, 0, {-1, -1, -1}, group});
  };
  Topology mixed("mixed");
  mixed.family = "multi-plane";
  {
    ServerSpec s;
    s.gpus = 2;
    s.host_cpus = 0;
    const int nvs1 = 3;  // (server 0: nvswitch0, gpu0.0, gpu0.1; server 1 starts at 3)
    const auto g0 = add_server(mixed, 0, s), g1 = add_server(mixed, 1, s);
    REQUIRE(mixed.node(nvs1).kind == NodeKind::Switch);
    const int a = node(mixed, "A", NodeKind::Switch, -1), b = node(mixed, "B", NodeKind::Switch, -1),
              spine = node(mixed, "spine", NodeKind::Switch, -1), q = node(mixed, "q", NodeKind::Switch, -1);
    mixed.add_link(g0[1], a, 50e9, 500, "nic");
    mixed.add_link(nvs1, b, 50e9, 500, "nic");
    mixed.add_link(a, spine, 50e9, 500, "uplink");
    mixed.add_link(b, spine, 50e9, 500, "uplink");
    mixed.add_link(g0[0], q, 50e9, 500, "nic");
    mixed.add_link(g1[0], q, 50e9, 500, "nic");
  }
  Topology unlinked("unlinked");
  unlinked.family = "fat-tree";
  {
    const int nvs0 = node(unlinked, "nvswitch0", NodeKind::Switch, 0), g00 = node(unlinked, "gpu0.0", NodeKind::Device, 0),
              g01 = node(unlinked, "gpu0.1", NodeKind::Device, 0), nvs1 = node(unlinked, "nvswitch1", NodeKind::Switch, 1),
              g10 = node(unlinked, "gpu1.0", NodeKind::Device, 1), leaf = node(unlinked, "leaf", NodeKind::Switch, -1);
    unlinked.add_link(g01, nvs0, 450e9, 250, "nvlink");
    unlinked.add_link(g10, nvs1, 450e9, 250, "nvlink");
    for (int g : {g00, g01, g10}) unlinked.add_link(g, leaf, 50e9, 500, "nic");
  }
  for (const Topology* t : {&mixed, &unlinked}) {
    CAPTURE(t->name());
    Router structural(*t), searched(*t);
    searched.set_structural(false);
    CHECK(compare_all(*t, structural, searched) > 0);
    CHECK_FALSE(structural.structural());
  }
}

TEST_CASE("a failed link sends structural routes back to searching until it is repaired") {
  Topology t = build_clos(clos(12, 3, 8, true, 2), "mp");
  Router structural(t), searched(t);
  searched.set_structural(false);
  const int a = t.devices()[0], b = t.devices()[t.devices().size() - 1];
  const std::vector<int> before = structural.route(a, b, 1);
  REQUIRE(structural.structural());
  // Fail the first fabric link of that route (both directions), as the world does.
  int e = -1;
  for (int l : before)
    if (t.node(t.link(l).src).kind == NodeKind::Switch && t.node(t.link(l).src).group < 0) {
      e = l;
      break;
    }
  REQUIRE(e >= 0);
  t.mutable_link(e).up = t.mutable_link(t.link(e).reverse).up = false;
  structural.invalidate();
  searched.invalidate();
  const std::vector<int> during = structural.route(a, b, 1);
  CHECK_FALSE(structural.structural());
  CHECK(during == searched.route(a, b, 1));
  for (int l : during) CHECK(l != e);
  compare_all(t, structural, searched);
  t.mutable_link(e).up = t.mutable_link(t.link(e).reverse).up = true;
  structural.invalidate();
  searched.invalidate();
  CHECK(structural.route(a, b, 1) == before);
  CHECK(structural.structural());
  compare_all(t, structural, searched);
}
