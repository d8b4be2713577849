#include "network/routing.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <new>
#include <queue>
#include <stdexcept>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <fmt/format.h>

namespace sluice::net {

namespace {
// A walk that finds no next hop: the distances, computed from the destination over the links out
// of each node, are right only while a link and its reverse weigh the same (links are
// full-duplex, and the world fails them both ways).
[[noreturn]] void no_next_hop(int v, int dst) {
  throw std::logic_error(fmt::format("router: no next hop from node {} towards {} (a link down one way only?)", v, dst));
}
// Dijkstra's buckets (settle): as wide as the lightest link (static_weight's 1024), as many as
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
  if (cur_.weights.size() == static_cast<size_t>(t_.link_count()) && cur_.arc_at.size() == static_cast<size_t>(t_.node_count()) + 1) return;
  cur_.weights.resize(static_cast<size_t>(t_.link_count()));
  cur_.link_dst.resize(static_cast<size_t>(t_.link_count()));
  cur_.weights_down = false;
  cur_.min_weight = std::numeric_limits<int32_t>::max();
  for (int e = 0; e < t_.link_count(); ++e) {
    cur_.weights[static_cast<size_t>(e)] = weight(e);
    cur_.min_weight = std::min(cur_.min_weight, cur_.weights[static_cast<size_t>(e)]);
    cur_.link_dst[static_cast<size_t>(e)] = t_.link(e).dst;
    cur_.weights_down |= cur_.weights[static_cast<size_t>(e)] >= (1 << 26);
  }
  const int n = t_.node_count();
  cur_.arc_at.assign(static_cast<size_t>(n) + 1, 0);
  cur_.arc.clear();
  cur_.arc.reserve(static_cast<size_t>(t_.link_count()));
  for (int v = 0; v < n; ++v) {
    cur_.arc_at[static_cast<size_t>(v)] = static_cast<int32_t>(cur_.arc.size());
    for (int e : t_.out_links(v)) cur_.arc.push_back({cur_.link_dst[static_cast<size_t>(e)], cur_.weights[static_cast<size_t>(e)], e});
  }
  cur_.arc_at[static_cast<size_t>(n)] = static_cast<int32_t>(cur_.arc.size());
}

Router::DistArena::~DistArena() {
  for (const Chunk& c : chunks_) std::free(c.p);
}

int32_t* Router::DistArena::take(size_t n) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (n * sizeof(int32_t) + 63) / 64 * 64;
  while (chunk_ < chunks_.size() && used_ + bytes > chunks_[chunk_].bytes) ++chunk_, used_ = 0;
  if (chunk_ == chunks_.size()) {
    // Room for 32 vectors, whole huge pages, at most 64 MiB unless one vector needs more.
    const size_t want = std::max(bytes, std::min<size_t>(64 * kHuge / 2, 32 * bytes));
    const size_t size = (want + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, size);
    if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, size, MADV_HUGEPAGE);  // a hint: without it the chunk is ordinary pages
#endif
    chunks_.push_back(Chunk{p, size});
    used_ = 0;
  }
  int32_t* p = reinterpret_cast<int32_t*>(static_cast<char*>(chunks_[chunk_].p) + used_);
  used_ += bytes;
  return p;
}

size_t Router::State::bytes() const {
  return arena.bytes() + dist.size() * (sizeof(DistState) + 32) + (weights.capacity() + link_dst.capacity() + arc_at.capacity() + route_pool.capacity()) * 4 +
         arc.capacity() * sizeof(Arc) + kept.capacity() * sizeof(Kept);
}

void Router::invalidate() {
  // The links' weights now, as ensure_weights() will compute them.
  for (int e = static_cast<int>(static_w_.size()); e < t_.link_count(); ++e) static_w_.push_back(static_weight(e));
  std::vector<int32_t> now(static_cast<size_t>(t_.link_count()));
  for (int e = 0; e < t_.link_count(); ++e) now[static_cast<size_t>(e)] = weight(e);
  const size_t arcs = static_cast<size_t>(t_.node_count()) + 1;
  // Nothing that routes changed (a slice torn down without circuits, a failure of links already
  // down): what was computed stands. (Set aside and computed again, it would be kept twice.)
  if (!cur_.weights.empty() && cur_.weights == now && cur_.arc_at.size() == arcs) return;
  ++weights_epoch_;
  forget_seen();
  // Links and nodes only grow: a state computed for fewer of them can never fit again.
  auto may_fit = [&](const State& s) { return s.weights.size() == now.size() && s.arc_at.size() == arcs; };
  std::erase_if(set_aside_, [&](const std::unique_ptr<State>& s) { return !may_fit(*s); });
  std::unique_ptr<State> was;
  if (!cur_.weights.empty() && cur_.bytes() >= min_set_aside_) {  // computed since the last change, and worth keeping: aside below
    was = std::make_unique<State>(std::move(cur_));
    cur_ = State{};  // (nothing computed)
  } else {  // nothing, or cheaper to compute again than to keep: its memory is reused
    forget_routes();
    cur_.dist.clear();
    cur_.arena.reset();
    cur_.weights.clear();
    cur_.link_dst.clear();
    cur_.arc.clear();
    cur_.arc_at.clear();
  }
  for (size_t i = 0; i < set_aside_.size(); ++i)
    if (set_aside_[i]->weights == now) {
      std::swap(cur_, *set_aside_[i]);  // (what cur_ held, nothing or cleared, goes with it)
      set_aside_.erase(set_aside_.begin() + static_cast<std::ptrdiff_t>(i));
      ++revived_;
      break;
    }
  if (was && may_fit(*was)) set_aside_.insert(set_aside_.begin(), std::move(was));
  // The newest first, as many as fit the count and the bytes (one too large alone is dropped).
  std::vector<std::unique_ptr<State>> keep;
  size_t total = 0;
  for (auto& s : set_aside_) {
    const size_t bytes = s->bytes();
    if (keep.size() < kSetAside && total + bytes <= kSetAsideBytes) {
      total += bytes;
      keep.push_back(std::move(s));
    }
  }
  set_aside_ = std::move(keep);
}

void Router::start_state(DistState& s, int dst) {
  ++walk_stats_.searches;
  s = DistState{};
  s.dst = dst;
  s.dist.reset(cur_.arena, static_cast<size_t>(t_.node_count()));
  s.dist.set(static_cast<size_t>(dst), 0);
}

Router::DistState& Router::dist_state(int dst) {
  auto [it, fresh] = cur_.dist.try_emplace(dst);
  if (fresh) start_state(it->second, dst);
  return it->second;
}

void Router::settle(DistState& s, int64_t bound, bool complete, int until) {
  constexpr int32_t kInf = std::numeric_limits<int32_t>::max();
  constexpr int32_t kDown = 1 << 26;  // weight() of a torn-down circuit
  if (s.finished) {
    if (!(complete && s.partial)) return;
    // Stopped at a torn-down circuit, and a route needs what lies beyond: again, complete.
    start_state(s, s.dst);
  }
  if (bound < s.settled_below) return;
  // Dijkstra from dst over the links out of each node (weights are symmetric, so distances
  // from dst are distances to dst), resumed from where it stopped. The queue holds
  // (distance << 32 | node) in one integer; a node is settled once, marked with this call's
  // stamp (a node settled by an earlier call lies below settled_below: the scan that rebuilds
  // the frontier never pushes it again, and nothing can shorten it).
  ensure_weights();
  const size_t n = static_cast<size_t>(t_.node_count());
  DistVec& dist = s.dist;
  if (settled_.size() != n) settled_.assign(n, 0), stamp_ = 0;
  if (++stamp_ == std::numeric_limits<int32_t>::max()) std::fill(settled_.begin(), settled_.end(), 0), stamp_ = 1;
  const int32_t stamp = stamp_;
  // Distances below kBucketed are settled from buckets of kBucketWidth, every link weighing at
  // least that (static_weight: 1024 and up): a node settled from bucket k relaxes its
  // neighbours into bucket k + 1 or later, so the nodes of one bucket never shorten each other
  // and may be settled in any order (Dial's algorithm with buckets as wide as the lightest
  // link): the same distances as a heap, in O(1) a node. Longer distances (hosts, torn-down
  // circuits) go to the heap, after every bucket. Without buckets (a link lighter than their
  // width) the heap does it all, to the end.
  auto& q = heap_;
  q.clear();
  const auto later = std::greater<uint64_t>();
  if (buckets_.size() < kBuckets) buckets_.resize(kBuckets);
  const bool bucketed = cur_.min_weight >= kBucketWidth;
  size_t hi = s.next_bucket;  // past the last bucket holding anything
  auto push = [&](int32_t d, uint32_t v) {
    if (d < kBucketed && bucketed) {
      const size_t k = static_cast<size_t>(d / kBucketWidth);
      buckets_[k].push_back(v);
      hi = std::max(hi, k + 1);
    } else {
      q.push_back(static_cast<uint64_t>(d) << 32 | v);
      std::push_heap(q.begin(), q.end(), later);
    }
  };
  // The frontier: every node with a tentative distance (the destination alone at first).
  if (s.next_bucket == 0) {
    push(0, static_cast<uint32_t>(s.dst));
  } else {
    for (size_t v = 0; v < n; ++v) {
      const int32_t d = dist[v];
      if (d != kInf && d >= s.settled_below) push(d, static_cast<uint32_t>(v));
    }
  }
  auto relax = [&](int v, int32_t d) {
    const Arc* a = cur_.arc.data() + cur_.arc_at[static_cast<size_t>(v)];
    const Arc* end = cur_.arc.data() + cur_.arc_at[static_cast<size_t>(v) + 1];
    for (; a != end; ++a) {
      const int64_t nd = static_cast<int64_t>(d) + a->w;
      if (nd < dist[static_cast<size_t>(a->to)]) {
        const int32_t dw = static_cast<int32_t>(std::min<int64_t>(nd, kInf - 1));
        dist.set(static_cast<size_t>(a->to), dw);
        push(dw, static_cast<uint32_t>(a->to));
      }
    }
  };
  // The buckets up to the one holding `bound` (all of them when bucketed is off or the bound is past them).
  size_t last = !bucketed || bound >= kBucketed ? kBuckets : static_cast<size_t>(bound / kBucketWidth) + 1;
  size_t b = s.next_bucket;
  for (; b < last && b < hi; ++b) {
    auto& bucket = buckets_[b];
    for (size_t i = 0; i < bucket.size(); ++i) {  // (a node relaxed from this bucket lands in a later one)
      const int v = static_cast<int>(bucket[i]);
      if (settled_[static_cast<size_t>(v)] == stamp || dist[static_cast<size_t>(v)] / kBucketWidth != static_cast<int32_t>(b)) continue;
      settled_[static_cast<size_t>(v)] = stamp;
      relax(v, dist[static_cast<size_t>(v)]);
    }
    bucket.clear();
    if (until >= 0 && dist[static_cast<size_t>(until)] / kBucketWidth <= static_cast<int32_t>(b)) {  // settled: stop here
      last = ++b;
      break;
    }
  }
  if (b < last) b = last;  // the buckets past hi are empty
  if (b < kBuckets) {
    // Stopped between buckets: what is left stays in the vector as tentative distances.
    for (size_t k = b; k < hi; ++k) buckets_[k].clear();
    q.clear();
    s.next_bucket = b;
    s.settled_below = static_cast<int64_t>(b) * kBucketWidth;
    return;
  }
  s.next_bucket = kBuckets;
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
      if (settled_[v] != stamp && dist[v] >= kBucketed) dist.set(v, kInf);  // tentative, not settled: unknown
  q.clear();
  s.finished = true;
  s.partial = stopped;
  s.settled_below = std::numeric_limits<int64_t>::max();
}

void Router::settle_node(DistState& s, int v) {
  while (!s.finished && s.dist[static_cast<size_t>(v)] >= s.settled_below) settle(s, std::numeric_limits<int64_t>::max(), false, v);
}

void Router::settle_for(Dist& d, int src) {
  // A node w can be a candidate of the walk from src only if its composed distance is at most
  // D = d[src], so term i is needed up to D - via_w[i]. D is found term by term, lightest
  // term first: with an upper bound U on it (a term's exact distance to src, a near node's),
  // term i is settled up to U - via_w[i] and lowers U only if src is settled by then (else
  // its distance to src is above U). Every term ends settled past D - via_w[i].
  constexpr int64_t kInf = std::numeric_limits<int32_t>::max();
  if (d.whole) {
    settle_node(*d.whole, src);
    return;
  }
  int64_t U = kInf;
  if (src == d.dst) U = 0;
  for (int i = 0; i < d.nears; ++i)
    if (d.near[static_cast<size_t>(i)].first == src) U = std::min<int64_t>(U, d.near[static_cast<size_t>(i)].second);
  std::array<int, Dist::kMaxTerms> order{};
  for (int i = 0; i < d.vias; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.begin() + d.vias, [&d](int a, int b) { return d.via_w[static_cast<size_t>(a)] < d.via_w[static_cast<size_t>(b)]; });
  for (int k = 0; k < d.vias; ++k) {
    const size_t i = static_cast<size_t>(order[static_cast<size_t>(k)]);
    DistState& t = *d.via[i];
    if (U == kInf) settle_node(t, src);
    else settle(t, U - d.via_w[i], false);
    const int32_t x = t.dist[static_cast<size_t>(src)];
    if (x != kInf && (t.finished || x < t.settled_below)) U = std::min<int64_t>(U, d.via_w[i] + static_cast<int64_t>(x));
  }
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
  const uint64_t h = kept_hash(key);
  if (const Kept* k = find_kept(key, h)) {
    const auto first = cur_.route_pool.begin() + (k->at_len >> 8);
    out.insert(out.end(), first, first + (k->at_len & 0xFFu));
    return;
  }
  const size_t at = out.size();
  // Kept the second time it is asked for: the first walks it and marks it seen, with its walk
  // in the ring of recent walks, which the second copies while the ring still holds it.
  if (seen_.empty()) seen_.resize(kSeen);
  Seen& seen = seen_[static_cast<size_t>(h >> 11) & (kSeen - 1)];
  auto walk = [&] {
    ++walks_;
    route_walk(src, dst, salt, -1, out);
    remember_walk(key, std::span<const int>(out).subspan(at), seen);
  };
  if (seen.hash != h || seen.epoch != seen_stamp_) {
    seen = Seen{h, seen_stamp_, static_cast<uint32_t>(walked_head_)};  // (no walk of its own in the ring until remember_walk)
    walk();
    return;
  }
  size_t hops = 0;
  if (const int32_t* r = walked_route(key, seen, hops)) out.insert(out.end(), r, r + hops);
  else walk();
  const size_t n = out.size() - at;
  if (n > kMaxKeptHops || cur_.route_pool.size() + n > kRoutePoolMax || cur_.kept_n >= kRoutesKept) return;
  keep(key, h, static_cast<uint32_t>(cur_.route_pool.size()), static_cast<uint32_t>(n));
  cur_.route_pool.insert(cur_.route_pool.end(), out.begin() + static_cast<std::ptrdiff_t>(at), out.end());
}

namespace {
// A kept route's first slot: the key's hash mixed again (its low bits alone follow the low
// bits of the ends and the salt, which would crowd linear probing).
size_t kept_slot(uint64_t h, size_t mask) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return static_cast<size_t>(h) & mask;
}
}  // namespace

void Router::remember_walk(const RouteKey& key, std::span<const int> links, Seen& seen) {
  if (links.size() > kMaxKeptHops) return;  // (walked at every ask; seen.walked finds nothing)
  if (!walked_) walked_ = std::make_unique_for_overwrite<int32_t[]>(walked_cap_);  // (pages touched as written)
  const size_t need = kWalkHeader + links.size();
  if (walked_head_ % walked_cap_ + need > walked_cap_) walked_head_ += walked_cap_ - walked_head_ % walked_cap_;  // to the start
  int32_t* e = walked_.get() + walked_head_ % walked_cap_;
  e[0] = static_cast<int32_t>(key.ends >> 32);
  e[1] = static_cast<int32_t>(key.ends & 0xFFFFFFFFu);
  e[2] = static_cast<int32_t>(key.salt & 0xFFFFFFFFu);
  e[3] = static_cast<int32_t>(key.salt >> 32);
  e[4] = static_cast<int32_t>(links.size());
  e[5] = static_cast<int32_t>(seen_stamp_);  // the links' weights it was walked under
  std::copy(links.begin(), links.end(), e + kWalkHeader);
  seen.walked = static_cast<uint32_t>(walked_head_);
  walked_head_ += need;
}

const int32_t* Router::walked_route(const RouteKey& key, const Seen& seen, size_t& hops) const {
  if (!walked_) return nullptr;
  // How far the ring has written since: past its size, the entry is written over. (The low 32
  // bits alone: an entry 16 GiB of walks old would pass this test, and is then caught by its key
  // check; a Seen slot that old has long been taken by another key.)
  const uint64_t since = static_cast<uint32_t>(static_cast<uint32_t>(walked_head_) - seen.walked);
  if (since > walked_cap_ || since < kWalkHeader) return nullptr;
  const size_t at = (walked_head_ - since) % walked_cap_;
  if (at + kWalkHeader > walked_cap_) return nullptr;  // (a position no entry starts at)
  const int32_t* e = walked_.get() + at;
  const size_t n = static_cast<size_t>(static_cast<uint32_t>(e[4]));
  if (static_cast<uint32_t>(e[0]) != key.ends >> 32 || static_cast<uint32_t>(e[1]) != (key.ends & 0xFFFFFFFFu) ||
      static_cast<uint32_t>(e[2]) != (key.salt & 0xFFFFFFFFu) || static_cast<uint32_t>(e[3]) != key.salt >> 32 ||
      static_cast<uint32_t>(e[5]) != seen_stamp_ || n > kMaxKeptHops || kWalkHeader + n > since || at + kWalkHeader + n > walked_cap_)
    return nullptr;
  hops = n;
  return e + kWalkHeader;
}

const Router::Kept* Router::find_kept(const RouteKey& key, uint64_t h) const {
  if (cur_.kept_n == 0) return nullptr;
  const size_t mask = cur_.kept.size() - 1;
  for (size_t i = kept_slot(h, mask);; i = (i + 1) & mask) {
    const Kept& k = cur_.kept[i];
    if (k.epoch != cur_.seen_epoch) return nullptr;
    if (k.key == key) return &k;
  }
}

void Router::keep(const RouteKey& key, uint64_t h, uint32_t at, uint32_t len) {
  if (2 * (cur_.kept_n + 1) > cur_.kept.size()) {  // grow: the slots of this epoch again, in a table twice as large
    std::vector<Kept> old(std::max<size_t>(1024, 2 * cur_.kept.size()));
    old.swap(cur_.kept);
    const size_t mask = cur_.kept.size() - 1;
    for (const Kept& k : old)
      if (k.epoch == cur_.seen_epoch) {
        size_t i = kept_slot(kept_hash(k.key), mask);
        while (cur_.kept[i].epoch == cur_.seen_epoch) i = (i + 1) & mask;
        cur_.kept[i] = k;
      }
  }
  const size_t mask = cur_.kept.size() - 1;
  size_t i = kept_slot(h, mask);
  while (cur_.kept[i].epoch == cur_.seen_epoch) i = (i + 1) & mask;
  cur_.kept[i] = Kept{key, at << 8 | len, cur_.seen_epoch};
  ++cur_.kept_n;
}

Router::Dist Router::distances(int src, int dst) {
  Dist d;
  d.dst = dst;
  ensure_weights();
  // Inside a torus or OCS slice whose links are as its coordinates say: from them.
  torus_on_ = false;
  clos_on_ = false;
  if (structural_ && compose_) {
    if (torus_nodes_ != t_.node_count() || torus_links_ != t_.link_count() || torus_epoch_ != weights_epoch_) {
      torus_ = TorusDistances::detect(t_, cur_.weights);
      torus_nodes_ = t_.node_count();
      torus_links_ = t_.link_count();
      torus_epoch_ = weights_epoch_;
    }
    if (torus_ && torus_->target(src, dst, d.tt)) {
      d.torus = torus_.get();
      torus_on_ = true;
      return d;
    }
  }
  // A Clos with every link up: from its structure (exact: the same integers a search gives).
  if (structural_ && compose_ && !cur_.weights_down) {
    if (clos_nodes_ != t_.node_count() || clos_links_ != t_.link_count()) {
      clos_ = ClosDistances::detect(t_, static_w_);
      clos_nodes_ = t_.node_count();
      clos_links_ = t_.link_count();
    }
    if (clos_ && clos_->target(dst, d.tg)) {
      d.clos = clos_.get();
      clos_on_ = true;
      if (d[static_cast<size_t>(src)] == std::numeric_limits<int32_t>::max())
        throw TopologyError(fmt::format("no route from '{}' to '{}'", t_.node(src).name, t_.node(dst).name));
      return d;
    }
  }
  // Composed from the first hop: the minimum over a cut of every path, exact for any weights
  // wherever its terms are settled. Only where it saves vectors: a device whose neighbours are
  // no devices (not cached already). A term's Dijkstra may stop before a torn-down link's
  // weight (settle: partial, everything past it unknown), so with a link torn down the
  // composition holds only for a route that needs none (dist(src) below that weight: every
  // node the walk reads is then nearer and settled in each term); a route that needs one takes
  // the destination's own Dijkstra, run to the end.
  constexpr int32_t kDown = 1 << 26;  // weight() of a torn-down circuit
  bool compose = compose_ && t_.node(dst).kind == NodeKind::Device && t_.out_links(dst).size() <= Dist::kMaxVia && !cur_.dist.count(dst);
  for (int e : t_.out_links(dst)) compose = compose && t_.node(t_.link(e).dst).kind != NodeKind::Device;
  if (compose) {
    const auto& links = t_.out_links(dst);
    for (size_t i = 0; i < links.size(); ++i) {
      const int e = links[i];
      const int u = t_.link(e).dst;
      const int32_t wu = cur_.weights[static_cast<size_t>(e)];
      // A dead end's terms leave room for the terms of dst's links after this one.
      if (!cur_.dist.count(u) && compose_dead_end(u, dst, wu, static_cast<int>(links.size() - i - 1), d)) continue;
      d.add_term(wu, &dist_state(u));
    }
    settle_for(d, src);
    if (cur_.weights_down && d[static_cast<size_t>(src)] >= kDown) {
      d = Dist{};
      d.dst = dst;
      compose = false;
    }
  }
  if (!compose) {
    d.whole = &dist_state(dst);
    settle_for(d, src);
    if (d.whole->dist[static_cast<size_t>(src)] == std::numeric_limits<int32_t>::max())
      settle(*d.whole, std::numeric_limits<int64_t>::max(), true);  // to the end, past torn-down circuits
  }
  if (d[static_cast<size_t>(src)] == std::numeric_limits<int32_t>::max())
    throw TopologyError(fmt::format("no route from '{}' to '{}'", t_.node(src).name, t_.node(dst).name));
  return d;
}

bool Router::compose_dead_end(int u, int dst, int32_t wu, int rest, Dist& d) {
  const Arc* ua = cur_.arc.data() + cur_.arc_at[static_cast<size_t>(u)];
  const Arc* ue = cur_.arc.data() + cur_.arc_at[static_cast<size_t>(u) + 1];
  if (ue - ua < 2 || d.nears + (ue - ua) + 1 > Dist::kMaxNear) return false;
  for (const Arc* a = ua; a != ue; ++a) {
    if (t_.node(a->to).kind != NodeKind::Device) return false;
    for (const Arc* b = cur_.arc.data() + cur_.arc_at[static_cast<size_t>(a->to)], *be = cur_.arc.data() + cur_.arc_at[static_cast<size_t>(a->to) + 1]; b != be; ++b)
      if (b->to != u && t_.node(b->to).kind == NodeKind::Device) return false;
  }
  Dist c = d;  // filled on a copy: d stays as it was if the terms do not fit
  c.add_near(u, wu);
  for (const Arc* a = ua; a != ue; ++a) {
    if (a->to == dst) continue;
    c.add_near(a->to, wu + a->w);
    for (const Arc* b = cur_.arc.data() + cur_.arc_at[static_cast<size_t>(a->to)], *be = cur_.arc.data() + cur_.arc_at[static_cast<size_t>(a->to) + 1]; b != be; ++b) {
      if (b->to == u) continue;
      DistState* v = &dist_state(b->to);
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
  ++walk_stats_.walks;
  walk_stats_.structural += dist.clos != nullptr || dist.torus != nullptr;
  const uint64_t pair = static_cast<uint64_t>(src) << 32 | static_cast<uint32_t>(dst);
  int v = src;
  int hop = 0;
  while (v != dst) {
    cand_.clear();
    const int32_t dv = dist[static_cast<size_t>(v)];
    const Arc* a = cur_.arc.data() + cur_.arc_at[static_cast<size_t>(v)];
    const Arc* end = cur_.arc.data() + cur_.arc_at[static_cast<size_t>(v) + 1];
    for (; a != end; ++a) {
      const int32_t dw = dist[static_cast<size_t>(a->to)];
      if (dw != std::numeric_limits<int32_t>::max() && dw + a->w == dv) cand_.push_back(a->link);
    }
    if (cand_.empty()) no_next_hop(v, dst);
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
    if (next < 0) no_next_hop(v, dst);
    v = next;
  }
  return 1;
}

void Router::route_part(int src, int dst, uint64_t salt, int part, std::vector<int>& out) {
  if (src == dst) return;
  route_walk(src, dst, salt, part, out);
}

int64_t Router::latency_ns(std::span<const int> path) const {
  int64_t s = 0;
  for (int e : path) s += t_.link(e).latency_ns;
  return s;
}

}  // namespace sluice::net
