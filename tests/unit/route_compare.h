// Shared by the structural-route tests (test_clos_distances.cpp, test_torus_distances.cpp): a
// router that takes distances from the fabric's structure against one that searches.
#pragma once
#include <cstdint>
#include <vector>

#include <doctest/doctest.h>

#include "network/routing.h"

namespace sluice::testing {

// Every route from each of `srcs` to each of `dsts`, two salts each, and every spray width, the
// same from both routers. Returns how many routes were compared.
inline size_t compare_routes(const net::Topology& t, net::Router& structural, net::Router& searched, const std::vector<int>& srcs,
                             const std::vector<int>& dsts) {
  size_t n = 0;
  for (int dst : dsts)
    for (int src : srcs) {
      if (src == dst) continue;
      for (uint64_t salt : {uint64_t{0}, uint64_t{0x9E37} * static_cast<uint64_t>(src + 1)}) {
        const auto a = structural.route(src, dst, salt), b = searched.route(src, dst, salt);
        CAPTURE(t.node(src).name);
        CAPTURE(t.node(dst).name);
        REQUIRE(a == b);
        ++n;
      }
      REQUIRE(structural.spray_width(src, dst) == searched.spray_width(src, dst));
    }
  return n;
}

// Every node of t, in order.
inline std::vector<int> all_nodes(const net::Topology& t) {
  std::vector<int> v(static_cast<size_t>(t.node_count()));
  for (int i = 0; i < t.node_count(); ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

}  // namespace sluice::testing
