// Structural routes on tori, meshes and OCS slices (network/torus_distances.h): every route a
// router computes from the coordinates equals the route a searching router (a Dijkstra per
// destination) gives, hop for hop, on regular and twisted tori, meshes and a pod's OCS slices;
// a torus whose links are not what its coordinates say, or one with a link down, is searched.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/node.h"
#include "hardware/spec.h"
#include "network/generators.h"
#include "network/routing.h"
#include "route_compare.h"
#include "test_support.h"
#include "world/world.h"

using namespace sluice::net;
using sluice::testing::all_nodes;
using sluice::testing::compare_routes;

namespace {

TorusSpec torus_spec(std::vector<int> dims, bool twisted, bool wrap = true) {
  TorusSpec s;
  s.dims = std::move(dims);
  s.twisted = twisted;
  s.wrap = wrap;
  return s;
}

}  // namespace

TEST_CASE("structural routes on regular and twisted tori and meshes equal searched shortest paths, hop for hop") {
  struct Case {
    std::vector<int> dims;
    bool twisted, wrap;
  };
  const std::vector<Case> cases = {
      {{4, 4, 4}, false, true},  {{3, 5, 2}, false, true},  {{6, 4}, false, true},  {{7}, false, true},
      {{4, 3, 3}, false, false}, {{4, 4, 8}, true, true},   {{3, 6, 6}, true, true}, {{4, 8, 8}, true, true},
      {{3, 6}, true, true},      {{4, 8}, true, true},      {{2, 1, 3}, false, true}, {{8, 4, 4}, true, true},
      {{6, 3}, true, true},      {{6, 6, 3}, true, true}};
  for (const Case& c : cases) {
    const Topology t = build_torus(torus_spec(c.dims, c.twisted, c.wrap), "t");
    CAPTURE(fmt::format("{} twisted {} wrap {}", fmt::join(c.dims, "x"), c.twisted, c.wrap));
    Router structural(t, RoutePolicy::ShortestPath), searched(t, RoutePolicy::ShortestPath);
    searched.set_structural(false);
    CHECK(compare_routes(t, structural, searched, all_nodes(t), t.devices()) > 0);
    CHECK(structural.structural());  // (so the comparison above was not of two searches)
    CHECK(structural.distance_vectors() == 0);  // no search at all
  }
}

TEST_CASE("a torus with a link down is searched until the repair, and one wired otherwise than its coordinates say is searched") {
  Topology t = build_torus(torus_spec({4, 4, 8}, true), "twisted");
  Router structural(t, RoutePolicy::ShortestPath);
  const int a = t.devices()[0], b = t.devices()[100];
  (void)structural.route(a, b);
  REQUIRE(structural.structural());
  // A wrap-around link (both ways) fails: the region is no longer its torus graph.
  const int e = t.out_links(a).back();
  t.mutable_link(e).up = false;
  t.mutable_link(t.link(e).reverse).up = false;
  structural.invalidate();
  Router searched(t, RoutePolicy::ShortestPath);
  searched.set_structural(false);
  CHECK(compare_routes(t, structural, searched, t.devices(), {a, b, t.devices()[127]}) > 0);
  CHECK_FALSE(structural.structural());
  CHECK(structural.distance_vectors() > 0);
  t.mutable_link(e).up = true;
  t.mutable_link(t.link(e).reverse).up = true;
  structural.invalidate();
  (void)structural.route(t.devices()[5], t.devices()[77]);  // (a pair never routed: walked now, not kept)
  CHECK(structural.structural());

  // A shortcut across the torus: its links are more than its coordinates say.
  Topology shortcut = build_torus(torus_spec({4, 4, 4}, false), "shortcut");
  shortcut.add_link(shortcut.devices()[0], shortcut.devices()[42], 50e9, 500, "ici");
  // A regular torus described as twisted: its wrap-arounds are not where the twist puts them.
  Topology misdescribed = build_torus(torus_spec({4, 4, 8}, false), "misdescribed");
  misdescribed.torus->twisted = true;
  // Links of two speeds: the closed form needs one weight.
  Topology mixed = build_torus(torus_spec({4, 4}, false), "mixed");
  mixed.mutable_link(0).bandwidth_Bps = 25e9;
  mixed.mutable_link(mixed.link(0).reverse).bandwidth_Bps = 25e9;
  // Described twice (its own torus and a slice over the same chips): no node may be in two regions.
  Topology twice = build_torus(torus_spec({4, 4}, false), "twice");
  twice.slices.push_back(*twice.torus);
  // A ring of 200 heavy links (a penalty of 2^20 each) with a torn-down chord across it: 100 hops
  // outweigh the chord's torn-down weight (2^26), so a route over the chord is the shortest and
  // the closed form (which assumes every path out of the torus is longer) must not be used.
  Topology heavy = build_torus(torus_spec({200}, false), "heavy");
  for (int l = 0; l < heavy.link_count(); ++l) heavy.mutable_link(l).route_penalty = 1 << 20;
  const int chord = heavy.add_link(heavy.devices()[0], heavy.devices()[100], 50e9, 500, "chord");
  heavy.mutable_link(chord).up = false;
  heavy.mutable_link(heavy.link(chord).reverse).up = false;
  for (Topology* x : {&shortcut, &misdescribed, &mixed, &twice, &heavy}) {
    CAPTURE(x->name());
    Router s(*x, RoutePolicy::ShortestPath), q(*x, RoutePolicy::ShortestPath);
    q.set_structural(false);
    CHECK(compare_routes(*x, s, q, x->devices(), x->devices()) > 0);
    CHECK_FALSE(s.structural());
  }
}

TEST_CASE("structural routes inside a pod's OCS slices equal searched ones, through re-forming and a failed link") {
  using namespace sluice;
  Cluster c;
  c.topology = std::make_shared<net::Topology>(
      net::load_topology(load_yaml_string("{catalog: tpu-v4-pod-ocs, cubes: [2, 2, 2]}", "t.yaml"), testing::registry(), "topology"));
  c.hardware = load_hardware("tpu-v4");
  World w(1, c);
  net::Topology& t = *c.topology;
  auto nodes = [&](const std::vector<int>& devs) {
    std::vector<int> v;
    for (int d : devs) v.push_back(w.device_node(d));
    return v;
  };
  Router& router = w.fabric().router();
  // The world's router against a fresh searching one, from srcs to dsts (within a slice by default).
  auto compare = [&](const std::vector<int>& srcs, const std::vector<int>* dsts = nullptr) {
    Router searched(t, RoutePolicy::ShortestPath);
    searched.set_structural(false);
    return compare_routes(t, router, searched, srcs, dsts ? *dsts : srcs);
  };
  const auto a_devs = w.slices().form({0, 1}, {1, 1, 2}, true, "a");  // 4x4x8, twisted
  const auto a = nodes(a_devs);
  const auto b = nodes(w.slices().form({2, 3, 4, 5}, {2, 2, 1}, true, "b"));  // 8x8x4, twisted
  REQUIRE(t.slices.size() == 2);
  CHECK(compare(a) > 0);
  CHECK(router.structural());
  CHECK(compare(b) > 0);
  CHECK(router.structural());
  CHECK(router.distance_vectors() == 0);
  // Routes into a slice from outside it (a chip of no slice, a chip of the other slice) cross
  // torn-down circuits: searched, and the same as a searching router's.
  const std::vector<int> outside{w.device_node(w.device_count() - 1), w.device_node(w.device_count() - 64), b[0], b[200]};
  CHECK(compare(outside, &a) > 0);
  CHECK_FALSE(router.structural());
  // Slice a moves to the last two cubes as a regular torus: its old circuits go, its new ones count.
  w.slices().tear_down(a_devs);
  REQUIRE(t.slices.size() == 1);
  const auto a2 = nodes(w.slices().form({6, 7}, {1, 1, 2}, false, "a"));
  REQUIRE(t.slices.size() == 2);
  CHECK(compare(a2) > 0);
  CHECK(router.structural());
  // A chip's link inside slice b fails: b is searched (and its routes still equal a search's);
  // slice a2 keeps its closed form.
  const int e = t.out_links(b[9]).front();
  t.mutable_link(e).up = false;
  t.mutable_link(t.link(e).reverse).up = false;
  router.invalidate();
  CHECK(compare(b) > 0);
  CHECK_FALSE(router.structural());
  CHECK(compare(a2) > 0);
  CHECK(router.structural());
}
