#include "network/clos_distances.h"

#include <algorithm>

#include <boost/pending/disjoint_sets.hpp>

namespace sluice::net {

namespace {
// Disjoint sets over node ids (planes, pods, groups): Boost's, a node's set named by a node of it.
struct Sets {
  boost::disjoint_sets_with_storage<> ds;
  explicit Sets(int n) : ds(static_cast<size_t>(n)) {}
  int32_t find(int32_t v) { return static_cast<int32_t>(ds.find_set(v)); }
  void join(int32_t a, int32_t b) { ds.union_set(a, b); }
};
// Sets a weight the first time, then holds every later one to it.
bool same_weight(int32_t& slot, int32_t w) {
  if (slot < 0) slot = w;
  return slot == w;
}
}  // namespace

std::unique_ptr<ClosDistances> ClosDistances::detect(const Topology& t, std::span<const int32_t> w) {
  const bool df = t.family == "dragonfly";
  if (t.family != "fat-tree" && t.family != "rail-optimized" && t.family != "multi-plane" && !df) return nullptr;
  const int n = t.node_count(), m = t.link_count();
  if (w.size() != static_cast<size_t>(m)) return nullptr;
  auto c = std::make_unique<ClosDistances>();
  ClosDistances& d = *c;
  d.t_ = &t;
  d.links_ = m;
  d.dragonfly_ = df;
  const size_t un = static_cast<size_t>(n);
  d.role_.assign(un, kOther);
  d.server_.assign(un, -1);
  d.plane_.assign(un, -1);
  d.pod_.assign(un, -1);
  d.nic_.assign(un, -1);
  int servers = 0;
  std::vector<char> fab(un, 0);  // a fabric switch (no server's)
  for (int v = 0; v < n; ++v) {
    const NodeInfo& nd = t.node(v);
    const size_t uv = static_cast<size_t>(v);
    switch (nd.kind) {
      case NodeKind::Ocs:
        return nullptr;
      case NodeKind::Device:
        if (nd.group < 0) return nullptr;
        d.role_[uv] = kGpu;
        break;
      case NodeKind::Switch:
        if (nd.group >= 0) d.role_[uv] = kNvs;
        else fab[uv] = 1, d.role_[uv] = kLeaf;  // (its level below)
        break;
      case NodeKind::Host:
        d.role_[uv] = nd.group >= 0 ? kServerHost : kOther;
        break;
    }
    if (nd.group >= 0) {
      d.server_[uv] = nd.group;
      servers = std::max(servers, nd.group + 1);
    }
  }
  const size_t us = static_cast<size_t>(servers);
  d.nvs_.assign(us, -1);
  d.nvs_memo_.assign(us, 0);
  d.nvs_nic_.assign(us, -1);
  for (int v = 0; v < n; ++v)
    if (d.role_[static_cast<size_t>(v)] == kNvs) {
      int32_t& slot = d.nvs_[static_cast<size_t>(d.server_[static_cast<size_t>(v)])];
      if (slot >= 0) return nullptr;  // two switches in a server
      slot = v;
    }
  for (int32_t s : d.nvs_)
    if (s < 0) return nullptr;  // a server without its NVSwitch (a mesh, or a group index that is no server)
  // Every link (each direction is a link of its own: the checks hold both ways).
  std::vector<char> leafish(un, 0);
  std::vector<int32_t> nvlinks(un, 0);
  for (int e = 0; e < m; ++e) {
    const LinkInfo& l = t.link(e);
    const size_t a = static_cast<size_t>(l.src), b = static_cast<size_t>(l.dst);
    const int32_t we = w[static_cast<size_t>(e)];
    if ((l.route_penalty != 0 && !(df && fab[a] && fab[b])) || !l.up) return nullptr;  // (a dragonfly's global links: below)
    const Role ra = d.role_[a], rb = d.role_[b];
    if (ra == kServerHost || rb == kServerHost || ra == kOther || rb == kOther) {
      if (!same_weight(d.w_host_, we)) return nullptr;
      const bool server_host = (ra == kServerHost && rb == kGpu && d.server_[a] == d.server_[b]) ||
                               (rb == kServerHost && ra == kGpu && d.server_[a] == d.server_[b]);
      const bool storage = (ra == kOther && fab[b]) || (rb == kOther && fab[a]);
      if (!server_host && !storage) return nullptr;
      continue;
    }
    if (fab[a] && fab[b]) continue;  // levels below
    if (fab[b] && (ra == kGpu || ra == kNvs)) {  // a NIC (its reverse is seen from the switch's side)
      leafish[b] = 1;
      int32_t& nic = ra == kGpu ? d.nic_[a] : d.nvs_nic_[static_cast<size_t>(d.server_[a])];
      if (nic >= 0 && nic != l.dst) return nullptr;  // two NICs
      nic = l.dst;
      if (!same_weight(ra == kGpu ? d.w_nic_ : d.w_snic_, we)) return nullptr;
      continue;
    }
    if (fab[a] && (rb == kGpu || rb == kNvs)) continue;  // the reverse of a NIC
    const bool nvlink = ((ra == kGpu && rb == kNvs) || (ra == kNvs && rb == kGpu)) && d.server_[a] == d.server_[b];
    if (!nvlink || !same_weight(d.w_nv_, we)) return nullptr;
    if (ra == kGpu) ++nvlinks[a];
  }
  for (int v = 0; v < n; ++v)  // every GPU one NVLink to its server's switch (the way inside a server the closed forms take)
    if (d.role_[static_cast<size_t>(v)] == kGpu && nvlinks[static_cast<size_t>(v)] != 1) return nullptr;
  if (d.w_nic_ < 0 && d.w_snic_ < 0) return nullptr;  // no NIC: one server, nothing to route over a fabric
  if (df) {
    if (!d.dragonfly(fab, w)) return nullptr;
    return d.servers_alike(fab) ? std::move(c) : nullptr;
  }
  // Levels: breadth-first from the leaves (the switches NICs reach) over switch-to-switch links.
  std::vector<int32_t> level(un, -1), queue;
  for (int v = 0; v < n; ++v)
    if (fab[static_cast<size_t>(v)] && leafish[static_cast<size_t>(v)]) level[static_cast<size_t>(v)] = 0, queue.push_back(v);
  for (size_t i = 0; i < queue.size(); ++i)
    for (int e : t.out_links(queue[i])) {
      const size_t to = static_cast<size_t>(t.link(e).dst);
      if (fab[to] && level[to] < 0) level[to] = level[static_cast<size_t>(queue[i])] + 1, queue.push_back(static_cast<int32_t>(to));
    }
  Sets plane(n), pod(n);
  for (int e = 0; e < m; ++e) {
    const LinkInfo& l = t.link(e);
    const size_t a = static_cast<size_t>(l.src), b = static_cast<size_t>(l.dst);
    if (!fab[a] || !fab[b]) continue;
    const int32_t la = level[a], lb = level[b], lo = std::min(la, lb);
    if (la < 0 || lb < 0 || std::abs(la - lb) != 1 || std::max(la, lb) > 2) return nullptr;
    if (!same_weight(lo == 0 ? d.w_up_ : d.w_core_, w[static_cast<size_t>(e)])) return nullptr;
    plane.join(l.src, l.dst);
    if (lo == 0) pod.join(l.src, l.dst);
  }
  if (d.w_up_ >= 0 && ((d.w_nic_ >= 0 && d.w_up_ > d.w_nic_) || (d.w_snic_ >= 0 && d.w_up_ > d.w_snic_))) return nullptr;
  std::vector<int32_t> leaves_in_pod(un, 0), pods_in_plane(un, 0);
  std::vector<char> pod_seen(un, 0);
  for (int v = 0; v < n; ++v) {
    const size_t uv = static_cast<size_t>(v);
    if (!fab[uv]) continue;
    if (level[uv] < 0) return nullptr;  // a switch no server reaches
    d.role_[uv] = level[uv] == 0 ? kLeaf : level[uv] == 1 ? kMid : kCore;
    d.plane_[uv] = plane.find(v);
    if (level[uv] <= 1) d.pod_[uv] = pod.find(v);
    if (level[uv] == 0) {
      ++leaves_in_pod[static_cast<size_t>(d.pod_[uv])];
      if (!pod_seen[static_cast<size_t>(d.pod_[uv])]) pod_seen[static_cast<size_t>(d.pod_[uv])] = 1, ++pods_in_plane[static_cast<size_t>(d.plane_[uv])];
    }
  }
  // Every level-1 switch reaches every leaf of its pod (and, where a plane has several pods, a
  // core); every core reaches every pod of its plane.
  std::vector<int32_t> mark(un, -1);
  for (int v = 0; v < n; ++v) {
    const size_t uv = static_cast<size_t>(v);
    if (d.role_[uv] != kMid && d.role_[uv] != kCore) continue;
    int32_t below = 0;
    bool core = false;
    for (int e : t.out_links(v)) {
      const int to = t.link(e).dst;
      const size_t ut = static_cast<size_t>(to);
      if (!fab[ut]) continue;  // (storage)
      if (level[ut] > level[uv]) core = true;
      if (level[ut] != level[uv] - 1) continue;
      const int32_t key = d.role_[uv] == kMid ? to : d.pod_[ut];
      if (mark[static_cast<size_t>(key)] != v) mark[static_cast<size_t>(key)] = v, ++below;
    }
    const size_t pl = static_cast<size_t>(d.plane_[uv]);
    if (d.role_[uv] == kMid && (below != leaves_in_pod[static_cast<size_t>(d.pod_[uv])] || (pods_in_plane[pl] > 1 && !core))) return nullptr;
    if (d.role_[uv] == kCore && below != pods_in_plane[pl]) return nullptr;
  }
  return d.servers_alike(fab) ? std::move(c) : nullptr;
}

bool ClosDistances::servers_alike(const std::vector<char>& fab) {
  const Topology& t = *t_;
  const int n = t.node_count();
  const size_t un = static_cast<size_t>(n), us = nvs_.size();
  // Servers: their GPUs, and their NICs' pods plane by plane, alike in every plane.
  gpu_at_.assign(us + 1, 0);
  for (int v = 0; v < n; ++v)
    if (role_[static_cast<size_t>(v)] == kGpu) ++gpu_at_[static_cast<size_t>(server_[static_cast<size_t>(v)]) + 1];
  for (size_t s = 0; s < us; ++s) gpu_at_[s + 1] += gpu_at_[s];
  gpu_.assign(static_cast<size_t>(gpu_at_[us]), -1);
  {
    std::vector<int32_t> fill(gpu_at_.begin(), gpu_at_.end() - 1);
    for (int v = 0; v < n; ++v)
      if (role_[static_cast<size_t>(v)] == kGpu) gpu_[static_cast<size_t>(fill[static_cast<size_t>(server_[static_cast<size_t>(v)])]++)] = v;
  }
  std::vector<int32_t> planes;
  for (int v = 0; v < n; ++v)
    if (fab[static_cast<size_t>(v)] && plane_[static_cast<size_t>(v)] == v) planes.push_back(v);
  std::vector<int32_t> pod_of(us * planes.size(), -1), plane_index(un, -1);
  for (size_t i = 0; i < planes.size(); ++i) plane_index[static_cast<size_t>(planes[i])] = static_cast<int32_t>(i);
  for (size_t s = 0; s < us; ++s) {
    int entries = nvs_nic_[s] >= 0 ? 1 : 0;
    auto enter = [&](int32_t leaf) {
      int32_t& p = pod_of[s * planes.size() + static_cast<size_t>(plane_index[static_cast<size_t>(plane_[static_cast<size_t>(leaf)])])];
      if (p >= 0 && p != pod_[static_cast<size_t>(leaf)]) return false;  // two pods of one plane
      p = pod_[static_cast<size_t>(leaf)];
      return true;
    };
    if (nvs_nic_[s] >= 0 && !enter(nvs_nic_[s])) return false;
    for (int32_t i = gpu_at_[s]; i < gpu_at_[s + 1]; ++i) {
      const int32_t leaf = nic_[static_cast<size_t>(gpu_[static_cast<size_t>(i)])];
      if (leaf < 0) continue;
      // NICs on the switch and on GPUs together: a detour through the server would pay one
      // NVLink hop, not the two the closed forms count on.
      if (nvs_nic_[s] >= 0) return false;
      if (++entries > kMaxEntries || !enter(leaf)) return false;
    }
  }
  // Alike: in every plane, server s shares its pod with the same servers (labelled by the first).
  std::vector<int32_t> first(un, -1), label0(us, -1);
  for (size_t p = 0; p < planes.size(); ++p) {
    std::fill(first.begin(), first.end(), -1);
    for (size_t s = 0; s < us; ++s) {
      const int32_t q = pod_of[s * planes.size() + p];
      if (q < 0) return false;  // no NIC in this plane
      if (first[static_cast<size_t>(q)] < 0) first[static_cast<size_t>(q)] = static_cast<int32_t>(s);
      const int32_t label = first[static_cast<size_t>(q)];
      if (p == 0) label0[s] = label;
      else if (label0[s] != label) return false;
    }
  }
  return true;
}

bool ClosDistances::target(int dst, Target& tg) const {
  if (dst < 0 || static_cast<size_t>(dst) >= role_.size() || role_[static_cast<size_t>(dst)] != kGpu) return false;
  tg.dst = dst;
  tg.server = server_[static_cast<size_t>(dst)];
  if (++serial_ == 0) {  // wrapped: forget every remembered distance (serial 0 is never a target's)
    std::fill(nvs_memo_.begin(), nvs_memo_.end(), 0);
    serial_ = 1;
  }
  tg.serial = serial_;
  tg.n = 0;
  const size_t s = static_cast<size_t>(tg.server);
  auto add = [&](int32_t leaf, int32_t cost) {
    for (int i = 0; i < tg.n; ++i)
      if (tg.e[static_cast<size_t>(i)].leaf == leaf) {
        tg.e[static_cast<size_t>(i)].cost = std::min(tg.e[static_cast<size_t>(i)].cost, cost);
        return;
      }
    tg.e[static_cast<size_t>(tg.n++)] = Target::Entry{leaf, plane_[static_cast<size_t>(leaf)], cost};
  };
  if (nvs_nic_[s] >= 0) add(nvs_nic_[s], w_snic_ + w_nv_);
  for (int32_t i = gpu_at_[s]; i < gpu_at_[s + 1]; ++i) {
    const int32_t g = gpu_[static_cast<size_t>(i)];
    if (nic_[static_cast<size_t>(g)] >= 0) add(nic_[static_cast<size_t>(g)], w_nic_ + (g == dst ? 0 : 2 * w_nv_));
  }
  return true;
}

bool ClosDistances::dragonfly(const std::vector<char>& fab, std::span<const int32_t> w) {
  // Groups: routers joined by links without a penalty (local links); every group a clique of
  // one local weight, global links (with a penalty) of one weight between different groups,
  // every pair of groups joined, and one global hop heavier than two local ones (so a route
  // crosses one global link, and a third group is never on the way).
  const Topology& t = *t_;
  const int n = t.node_count(), m = t.link_count();
  const size_t un = static_cast<size_t>(n);
  Sets grp(n);
  int32_t first = -1;
  for (int v = 0; v < n; ++v)
    if (fab[static_cast<size_t>(v)] && first < 0) first = v;
  for (int e = 0; e < m; ++e) {
    const LinkInfo& l = t.link(e);
    if (!fab[static_cast<size_t>(l.src)] || !fab[static_cast<size_t>(l.dst)]) continue;
    const int32_t we = w[static_cast<size_t>(e)];
    if (l.route_penalty == 0) {
      if (!same_weight(w_up_, we)) return false;
      grp.join(l.src, l.dst);
    } else if (!same_weight(w_core_, we)) {
      return false;
    }
  }
  std::vector<int32_t> size(un, 0);
  for (int v = 0; v < n; ++v)
    if (fab[static_cast<size_t>(v)]) {
      plane_[static_cast<size_t>(v)] = first;  // one plane
      pod_[static_cast<size_t>(v)] = grp.find(v);
      role_[static_cast<size_t>(v)] = kLeaf;
      ++size[static_cast<size_t>(pod_[static_cast<size_t>(v)])];
    }
  int32_t groups = 0;
  for (int v = 0; v < n; ++v) groups += fab[static_cast<size_t>(v)] && pod_[static_cast<size_t>(v)] == v;
  if (groups > 1 && (w_core_ < 0 || w_up_ < 0 || 2 * w_up_ >= w_core_)) return false;
  const int32_t w_in = std::min(w_nic_ < 0 ? kInf : w_nic_, w_snic_ < 0 ? kInf : w_snic_);
  if (w_up_ >= 0 && w_up_ > 2 * w_in + 2 * w_nv_) return false;  // (a detour through a server never shorter than a local hop)
  gpeer_at_.assign(un + 1, 0);
  for (int v = 0; v < n; ++v) {
    const size_t uv = static_cast<size_t>(v);
    gpeer_at_[uv + 1] = gpeer_at_[uv];
    if (!fab[uv]) continue;
    std::vector<int32_t> local;
    for (int e : t.out_links(v)) {
      const LinkInfo& l = t.link(e);
      const size_t to = static_cast<size_t>(l.dst);
      if (!fab[to]) continue;
      if (l.route_penalty == 0) {
        local.push_back(l.dst);
        continue;
      }
      if (pod_[to] == pod_[uv]) return false;  // a global link inside a group
      gpeer_.push_back(l.dst);
      ++gpeer_at_[uv + 1];
    }
    std::sort(local.begin(), local.end());
    local.erase(std::unique(local.begin(), local.end()), local.end());
    if (static_cast<int32_t>(local.size()) != size[static_cast<size_t>(pod_[uv])] - 1) return false;  // not a clique
    std::sort(gpeer_.begin() + gpeer_at_[uv], gpeer_.end());
  }
  // Each router's groups reached by its global links (sorted), and every group reaching all.
  ggrp_at_.assign(un + 1, 0);
  for (int v = 0; v < n; ++v) {
    const size_t uv = static_cast<size_t>(v);
    ggrp_at_[uv + 1] = ggrp_at_[uv];
    if (!fab[uv]) continue;
    const size_t from = ggrp_.size();
    for (int32_t i = gpeer_at_[uv]; i < gpeer_at_[uv + 1]; ++i) ggrp_.push_back(pod_[static_cast<size_t>(gpeer_[static_cast<size_t>(i)])]);
    std::sort(ggrp_.begin() + static_cast<std::ptrdiff_t>(from), ggrp_.end());
    ggrp_.erase(std::unique(ggrp_.begin() + static_cast<std::ptrdiff_t>(from), ggrp_.end()), ggrp_.end());
    ggrp_at_[uv + 1] = static_cast<int32_t>(ggrp_.size());
  }
  std::vector<std::vector<int32_t>> seen(un);  // each group's groups reached
  for (int v = 0; v < n; ++v)
    if (fab[static_cast<size_t>(v)])
      for (int32_t i = ggrp_at_[static_cast<size_t>(v)]; i < ggrp_at_[static_cast<size_t>(v) + 1]; ++i)
        seen[static_cast<size_t>(pod_[static_cast<size_t>(v)])].push_back(ggrp_[static_cast<size_t>(i)]);
  for (int v = 0; v < n; ++v) {
    if (!fab[static_cast<size_t>(v)] || pod_[static_cast<size_t>(v)] != v) continue;
    auto& g = seen[static_cast<size_t>(v)];
    std::sort(g.begin(), g.end());
    g.erase(std::unique(g.begin(), g.end()), g.end());
    if (static_cast<int32_t>(g.size()) != groups - 1) return false;  // a pair of groups without a global link
  }
  return true;
}

int32_t ClosDistances::fabric(int x, int leaf) const {
  const size_t ux = static_cast<size_t>(x);
  if (dragonfly_) {
    // One global hop, with a local hop before it unless x holds it and after it unless leaf does.
    const int32_t local = w_up_, global = w_core_;
    const size_t ul = static_cast<size_t>(leaf);
    if (pod_[ux] == pod_[ul]) return x == leaf ? 0 : local;
    const auto peers = gpeer_.begin();
    if (std::binary_search(peers + gpeer_at_[ux], peers + gpeer_at_[ux + 1], leaf)) return global;
    const auto gr = ggrp_.begin();
    const bool near = std::binary_search(gr + ggrp_at_[ux], gr + ggrp_at_[ux + 1], pod_[ul]) ||
                      std::binary_search(gr + ggrp_at_[ul], gr + ggrp_at_[ul + 1], pod_[ux]);
    return global + (near ? local : 2 * local);
  }
  const bool same_pod = pod_[ux] == pod_[static_cast<size_t>(leaf)];
  switch (role_[ux]) {
    case kLeaf:
      return x == leaf ? 0 : same_pod ? 2 * w_up_ : 2 * w_up_ + 2 * w_core_;
    case kMid:
      return same_pod ? w_up_ : w_up_ + 2 * w_core_;
    default:
      return w_core_ + w_up_;
  }
}

int32_t ClosDistances::switch_dist(const Target& tg, int x) const {
  const int32_t pl = plane_[static_cast<size_t>(x)];
  int32_t best = kInf;
  for (int i = 0; i < tg.n; ++i) {
    const Target::Entry& e = tg.e[static_cast<size_t>(i)];
    if (e.plane == pl) best = std::min(best, fabric(x, e.leaf) + e.cost);
  }
  return best;
}

int32_t ClosDistances::nvs_dist(const Target& tg, int s) const {
  if (s == tg.server) return w_nv_;  // its link to the destination
  const size_t us = static_cast<size_t>(s);
  uint64_t& memo = nvs_memo_[us];
  if (memo >> 32 == tg.serial) return static_cast<int32_t>(memo & 0xFFFFFFFFu);
  int64_t best = kInf;
  if (nvs_nic_[us] >= 0) best = static_cast<int64_t>(w_snic_) + switch_dist(tg, nvs_nic_[us]);
  for (int32_t i = gpu_at_[us]; i < gpu_at_[us + 1]; ++i) {
    const int32_t leaf = nic_[static_cast<size_t>(gpu_[static_cast<size_t>(i)])];
    if (leaf >= 0) best = std::min<int64_t>(best, static_cast<int64_t>(w_nv_) + w_nic_ + switch_dist(tg, leaf));
  }
  const int32_t d = static_cast<int32_t>(std::min<int64_t>(best, kInf));
  memo = static_cast<uint64_t>(tg.serial) << 32 | static_cast<uint32_t>(d);
  return d;
}

int32_t ClosDistances::gpu_dist(const Target& tg, int x) const {
  if (x == tg.dst) return 0;
  const size_t ux = static_cast<size_t>(x);
  int64_t best = static_cast<int64_t>(w_nv_) + nvs_dist(tg, server_[ux]);
  if (nic_[ux] >= 0) best = std::min<int64_t>(best, static_cast<int64_t>(w_nic_) + switch_dist(tg, nic_[ux]));
  return static_cast<int32_t>(std::min<int64_t>(best, kInf));
}

int32_t ClosDistances::dist(const Target& tg, int x) const {
  switch (role_[static_cast<size_t>(x)]) {
    case kGpu:
      return gpu_dist(tg, x);
    case kNvs:
      return nvs_dist(tg, server_[static_cast<size_t>(x)]);
    case kLeaf:
    case kMid:
    case kCore:
      return switch_dist(tg, x);
    case kServerHost:
    case kOther: {  // a host: over its links (to its server's GPUs, or a storage server's to switches)
      int64_t best = kInf;
      for (int e : t_->out_links(x)) {
        const int to = t_->link(e).dst;
        best = std::min<int64_t>(best, static_cast<int64_t>(w_host_) + (role_[static_cast<size_t>(to)] == kGpu ? gpu_dist(tg, to) : switch_dist(tg, to)));
      }
      return static_cast<int32_t>(std::min<int64_t>(best, kInf));
    }
  }
  return kInf;
}

}  // namespace sluice::net
