#include "network/routing.h"

#include <cmath>
#include <functional>
#include <limits>
#include <queue>

#include <fmt/format.h>

namespace sluice::net {

namespace {
// Dijkstra's buckets (dist_to): as wide as the lightest link (static_weight's 1024), as many as
// cover the distances of ordinary routes (4,096 buckets: 4 M, some 4,000 hops).
constexpr int32_t kBucketWidth = 1024;
constexpr size_t kBuckets = 4096;
constexpr int32_t kBucketed = kBucketWidth * static_cast<int32_t>(kBuckets);
}  // namespace

Router::Router(const Topology& t, RoutePolicy policy) : t_(t) {
  const bool regular_torus = t.torus && !t.torus->twisted;
  if (policy == RoutePolicy::DimensionOrder && !regular_torus)
    throw TopologyError(fmt::format("dimension-order routing needs a regular torus or mesh; '{}' is not one", t.name()));
  dor_ = policy == RoutePolicy::DimensionOrder || (policy == RoutePolicy::Auto && regular_torus);
  if (dor_) {
    torus_link_.assign(static_cast<size_t>(t.node_count()) * 6, -1);
    for (int e = 0; e < t.link_count(); ++e) {
      const auto& l = t.link(e);
      const auto& a = t.node(l.src).coord;
      const auto& b = t.node(l.dst).coord;
      for (int d = 0; d < t.torus->ndims; ++d) {
        const int ext = t.torus->dims[static_cast<size_t>(d)];
        if (a[static_cast<size_t>(d)] == b[static_cast<size_t>(d)]) continue;
        const bool plus = (a[static_cast<size_t>(d)] + 1) % ext == b[static_cast<size_t>(d)];
        auto& slot = torus_link_[static_cast<size_t>(l.src) * 6 + static_cast<size_t>(2 * d + (plus ? 0 : 1))];
        if (slot < 0) slot = e;
        if (ext == 2) {  // a 2-ring: the one link serves both directions
          auto& other = torus_link_[static_cast<size_t>(l.src) * 6 + static_cast<size_t>(2 * d + 1)];
          if (other < 0) other = e;
        }
      }
    }
  }
}

// Hops first; among equal hop counts the faster links (NVLink before the NIC path inside a
// server) and the fewer penalised links (a dragonfly's global hops); hosts only as endpoints; torn-down circuits only as a last resort. A link's
// bandwidth and ends do not change once the router exists (only whether it is up), so the
// rest is computed once per link (static_w_).
int32_t Router::static_weight(int link) const {
  const auto& l = t_.link(link);
  const bool host = t_.node(l.src).kind == NodeKind::Host || t_.node(l.dst).kind == NodeKind::Host;
  if (host) return 1 << 20;
  const double slow = std::min(512.0, 64.0 * 50e9 / l.bandwidth_Bps);
  return 1024 + static_cast<int32_t>(std::lround(slow)) + l.route_penalty;
}

int32_t Router::weight(int link) const {
  if (!t_.link(link).up) return 1 << 26;
  return static_cast<size_t>(link) < static_w_.size() ? static_w_[static_cast<size_t>(link)] : static_weight(link);
}

void Router::ensure_weights() {
  for (int e = static_cast<int>(static_w_.size()); e < t_.link_count(); ++e) static_w_.push_back(static_weight(e));
  if (weights_.size() == static_cast<size_t>(t_.link_count()) && arc_at_.size() == static_cast<size_t>(t_.node_count()) + 1) return;
  weights_.resize(static_cast<size_t>(t_.link_count()));
  link_dst_.resize(static_cast<size_t>(t_.link_count()));
  weights_down_ = false;
  min_weight_ = std::numeric_limits<int32_t>::max();
  for (int e = 0; e < t_.link_count(); ++e) {
    weights_[static_cast<size_t>(e)] = weight(e);
    min_weight_ = std::min(min_weight_, weights_[static_cast<size_t>(e)]);
    link_dst_[static_cast<size_t>(e)] = t_.link(e).dst;
    weights_down_ |= weights_[static_cast<size_t>(e)] >= (1 << 26);
  }
  const int n = t_.node_count();
  arc_at_.assign(static_cast<size_t>(n) + 1, 0);
  arc_.clear();
  arc_.reserve(static_cast<size_t>(t_.link_count()));
  for (int v = 0; v < n; ++v) {
    arc_at_[static_cast<size_t>(v)] = static_cast<int32_t>(arc_.size());
    for (int e : t_.out_links(v)) arc_.push_back({link_dst_[static_cast<size_t>(e)], weights_[static_cast<size_t>(e)], e});
  }
  arc_at_[static_cast<size_t>(n)] = static_cast<int32_t>(arc_.size());
}

const std::vector<int32_t>& Router::dist_to(int dst, bool complete) {
  auto it = dist_.find(dst);
  if (it != dist_.end() && (!complete || !partial_.count(dst))) return it->second;
  constexpr int32_t kInf = std::numeric_limits<int32_t>::max();
  constexpr int32_t kDown = 1 << 26;  // weight() of a torn-down circuit
  const size_t n = static_cast<size_t>(t_.node_count());
  std::vector<int32_t> dist(n, kInf);
  // Dijkstra from dst over the links out of each node (weights are symmetric, so distances
  // from dst are distances to dst). Without `complete` it stops before settling any node at
  // or beyond a torn-down circuit's weight: those stay unknown, and a route that needs one
  // asks again with `complete`. The queue holds (distance << 32 | node) in one integer; a
  // node is settled once, marked with this run's stamp.
  ensure_weights();
  if (settled_.size() != n) settled_.assign(n, 0), stamp_ = 0;
  if (++stamp_ == std::numeric_limits<int32_t>::max()) std::fill(settled_.begin(), settled_.end(), 0), stamp_ = 1;
  const int32_t stamp = stamp_;
  // Distances below kBucketed are settled from buckets of kBucketWidth, every link weighing at
  // least that (static_weight: 1024 and up): a node settled from bucket k relaxes its
  // neighbours into bucket k + 1 or later, so the nodes of one bucket never shorten each other
  // and may be settled in any order (Dial's algorithm with buckets as wide as the lightest
  // link): the same distances as a heap, in O(1) a node. Longer distances (hosts, torn-down
  // circuits) go to the heap, after every bucket.
  auto& q = heap_;
  q.clear();
  const auto later = std::greater<uint64_t>();
  dist[static_cast<size_t>(dst)] = 0;
  if (buckets_.size() < kBuckets) buckets_.resize(kBuckets);
  const bool bucketed = min_weight_ >= kBucketWidth;
  auto relax = [&](int v, int32_t d) {
    const Arc* a = arc_.data() + arc_at_[static_cast<size_t>(v)];
    const Arc* end = arc_.data() + arc_at_[static_cast<size_t>(v) + 1];
    for (; a != end; ++a) {
      const int64_t nd = static_cast<int64_t>(d) + a->w;
      int32_t& dw = dist[static_cast<size_t>(a->to)];
      if (nd < dw) {
        dw = static_cast<int32_t>(std::min<int64_t>(nd, kInf - 1));
        if (dw < kBucketed && bucketed) {
          buckets_[static_cast<size_t>(dw / kBucketWidth)].push_back(static_cast<uint32_t>(a->to));
        } else {
          q.push_back(static_cast<uint64_t>(dw) << 32 | static_cast<uint32_t>(a->to));
          std::push_heap(q.begin(), q.end(), later);
        }
      }
    }
  };
  if (bucketed) buckets_[0].push_back(static_cast<uint32_t>(dst));
  else q.push_back(static_cast<uint64_t>(dst));
  for (size_t b = 0; b < kBuckets; ++b) {
    auto& bucket = buckets_[b];
    for (size_t i = 0; i < bucket.size(); ++i) {  // (a node relaxed from this bucket lands in a later one)
      const int v = static_cast<int>(bucket[i]);
      if (settled_[static_cast<size_t>(v)] == stamp || dist[static_cast<size_t>(v)] / kBucketWidth != static_cast<int32_t>(b)) continue;
      settled_[static_cast<size_t>(v)] = stamp;
      relax(v, dist[static_cast<size_t>(v)]);
    }
    bucket.clear();
  }
  bool stopped = false;
  while (!q.empty()) {
    const uint64_t top = q.front();
    const int32_t d = static_cast<int32_t>(top >> 32);
    const int v = static_cast<int>(top & 0xFFFFFFFFu);
    if (!complete && d >= kDown) {
      stopped = true;
      break;
    }
    std::pop_heap(q.begin(), q.end(), later);
    q.pop_back();
    if (settled_[static_cast<size_t>(v)] == stamp || d != dist[static_cast<size_t>(v)]) continue;
    settled_[static_cast<size_t>(v)] = stamp;
    relax(v, d);
  }
  if (stopped)
    for (size_t v = 0; v < n; ++v)
      if (settled_[v] != stamp) dist[v] = kInf;  // tentative, not settled: unknown
  if (stopped) partial_[dst] = 1;
  else partial_.erase(dst);
  dist_[dst] = std::move(dist);
  return dist_[dst];
}

void Router::route_dor(int src, int dst, uint64_t salt, std::vector<int>& out) const {
  const auto& ts = *t_.torus;
  std::array<int, 3> cur = t_.node(src).coord;
  const auto& goal = t_.node(dst).coord;
  int v = src;
  for (int d = 0; d < ts.ndims; ++d) {
    const int ext = ts.dims[static_cast<size_t>(d)];
    int delta = ((goal[static_cast<size_t>(d)] - cur[static_cast<size_t>(d)]) % ext + ext) % ext;
    if (delta == 0) continue;
    bool plus;
    if (!ts.wrap) plus = goal[static_cast<size_t>(d)] > cur[static_cast<size_t>(d)];
    else if (2 * delta == ext) plus = ((salt >> d) & 1) == 0;  // both ways equal: split by salt
    else plus = 2 * delta < ext;
    int steps = plus ? delta : ext - delta;
    if (!ts.wrap) steps = std::abs(goal[static_cast<size_t>(d)] - cur[static_cast<size_t>(d)]);
    for (int s = 0; s < steps; ++s) {
      const int e = torus_link_[static_cast<size_t>(v) * 6 + static_cast<size_t>(2 * d + (plus ? 0 : 1))];
      if (e < 0) throw TopologyError(fmt::format("no {} link in dimension {} at '{}'", plus ? "+" : "-", "xyz"[d], t_.node(v).name));
      out.push_back(e);
      v = t_.link(e).dst;
    }
    cur = t_.node(v).coord;
  }
  if (v != dst) throw TopologyError(fmt::format("dimension-order route from '{}' ended at '{}' instead of '{}'", t_.node(src).name, t_.node(v).name, t_.node(dst).name));
}

void Router::route(int src, int dst, uint64_t salt, std::vector<int>& out) {
  if (src == dst) return;
  if (dor_) {
    const size_t at = out.size();
    route_dor(src, dst, salt, out);
    bool down = false;
    for (size_t i = at; i < out.size(); ++i) down |= !t_.link(out[i]).up;
    if (!down) return;
    out.resize(at);  // a failed link on the dimension-order route: the shortest healthy path instead
    route_walk(src, dst, salt, -1, out);
    return;
  }
  const RouteKey key{static_cast<uint64_t>(static_cast<uint32_t>(src)) << 32 | static_cast<uint32_t>(dst), salt};
  if (const auto it = route_cache_.find(key); it != route_cache_.end()) {
    const auto first = route_pool_.begin() + it->second.first;
    out.insert(out.end(), first, first + it->second.second);
    return;
  }
  const size_t at = out.size();
  route_walk(src, dst, salt, -1, out);
  // Kept the second time it is asked for: the first only marks it seen.
  if (seen_.empty()) seen_.resize(kSeen);
  const uint64_t h = RouteKeyHash{}(key) | 1;
  Seen& seen = seen_[static_cast<size_t>(h >> 11) & (kSeen - 1)];
  if (seen.hash != h || seen.epoch != seen_epoch_) {
    seen = Seen{h, seen_epoch_};
    return;
  }
  const size_t n = out.size() - at;
  if (route_pool_.size() + n > kRoutePoolMax || route_cache_.size() >= kRoutesKept) return;
  route_cache_.emplace(key, std::make_pair(static_cast<uint32_t>(route_pool_.size()), static_cast<uint32_t>(n)));
  route_pool_.insert(route_pool_.end(), out.begin() + static_cast<std::ptrdiff_t>(at), out.end());
}

Router::Dist Router::distances(int src, int dst) {
  Dist d;
  d.dst = dst;
  ensure_weights();
  // Composed from the first hop: exact when every distance comes from the same weights with
  // none torn down (then a partial Dijkstra is a complete one). Only where it saves vectors:
  // a device whose neighbours are no devices (not cached already).
  bool compose = !weights_down_ && t_.node(dst).kind == NodeKind::Device && t_.out_links(dst).size() <= Dist::kMaxVia &&
                 !dist_.count(dst);
  for (int e : t_.out_links(dst)) compose = compose && t_.node(t_.link(e).dst).kind != NodeKind::Device;
  if (compose) {
    const auto& links = t_.out_links(dst);
    for (size_t i = 0; i < links.size(); ++i) {
      const int e = links[i];
      const int u = t_.link(e).dst;
      const int32_t wu = weights_[static_cast<size_t>(e)];
      // A dead end's terms leave room for the terms of dst's links after this one.
      if (!dist_.count(u) && compose_dead_end(u, dst, wu, static_cast<int>(links.size() - i - 1), d)) continue;
      d.add_term(wu, &dist_to(u, false));
    }
  } else {
    d.whole = &dist_to(dst, false);
    if ((*d.whole)[static_cast<size_t>(src)] == std::numeric_limits<int32_t>::max()) d.whole = &dist_to(dst, true);
  }
  if (d[static_cast<size_t>(src)] == std::numeric_limits<int32_t>::max())
    throw TopologyError(fmt::format("no route from '{}' to '{}'", t_.node(src).name, t_.node(dst).name));
  return d;
}

bool Router::compose_dead_end(int u, int dst, int32_t wu, int rest, Dist& d) {
  const Arc* ua = arc_.data() + arc_at_[static_cast<size_t>(u)];
  const Arc* ue = arc_.data() + arc_at_[static_cast<size_t>(u) + 1];
  if (ue - ua < 2 || d.nears + (ue - ua) + 1 > Dist::kMaxNear) return false;
  for (const Arc* a = ua; a != ue; ++a) {
    if (t_.node(a->to).kind != NodeKind::Device) return false;
    for (const Arc* b = arc_.data() + arc_at_[static_cast<size_t>(a->to)], *be = arc_.data() + arc_at_[static_cast<size_t>(a->to) + 1]; b != be; ++b)
      if (b->to != u && t_.node(b->to).kind == NodeKind::Device) return false;
  }
  Dist c = d;  // filled on a copy: d stays as it was if the terms do not fit
  c.add_near(u, wu);
  for (const Arc* a = ua; a != ue; ++a) {
    if (a->to == dst) continue;
    c.add_near(a->to, wu + a->w);
    for (const Arc* b = arc_.data() + arc_at_[static_cast<size_t>(a->to)], *be = arc_.data() + arc_at_[static_cast<size_t>(a->to) + 1]; b != be; ++b) {
      if (b->to == u) continue;
      const std::vector<int32_t>* v = &dist_to(b->to, false);
      bool known = false;
      for (int i = 0; i < c.vias; ++i) known = known || c.via[static_cast<size_t>(i)] == v;
      if (!known && c.vias + rest >= Dist::kMaxTerms) return false;
      c.add_term(wu + a->w + b->w, v);
    }
  }
  d = c;
  return true;
}

void Router::route_walk(int src, int dst, uint64_t salt, int part, std::vector<int>& out) {
  const Dist dist = distances(src, dst);
  const uint64_t pair = static_cast<uint64_t>(src) << 32 | static_cast<uint32_t>(dst);
  int v = src;
  int hop = 0;
  while (v != dst) {
    cand_.clear();
    const int32_t dv = dist[static_cast<size_t>(v)];
    const Arc* a = arc_.data() + arc_at_[static_cast<size_t>(v)];
    const Arc* end = arc_.data() + arc_at_[static_cast<size_t>(v) + 1];
    for (; a != end; ++a) {
      const int32_t dw = dist[static_cast<size_t>(a->to)];
      if (dw != std::numeric_limits<int32_t>::max() && dw + a->w == dv) cand_.push_back(a->link);
    }
    size_t pick = 0;
    if (cand_.size() > 1) {
      // (The hash seed is ECMP's, a switch's hash function: a sprayed part's per-hop offset
      // leaves it out, so adaptive routing does not depend on it.)
      const uint64_t h = route_hash(pair, part < 0 ? salt ^ seed_mix_ : salt, static_cast<uint64_t>(hop));
      pick = part < 0 ? h % cand_.size() : (static_cast<uint64_t>(part) + h) % cand_.size();
    }
    const int e = cand_[pick];
    out.push_back(e);
    v = t_.link(e).dst;
    ++hop;
  }
}

int Router::spray_width(int src, int dst) {
  if (src == dst || dor_) return 1;
  const Dist dist = distances(src, dst);
  int v = src;
  while (v != dst) {
    int n = 0, next = -1;
    const int32_t dv = dist[static_cast<size_t>(v)];
    for (int e : t_.out_links(v)) {
      const int w = t_.link(e).dst;
      const int32_t dw = dist[static_cast<size_t>(w)];
      if (dw != std::numeric_limits<int32_t>::max() && dw + weight(e) == dv) {
        if (n == 0) next = w;
        ++n;
      }
    }
    if (n > 1) return std::min(n, kMaxSpray);
    v = next;
  }
  return 1;
}

void Router::route_part(int src, int dst, uint64_t salt, int part, std::vector<int>& out) {
  if (src == dst) return;
  route_walk(src, dst, salt, part, out);
}

int64_t Router::latency_ns(const std::vector<int>& path) const {
  int64_t s = 0;
  for (int e : path) s += t_.link(e).latency_ns;
  return s;
}

}  // namespace sluice::net
