// Distances on a Clos fabric of NVSwitch servers computed from its structure: no shortest-path
// search and no distance vector per destination. The router's walk reads them exactly as it
// reads a Dijkstra's (the same integers), so its equal-cost choices, and every route, are the
// same; what goes is the search (a Dijkstra per leaf, settled as far as routes need) and its
// memory (on 102,400 GPUs, 3,200 leaves' vectors over 123,520 nodes: 1.6 GB).
//
// It applies to the fabrics build_clos makes (fat-tree, rail-optimized, multi-plane) and to
// dragonflies while every link is up, and only where the topology passes every check of
// detect(), the assumptions of the closed forms:
//  - servers: one NVSwitch each, every GPU linked to it once (one weight, w_nv) and to at most
//    one leaf (one weight, w_nic), hosts only over their PCIe links (host weight), nothing else;
//    or NICs on the NVSwitch instead (one a server), never both in one server;
//  - fabric switches in levels (leaf 0, aggregation/spine 1, core 2) joined only between adjacent
//    levels, one weight per pair of levels (w_up, w_core), planes (connected switch fabrics) and
//    pods (a plane's leaves and level-1 switches, connected without cores) where every level-1
//    switch reaches every leaf of its pod and every core reaches every pod of its plane;
//  - every server has a NIC in every plane, its NICs in a plane all in one pod, and servers share
//    pods alike in every plane; w_up <= w_nic, so no path through a server is shorter than the
//    fabric's own (two levels up and down cost at most what a detour through a server does).
// Then, for a destination GPU D of server S, a switch x of plane P is at
//   min over S's NICs (e, leaf l) in P of  fabric(x, l) + w(e, l) + inside(e, D),
// inside(e, D) being 0 (e is D), w_nv (e is the NVSwitch) or 2 w_nv (another GPU); a path that
// changes planes through another server first is never shorter (it pays two NIC hops and two
// NVLink hops for at most what the pods' structure saves, the same in every plane). A GPU, an
// NVSwitch or a host is at the least over its links of the link's weight plus the far end's.
// A dragonfly (groups of routers, each a clique of local links, every pair of groups joined by
// global links whose penalty makes one global hop heavier than two local ones; each server's
// NICs in one group) is one plane whose pods are its groups: from router x to router y in
// another group, one global hop, plus a local hop before it unless x holds a global link to
// y's group, after it unless y holds one to x's, and neither where x and y share one.
// Test programs that drew some 50,000 random build_clos shapes found no distance differing from
// a Dijkstra's (a review's; the shapes tests/unit/test_clos_distances.cpp keeps are below).
// tests/unit/test_clos_distances.cpp holds every distance equal to a Dijkstra's on small
// instances of every shape detect() accepts, and checks that it refuses the rest.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "network/topology.h"

namespace sluice::net {

class ClosDistances {
 public:
  static constexpr int32_t kInf = std::numeric_limits<int32_t>::max();
  static constexpr int kMaxEntries = 32;  // NICs of one server (a server with more: not structural)
  // The structure of `t` if it is such a Clos with these link weights (the router's, every link
  // up), else null.
  static std::unique_ptr<ClosDistances> detect(const Topology& t, std::span<const int32_t> weights);

  // Where a destination GPU's server is entered: each NIC's leaf, its plane and the cost from
  // the leaf to the GPU.
  struct Target {
    int dst = -1, server = -1, n = 0;
    uint32_t serial = 0;  // which target() filled it: the key of its servers' remembered distances
    struct Entry {
      int32_t leaf, plane, cost;
    };
    std::array<Entry, kMaxEntries> e{};
  };
  // Fills `tg` for destination `dst`; false when dst is not a GPU of a server (routes to it are searched).
  bool target(int dst, Target& tg) const;
  // The distance from node x to tg's destination, kInf when there is no path.
  int32_t dist(const Target& tg, int x) const;
  // The topology's size it was built for (links or nodes added later: built again).
  int nodes() const { return static_cast<int>(role_.size()); }
  int links() const { return links_; }

 private:
  enum Role : uint8_t { kGpu, kNvs, kServerHost, kLeaf, kMid, kCore, kOther };
  // detect()'s parts: a dragonfly's groups and links, and the servers' NICs (both fill members).
  bool dragonfly(const std::vector<char>& fab, std::span<const int32_t> w);
  bool servers_alike(const std::vector<char>& fab);
  int32_t fabric(int x, int leaf) const;  // x and leaf in one plane
  int32_t switch_dist(const Target& tg, int x) const;
  int32_t nvs_dist(const Target& tg, int s) const;
  int32_t gpu_dist(const Target& tg, int x) const;
  const Topology* t_ = nullptr;
  int links_ = 0;
  int32_t w_nv_ = -1, w_nic_ = -1, w_snic_ = -1, w_up_ = -1, w_core_ = -1, w_host_ = -1;
  std::vector<Role> role_;
  std::vector<int32_t> server_;  // a server node's server, else -1
  std::vector<int32_t> plane_, pod_;  // a fabric switch's (pod: levels 0 and 1 only)
  std::vector<int32_t> nic_;  // a GPU's leaf, -1 when it has none
  std::vector<int32_t> nvs_, nvs_nic_;  // each server's NVSwitch and its leaf (-1 when none)
  std::vector<int32_t> gpu_at_, gpu_;  // each server's GPUs (compressed rows)
  // A dragonfly (pods are its groups, one plane, w_up_ its local and w_core_ its global weight):
  // each router's global peers and the groups they are in, sorted (compressed rows).
  bool dragonfly_ = false;
  std::vector<int32_t> gpeer_at_, gpeer_, ggrp_at_, ggrp_;
  // Each server's NVSwitch distance to the latest target, (serial << 32 | distance): a walk reads
  // a leaf's GPUs, and through each its server's switch, again at every hop near them.
  mutable std::vector<uint64_t> nvs_memo_;
  mutable uint32_t serial_ = 0;
};

}  // namespace sluice::net
