// Distances on tori computed from their coordinates: no shortest-path search and no distance
// vector per destination. The router's walk reads them exactly as it reads a Dijkstra's (the
// same integers), so its equal-cost choices, and every route, are the same; what goes is a
// Dijkstra per destination and its vector (on a 16,384-chip torus, 16,384 vectors of 16,384
// distances: 1 GiB).
//
// The tori (regions) are those the topology describes: its own torus or mesh (build_torus:
// regular or twisted, `Topology::torus`) and, on a TPU pod, each OCS slice's own torus in the
// slice's coordinates (`Topology::slices`, kept by SliceManager). The description is not trusted:
// detect() checks each region against the links as they are, and takes it only where
//  - every link out of a region node that is up (weight below a torn-down link's) goes to one of
//    its torus neighbours (c ± e_d, wrapped as the region wraps) in the same region, all with
//    one weight w;
//  - every torus neighbour is reached by such a link;
//  - no node lies in two regions, and the region's diameter times w stays below a torn-down
//    link's weight (so no path over one is ever shorter).
// Then the region's up links are exactly its torus graph, and every path that leaves it crosses
// a torn-down link: the distance between two of its nodes is w times their hop distance on the
// torus. A torus (regular or twisted) is the Cayley graph of Z^3 modulo its wrap lattice, so the
// hop distance depends on the coordinates' difference only: one breadth-first search from the
// origin per region gives every distance (a mesh's is the L1 norm), kept by difference (8
// integers a node: a walk's read is a lookup). The twist (TPU v4: a short
// dimension's wrap-around also steps k along every long one, extents k and 2k) is a lattice
// vector k e_s + k sum of e_l, reduced as the generators wire it; detect() checks the wiring
// against that reduction, so a torus wired otherwise is searched, not mis-measured.
// A node outside the destination's region reads as unreachable (the max): the walk from a node
// inside never steps out (only torn-down links lead out, heavier than any route inside); a
// route from outside the region is searched (target() refuses it).
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "network/topology.h"

namespace sluice::net {

class TorusDistances {
 public:
  static constexpr int32_t kInf = std::numeric_limits<int32_t>::max();
  static constexpr int32_t kDown = 1 << 26;  // the router's weight of a torn-down link
  // The regions of `t` that pass every check with these link weights (the router's now,
  // torn-down links at kDown); null when none does.
  static std::unique_ptr<TorusDistances> detect(const Topology& t, std::span<const int32_t> weights);

  struct Target {
    int region = -1;
    const int32_t* by_diff = nullptr;  // the region's distances by coordinate difference ...
    int32_t base = 0;                  // ... offset for this destination
  };
  // Whether src and dst lie in one region (then tg describes dst).
  bool target(int src, int dst, Target& tg) const;
  // The distance from node v to tg's destination: the max when v is outside its region.
  int32_t dist(const Target& tg, int v) const {
    if (static_cast<size_t>(v) >= region_of_.size() || region_of_[static_cast<size_t>(v)] != tg.region) return kInf;
    return tg.by_diff[tg.base + key_[static_cast<size_t>(v)]];
  }

 private:
  struct Region {
    std::array<int, 3> dims{1, 1, 1};
    bool wrap = true, twisted = false;
    int k = 0;  // a twisted region's short extent (its long ones are 2k)
    int32_t w = 0;
    // w times the hop distance for every coordinate difference d (each in (-D, D)), at
    // (d0 + D0 - 1) + S0 (d1 + D1 - 1) + S0 S1 (d2 + D2 - 1), S = 2D - 1: from one breadth-first
    // search from the origin (hop distances depend on the difference only), reduced by the wrap
    // lattice; a mesh's is the L1 norm. 8 integers a node: the walk reads it for every neighbour
    // of every hop, so a lookup beats reducing the difference each time.
    std::vector<int32_t> by_diff;
    int32_t center = 0;  // the index of difference 0
  };
  // Brings an offset into the region's fundamental box [0, dims) by its wrap lattice.
  static void reduce(const Region& r, std::array<int, 3>& x);
  std::vector<Region> regions_;
  std::vector<int32_t> region_of_;  // per node, -1 outside every region
  std::vector<int32_t> key_;        // per node, c0 + S0 c1 + S0 S1 c2 of its coordinates in its region
};

}  // namespace sluice::net
