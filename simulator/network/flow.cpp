#include "network/flow.h"

#include <bit>
#include <cmath>
#include <limits>
#include <algorithm>
#include <functional>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/rng.h"

namespace sluice::net {

namespace {
constexpr uint32_t kGenMask = Generation::kMask;  // the engine keeps 24 bits of an event's generation
constexpr double kInf = std::numeric_limits<double>::infinity();
// Rates below a change's level by less than this fraction are re-filled too, so flows that
// share a level up to rounding are never split between frozen and re-filled.
constexpr double kLevelSlack = 1e-9;
// Rates in fixed point of 2^-16 B/s. A rate converts the same way each time, so a link's sum
// of rates returns exactly to what it was when a flow leaves.
constexpr double kFixedScale = 65536.0;
constexpr double kFixedMax = 1e27;  // B/s; far above any link, keeps sums inside 128 bits

__extension__ typedef __int128 Fixed;
Fixed to_fixed(double r) {
  if (r < 0x1p46) return static_cast<int64_t>(r * kFixedScale);  // the usual case: one instruction
  return static_cast<Fixed>(std::min(r, kFixedMax) * kFixedScale);
}
double from_fixed(Fixed s) { return static_cast<double>(s) / kFixedScale; }
}

FlowSim::FlowSim(Engine& engine, const Topology& topo, Router& router) : engine_(engine), topo_(topo), router_(router) {
  sync_links();
}

void FlowSim::sync_links() {
  const size_t n = static_cast<size_t>(topo_.link_count());
  for (size_t e = cap_.size(); e < n; ++e) cap_.push_back(topo_.link(static_cast<int>(e)).bandwidth_Bps);
  link_flows_.resize(n);
  load_.resize(n);
  part_.resize(n);
  rem_.resize(n);
  cnt_.resize(n);
  link_mark_.resize(n);
  link_flag_.resize(n);
  link_bytes_.resize(n);
}

void FlowSim::reserve(size_t flows, size_t hops) {
  if (flows <= free_.size()) return;
  const size_t more = flows - free_.size(), n = flows_.size() + more;
  if (n > (size_t{1} << 31)) return;  // (alloc refuses past it)
  // (At least doubling, as growth by push_back would: several large collectives starting at one
  // instant copy the tables a few times, not once each.)
  auto grow = [](auto& v, size_t want) {
    if (want > v.capacity()) v.reserve(std::max(want, 2 * v.capacity()));
  };
  grow(flows_, n);
  grow(flow_mark_, n);
  grow(flow_frozen_, n);
  const size_t slots = pos_.size() + more * std::bit_ceil(std::max<size_t>(hops, 1));
  if (slots <= std::numeric_limits<uint32_t>::max()) {
    grow(hop_link_, slots);
    grow(pos_, slots);
  }
}

uint32_t FlowSim::alloc() {
  if (!free_.empty()) {
    const uint32_t f = free_.back();
    free_.pop_back();
    return f;
  }
  if (flows_.size() >= (1u << 31)) throw std::overflow_error("too many concurrent flows");
  flows_.emplace_back();
  flow_mark_.push_back(0);
  flow_frozen_.push_back(0);
  return static_cast<uint32_t>(flows_.size() - 1);
}

uint32_t FlowSim::start(int src, int dst, double bytes, FlowSink* sink, uint64_t tag, uint64_t salt) {
  const int parts = adaptive_ ? router_.spray_width(src, dst) : 1;
  if (parts > 1) {
    uint32_t s;
    if (!free_sprays_.empty()) {
      s = free_sprays_.back();
      free_sprays_.pop_back();
    } else {
      s = static_cast<uint32_t>(sprays_.size());
      sprays_.emplace_back();
    }
    sprays_[s] = Spray{static_cast<uint32_t>(parts)};
    ++stats_.sprayed;
    uint32_t first = 0;
    for (int i = 0; i < parts; ++i) {
      const uint32_t f = alloc();
      Flow& fl = flows_[f];
      part_path_.clear();
      router_.route_part(src, dst, salt, i, part_path_);
      set_path(f, part_path_);
      fl.left_bytes = bytes / parts;
      fl.sink = sink;
      fl.tag = tag;
      fl.salt = salt;
      fl.spray = s;
      begin(f);
      if (i == 0) first = f;
    }
    return first;
  }
  const uint32_t f = alloc();
  Flow& fl = flows_[f];
  part_path_.clear();
  router_.route(src, dst, salt, part_path_);
  set_path(f, part_path_);
  fl.left_bytes = bytes;
  fl.sink = sink;
  fl.tag = tag;
  fl.salt = salt;
  fl.spray = kNoSpray;
  begin(f);
  return f;
}

uint32_t FlowSim::start_on_path(const std::vector<int>& path, double bytes, FlowSink* sink, uint64_t tag) {
  const uint32_t f = alloc();
  Flow& fl = flows_[f];
  set_path(f, path);
  fl.left_bytes = bytes;
  fl.sink = sink;
  fl.tag = tag;
  fl.salt = 0;
  fl.spray = kNoSpray;
  begin(f);
  return f;
}

void FlowSim::begin(uint32_t f) {
  if (static_cast<size_t>(topo_.link_count()) > cap_.size()) sync_links();
  Flow& fl = flows_[f];
  const int64_t now = engine_.now().count_ns();
  const std::span<const int> route = path(fl);
  fl.latency_ns = router_.latency_ns(route);
  fl.rate_Bps = 0;
  fl.settled_ns = now;
  fl.gen = (fl.gen + 1) & kGenMask;
  fl.shared = false;
  fl.seq = stats_.started++;
  const Fixed b = to_fixed(fl.left_bytes);
  bytes_started_ += b;
  stats_.bytes_started = from_fixed(bytes_started_);
  for (int l : route) link_bytes_[static_cast<size_t>(l)] += b;
  if (start_log_) start_log_->on_start(route, b);
  if (fl.hops == 0 || fl.left_bytes <= 0) {
    // Nothing to share: the bytes (if any) are local, or only the latency remains.
    fl.left_bytes = 0;
    fl.state = State::Flying;
    engine_.schedule_in(SimTime::ns(fl.latency_ns), Priority::Network, this, kDeliver, f, Generation(fl.gen));
    return;
  }
  fl.state = State::Sending;
  fl.keyed = false;
  ++active_;
  if (active_ > stats_.max_active) stats_.max_active = active_;
  attach(f);
  request_recompute();
}

// Gives a flow its route: its hops go to its block of hop slots (a longer route than the block
// holds takes a new block, a power of two, and leaves the old one: at most its size again).
// `route` never points into hop_link_ (a new block would move it).
void FlowSim::set_path(uint32_t f, std::span<const int> route) {
  Flow& fl = flows_[f];
  if (route.size() > fl.pos_cap) {
    const size_t cap = std::bit_ceil(route.size()), base = pos_.size();
    if (base + cap > std::numeric_limits<uint32_t>::max()) throw std::overflow_error("too many flow hop slots (2^32)");
    hop_link_.resize(base + cap);
    pos_.resize(base + cap);
    fl.pos_base = static_cast<uint32_t>(base);
    fl.pos_cap = static_cast<uint32_t>(cap);
  }
  std::copy(route.begin(), route.end(), hop_link_.begin() + fl.pos_base);
  fl.hops = static_cast<uint32_t>(route.size());
}

// Puts a flow on every link of its path, unrated (key +infinity) until the next recomputation.
void FlowSim::attach(uint32_t f) {
  Flow& fl = flows_[f];
  const std::span<const int> route = path(fl);
  for (size_t h = 0; h < route.size(); ++h) {
    const int l = route[h];
    auto& lf = link_flows_[static_cast<size_t>(l)];
    lf.push_back(LinkFlow{kInf, f, fl.pos_base + static_cast<uint32_t>(h)});
    heap_fix(l, lf.size() - 1);
    mark_dirty(l);
    if (!(link_flag_[static_cast<size_t>(l)] & kGrown)) {
      link_flag_[static_cast<size_t>(l)] |= kGrown;
      grown_.push_back(l);
    }
  }
}

// Each link once in dirty_ (and in grown_) between two recomputes: a million flows starting at
// once would otherwise list their links' hops twice over (tens of MiB), to be deduplicated after.
void FlowSim::mark_dirty(int link) {
  if (link_flag_[static_cast<size_t>(link)] & kDirty) return;
  link_flag_[static_cast<size_t>(link)] |= kDirty;
  dirty_.push_back(link);
}

void FlowSim::clear_marks() {
  for (int l : dirty_) link_flag_[static_cast<size_t>(l)] = 0;  // grown_'s links are all in dirty_ (attach marks them)
  dirty_.clear();
  grown_.clear();
}

void FlowSim::request_recompute() {
  if (recompute_pending_) return;
  recompute_pending_ = true;
  engine_.schedule_in(SimTime::zero(), Priority::Network, this, kRecompute, 0);
}

void FlowSim::set_link_capacity(int link, double Bps) {
  if (static_cast<size_t>(topo_.link_count()) > cap_.size()) sync_links();
  cap_[static_cast<size_t>(link)] = Bps < 0 ? 0 : Bps;
  level_bound_ = 0;  // a capacity change may move every level: re-fill the whole component
  mark_dirty(link);
  request_recompute();
}

std::vector<double> FlowSim::carried_link_bytes() const {
  std::vector<double> carried(link_bytes_.size());
  for (size_t l = 0; l < carried.size(); ++l) carried[l] = from_fixed(link_bytes_[l]);
  const int64_t now = engine_.now().count_ns();
  // In the order the flows began (sums of doubles depend on their order; slots do not say it).
  std::vector<const Flow*> sending;
  for (const Flow& fl : flows_)
    if (fl.state == State::Sending) sending.push_back(&fl);
  std::sort(sending.begin(), sending.end(), [](const Flow* a, const Flow* b) { return a->seq < b->seq; });
  for (const Flow* f : sending) {
    const Flow& fl = *f;
    const double sent = now > fl.settled_ns ? fl.rate_Bps * static_cast<double>(now - fl.settled_ns) * 1e-9 : 0.0;
    const double left = std::max(0.0, fl.left_bytes - sent);
    for (int l : path(fl)) carried[static_cast<size_t>(l)] -= left;
  }
  for (double& b : carried) b = std::max(0.0, b);
  return carried;
}

void FlowSim::check_invariants() const {
  if (recompute_pending_) return;
  for (size_t l = 0; l < link_flows_.size(); ++l) {
    const double load = from_fixed(load_[l]);
    if (!(load <= cap_[l] * (1 + 1e-9) + 1e-3))
      throw std::logic_error(fmt::format("flow invariant broken at {}: link {} ({} -> {}) carries {:.6g} B/s over its capacity of {:.6g} B/s",
                                         engine_.now().str(), l, topo_.node(topo_.link(static_cast<int>(l)).src).name,
                                         topo_.node(topo_.link(static_cast<int>(l)).dst).name, load, cap_[l]));
    for (size_t i = 0; i < link_flows_[l].size(); ++i) {
      const LinkFlow& e = link_flows_[l][i];
      if (pos_[e.slot] != i || hop_link_[e.slot] != static_cast<int>(l))
        throw std::logic_error(fmt::format("flow invariant broken at {}: flow {} sits at {} of link {}'s heap, its slot says {} on link {}",
                                           engine_.now().str(), e.flow, i, l, pos_[e.slot], hop_link_[e.slot]));
      if (i > 0 && link_flows_[l][(i - 1) / 2].key < e.key)
        throw std::logic_error(fmt::format("flow invariant broken at {}: link {}'s heap of flows is out of order at {}", engine_.now().str(), l, i));
      const double r = flows_[e.flow].rate_Bps;
      if (!(r >= 0) || !std::isfinite(r))
        throw std::logic_error(fmt::format("flow invariant broken at {}: flow {} has rate {}", engine_.now().str(), e.flow, r));
    }
  }
}

std::pair<int, int> FlowSim::reroute(const std::vector<int>& links, int64_t penalty_ns) {
  if (static_cast<size_t>(topo_.link_count()) > cap_.size()) sync_links();
  std::vector<uint32_t> hit;
  for (int l : links)
    for (const LinkFlow& e : link_flows_[static_cast<size_t>(l)]) hit.push_back(e.flow);
  // Moved in the order they began, not by slot (slots depend on how many flows the fabric ever
  // held at once, which a fast-forward changes); a flow on several of the links once.
  std::sort(hit.begin(), hit.end(), [this](uint32_t a, uint32_t b) { return flows_[a].seq < flows_[b].seq; });
  hit.erase(std::unique(hit.begin(), hit.end()), hit.end());
  const int64_t now = engine_.now().count_ns();
  int moved = 0, stalled = 0;
  std::vector<int> np;
  for (uint32_t f : hit) {
    Flow& fl = flows_[f];
    if (fl.state != State::Sending || fl.hops == 0) continue;
    // A flow that has sent its last byte (its end rounded up to the flow quantum, or due at
    // this instant) has nothing to move: it ends where it is.
    settle(fl, now);
    if (fl.left_bytes <= 0) continue;
    const int src = topo_.link(path(fl).front()).src, dst = topo_.link(path(fl).back()).dst;
    np.clear();
    // A new hash draw from what the flow is (its tag and start salt), never from its slot in
    // the flow table, which depends on how many flows the fabric ever held at once (fewer
    // after a fast-forward's skipped iterations).
    router_.route(src, dst, (fl.tag * 0x9E3779B97F4A7C15ull) ^ (fl.salt + 0x632BE59BD9B4E019ull), np);
    bool ok = !np.empty();
    for (int e : np)
      if (!topo_.link(e).up || cap_[static_cast<size_t>(e)] <= 0) ok = false;
    if (!ok) {
      ++stalled;
      continue;
    }
    detach(f);
    const Fixed b = to_fixed(fl.left_bytes);
    for (int l : path(fl)) link_bytes_[static_cast<size_t>(l)] -= b;
    for (int l : np) link_bytes_[static_cast<size_t>(l)] += b;
    set_path(f, np);
    fl.latency_ns = router_.latency_ns(np) + penalty_ns;
    fl.rate_Bps = 0;
    fl.keyed = false;
    fl.gen = (fl.gen + 1) & kGenMask;  // its pending completion is void
    attach(f);
    ++moved;
  }
  stats_.rerouted += static_cast<uint64_t>(moved);
  if (moved > 0) {
    level_bound_ = 0;
    request_recompute();
  }
  return {moved, stalled};
}

FlowLedger FlowLedger::between(const FlowLedger& a, const FlowLedger& b) {
  FlowLedger d;
  for (size_t i = 0; i < d.counts.size(); ++i) d.counts[i] = b.counts[i] - a.counts[i];
  d.bytes = b.bytes - a.bytes;
  d.link_bytes.resize(b.link_bytes.size());
  for (size_t l = 0; l < b.link_bytes.size(); ++l) d.link_bytes[l] = b.link_bytes[l] - (l < a.link_bytes.size() ? a.link_bytes[l] : 0);
  return d;
}

FlowLedger FlowSim::ledger() const {
  FlowLedger g;
  for (size_t i = 0; i < g.counts.size(); ++i) g.counts[i] = stats_.*FlowLedger::kSummed[i];
  g.bytes = bytes_started_;
  g.link_bytes = link_bytes_;
  return g;
}

bool FlowSim::still() const {
  if (recompute_pending_) return false;
  if (active_ == 0) return true;
  for (const Flow& fl : flows_)
    if (fl.state == State::Sending && (!fl.keyed || fl.rate_Bps > 0)) return false;
  return true;
}

void FlowSim::replay(const FlowLedger& d, uint64_t n) {
  if (!still()) throw std::logic_error("internal: a fabric ledger replayed while flows move");
  if (d.link_bytes.size() > link_bytes_.size()) throw std::logic_error("internal: a fabric ledger from more links than the fabric has");
  for (size_t i = 0; i < d.counts.size(); ++i) stats_.*FlowLedger::kSummed[i] += n * d.counts[i];
  const Fixed k = static_cast<Fixed>(n);
  bytes_started_ += k * d.bytes;
  stats_.bytes_started = from_fixed(bytes_started_);
  for (size_t l = 0; l < d.link_bytes.size(); ++l) link_bytes_[l] += k * d.link_bytes[l];
}

uint64_t FlowSim::shape_digest() const {
  uint64_t h = 0;
  auto mix = [&h](uint64_t v) { h = digest_mix(h, v); };
  auto bits = [](double d) { return std::bit_cast<uint64_t>(d); };
  const int n = topo_.link_count();
  mix(static_cast<uint64_t>(n));
  for (int e = 0; e < n; ++e) {
    const auto& l = topo_.link(e);
    mix((static_cast<uint64_t>(static_cast<uint32_t>(l.src)) << 32) | static_cast<uint32_t>(l.dst));
    mix(bits(l.bandwidth_Bps));
    mix(static_cast<uint64_t>(l.latency_ns));
    mix((static_cast<uint64_t>(l.up) << 32) | static_cast<uint32_t>(l.route_penalty));
    mix(static_cast<size_t>(e) < cap_.size() ? bits(cap_[static_cast<size_t>(e)]) : ~0ull);
  }
  return h;
}

void FlowSim::set_link_capacity_at(SimTime at, int link, double Bps) {
  cap_changes_.push_back(CapChange{link, Bps});
  if (Bps > 0) {
    if (ready_ns_.size() <= static_cast<size_t>(link)) ready_ns_.resize(static_cast<size_t>(link) + 1, 0);
    ready_ns_[static_cast<size_t>(link)] = std::max(ready_ns_[static_cast<size_t>(link)], at.count_ns());
  }
  engine_.schedule_at(at, Priority::Network, this, kCapacity, static_cast<uint32_t>(cap_changes_.size() - 1));
}

void FlowSim::settle(Flow& f, int64_t now_ns) {
  if (now_ns > f.settled_ns && f.rate_Bps > 0) {
    f.left_bytes -= f.rate_Bps * static_cast<double>(now_ns - f.settled_ns) * 1e-9;
    if (f.left_bytes < 0) f.left_bytes = 0;
  }
  f.settled_ns = now_ns;
}

void FlowSim::schedule_finish(uint32_t f, int64_t now_ns) {
  Flow& fl = flows_[f];
  fl.gen = (fl.gen + 1) & kGenMask;
  // Stalled: no completion until a link comes back; but a flow with no bytes left (waiting out
  // the flow quantum when its link failed) ends at its rounded end all the same.
  if (fl.rate_Bps <= 0 && fl.left_bytes > 0) return;
  const double dt = fl.left_bytes > 0 ? fl.left_bytes / fl.rate_Bps * 1e9 : 0.0;
  const int64_t d = static_cast<int64_t>(std::ceil(dt - 1e-3));
  int64_t end = (SimTime::ns(now_ns) + SimTime::ns(d < 0 ? 0 : d)).count_ns();
  if (quantum_ns_ > 1) end = (end + quantum_ns_ - 1) / quantum_ns_ * quantum_ns_;
  ++stats_.reschedules;
  engine_.schedule_at(SimTime::ns(end), Priority::Network, this, kTxDone, f, Generation(fl.gen));
}

void FlowSim::heap_place(std::vector<LinkFlow>& h, size_t i, const LinkFlow& e) {
  h[i] = e;
  pos_[e.slot] = static_cast<uint32_t>(i);
}

// Restores the heap order around entry i of a link's heap after its key changed.
void FlowSim::heap_fix(int link, size_t i) {
  auto& h = link_flows_[static_cast<size_t>(link)];
  const LinkFlow e = h[i];
  const size_t start = i;
  while (i > 0) {
    const size_t p = (i - 1) / 2;
    if (!(h[p].key < e.key)) break;
    heap_place(h, i, h[p]);
    i = p;
  }
  if (i == start) i = sift_down(h, i, e);
  heap_place(h, i, e);
}

// Moves the hole at i down past every child whose key exceeds e's (placing each child one
// level up) and returns where e belongs.
[[gnu::always_inline]] inline size_t FlowSim::sift_down(std::vector<LinkFlow>& h, size_t i, const LinkFlow& e) {
  const size_t n = h.size();
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return i;
    if (c + 1 < n && h[c].key < h[c + 1].key) ++c;
    if (!(e.key < h[c].key)) return i;
    heap_place(h, i, h[c]);
    i = c;
  }
}

// Calls fn(flow) for every flow on `link` whose rate key is >= level: a pruned walk of the
// heap, O(number found). fn must not change the heap.
template <class Fn>
void FlowSim::for_each_at_least(int link, double level, Fn&& fn) {
  const auto& h = link_flows_[static_cast<size_t>(link)];
  if (h.empty() || h[0].key < level) return;
  stack_.clear();
  stack_.push_back(0);
  while (!stack_.empty()) {
    const size_t i = stack_.back();
    stack_.pop_back();
    fn(h[i].flow);
    const size_t c = 2 * i + 1;
    if (c < h.size() && h[c].key >= level) stack_.push_back(c);
    if (c + 1 < h.size() && h[c + 1].key >= level) stack_.push_back(c + 1);
  }
}

void FlowSim::detach(uint32_t f) {
  Flow& fl = flows_[f];
  const Fixed r = to_fixed(fl.rate_Bps);
  for (size_t h = 0; h < fl.hops; ++h) {
    const int l = hop_link_[fl.pos_base + h];
    const size_t li = static_cast<size_t>(l);
    auto& lf = link_flows_[li];
    const size_t p = pos_[fl.pos_base + h];
    const LinkFlow moved = lf.back();
    lf.pop_back();
    if (p < lf.size()) {
      heap_place(lf, p, moved);
      heap_fix(l, p);
    }
    load_[li] -= r;
    if (lf.empty()) load_[li] = 0;
    mark_dirty(l);
  }
}

// Incremental progressive filling. Progressive filling saturates links in increasing order
// of fair share; a change can only alter the run from some level up:
//  - a flow that ends at rate r never let any of its links saturate below r (it would have
//    been frozen there), and without it their shares only rise: the run below r is unchanged;
//  - a link that gains flows saturates, in the new allocation, at a level >= cap/flows
//    (its flows' rates sum to cap, each at most that level);
//  - a capacity change: level 0, the whole component.
// So every flow rated below the lowest such level keeps its rate exactly, and the state of
// the run at that level is known: those flows frozen, each link's remaining capacity its
// capacity less their rates (load_ keeps the exact sum). Filling resumes from there over the
// flows at or above the level that are connected, through such flows, to a changed link;
// flows above the level elsewhere do not interact with the change and keep their rates too.
void FlowSim::recompute() {
  const int64_t now = engine_.now().count_ns();
  ++epoch_;
  if (epoch_ == 0) {  // wrapped: clear marks
    std::fill(link_mark_.begin(), link_mark_.end(), 0);
    std::fill(flow_mark_.begin(), flow_mark_.end(), 0);
    std::fill(flow_frozen_.begin(), flow_frozen_.end(), 0);
    epoch_ = 1;
  }
  double bound = level_bound_;
  level_bound_ = kInf;
  for (int l : grown_) {
    const size_t li = static_cast<size_t>(l);
    if (!link_flows_[li].empty()) bound = std::min(bound, cap_[li] / static_cast<double>(link_flows_[li].size()));
  }
  const double level = bound * (1 - kLevelSlack);
  comp_links_.clear();
  comp_flows_.clear();
  for (int l : dirty_) {
    link_mark_[static_cast<size_t>(l)] = epoch_;
    comp_links_.push_back(l);
  }
  clear_marks();
  // The flows to re-fill: those at or above the level on a changed link, then on their links ...
  for (size_t i = 0; i < comp_links_.size(); ++i) {
    for_each_at_least(comp_links_[i], level, [this](uint32_t f) {
      if (flow_mark_[f] == epoch_) return;
      flow_mark_[f] = epoch_;
      const Flow& fl = flows_[f];
      comp_flows_.push_back(f);
      for (int l : path(fl))
        if (link_mark_[static_cast<size_t>(l)] != epoch_) {
          link_mark_[static_cast<size_t>(l)] = epoch_;
          comp_links_.push_back(l);
        }
    });
  }
  ++stats_.recomputes;
  stats_.flows_rated += comp_flows_.size();
  stats_.links_rated += comp_links_.size();
  if (comp_flows_.empty()) return;
  if (comp_flows_.size() > stats_.max_component_flows) stats_.max_component_flows = comp_flows_.size();
  for (int l : comp_links_) {
    const size_t li = static_cast<size_t>(l);
    cnt_[li] = 0;
    part_[li] = 0;
  }
  for (uint32_t f : comp_flows_) {
    const Flow& fl = flows_[f];
    const Fixed r = to_fixed(fl.rate_Bps);
    for (int l : path(fl)) {
      const size_t li = static_cast<size_t>(l);
      ++cnt_[li];
      part_[li] += r;
    }
  }
  // Progressive filling from the level: repeatedly saturate the link with the smallest fair
  // share. Freezing a flow at the current minimum share never lowers another link's share,
  // so keys only grow: a popped entry whose link's share has grown is pushed back with the
  // new share (lazy increase-key), and a hop update is O(1) instead of a heap push.
  using Entry = std::pair<double, int>;
  heap_.clear();
  for (int l : comp_links_) {
    const size_t li = static_cast<size_t>(l);
    if (cnt_[li] == 0) continue;
    const Fixed frozen = load_[li] - part_[li];
    rem_[li] = frozen == 0 ? cap_[li] : cap_[li] - from_fixed(frozen);
    heap_.emplace_back(rem_[li] / cnt_[li], l);
  }
  std::make_heap(heap_.begin(), heap_.end(), std::greater<Entry>());
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Entry>());
    const auto [key, l] = heap_.back();
    heap_.pop_back();
    const size_t li = static_cast<size_t>(l);
    if (cnt_[li] == 0) continue;
    const double share = rem_[li] > 0 ? rem_[li] / cnt_[li] : 0.0;
    if (share > key) {
      heap_.emplace_back(share, l);
      std::push_heap(heap_.begin(), heap_.end(), std::greater<Entry>());
      continue;
    }
    const bool below = share < cap_[li] * (1 - 1e-12);  // the bottleneck is shared (or partly taken)
    for_each_at_least(l, level, [this, share, below](uint32_t f) {
      if (flow_frozen_[f] == epoch_) return;
      flow_frozen_[f] = epoch_;
      Flow& fl = flows_[f];
      fl.new_rate_Bps = share;
      fl.shared |= below;
      for (int l2 : path(fl)) {
        const size_t l2i = static_cast<size_t>(l2);
        rem_[l2i] -= share;
        --cnt_[l2i];
      }
    });
  }
  // Apply the new rates (in the deterministic order the flows were found). A link whose heap
  // has many keys changing is re-keyed in place and rebuilt at once (Floyd, O(size)) instead of
  // fixed entry by entry (O(changed x log size)): the first rating of a million-flow all-to-all
  // changes every key. Rates do not depend on where entries sit in a heap, but the order flows
  // are found in does (a walk of the heaps), and so the order of completions due at one
  // nanosecond: which heaps are rebuilt (the threshold below) is part of a run's determinism,
  // and changing it may reorder same-instant events of a shipped scenario.
  order_.clear();
  for (uint32_t f : comp_flows_)
    if (flows_[f].new_rate_Bps != flows_[f].rate_Bps || !flows_[f].keyed) order_.push_back(f);
  for (int l : comp_links_) cnt_[static_cast<size_t>(l)] = 0;
  for (uint32_t f : order_)
    for (int l : path(flows_[f])) ++cnt_[static_cast<size_t>(l)];
  rebuild_.clear();
  for (int l : comp_links_) {
    const size_t li = static_cast<size_t>(l);
    const size_t n = link_flows_[li].size(), changed = cnt_[li];
    if (changed >= 64 && changed * static_cast<size_t>(std::bit_width(n)) > 2 * n) {
      rebuild_.push_back(l);
      link_mark_[li] = ~epoch_;  // re-keyed in place below, rebuilt after
    }
    cnt_[li] = 0;
  }
  // Keys and heaps first, completions after (the heaps are whole again before anything that
  // can throw).
  for (uint32_t f : order_) {
    Flow& fl = flows_[f];
    const Fixed delta = to_fixed(fl.new_rate_Bps) - to_fixed(fl.rate_Bps);
    for (size_t h = 0; h < fl.hops; ++h) {
      const int l = hop_link_[fl.pos_base + h];
      const size_t li = static_cast<size_t>(l);
      load_[li] += delta;
      const uint32_t p = pos_[fl.pos_base + h];
      link_flows_[li][p].key = fl.new_rate_Bps;
      if (link_mark_[li] == epoch_) heap_fix(l, p);
    }
    fl.keyed = true;
  }
  for (int l : rebuild_) {
    link_mark_[static_cast<size_t>(l)] = epoch_;
    heap_build(l);
  }
  stats_.heaps_rebuilt += rebuild_.size();
  for (uint32_t f : order_) {
    Flow& fl = flows_[f];
    if (fl.new_rate_Bps != fl.rate_Bps) {
      settle(fl, now);
      fl.rate_Bps = fl.new_rate_Bps;
      schedule_finish(f, now);
    }
  }
}

// Restores the heap order of a whole link heap whose keys changed in place (Floyd's method).
void FlowSim::heap_build(int link) {
  auto& h = link_flows_[static_cast<size_t>(link)];
  const size_t n = h.size();
  for (size_t top = n / 2; top-- > 0;) {
    const LinkFlow e = h[top];
    const size_t i = sift_down(h, top, e);
    if (i != top) heap_place(h, i, e);
  }
}

bool FlowSim::is_void(uint32_t kind, uint32_t arg, uint32_t generation) const {
  if (kind != kTxDone && kind != kDeliver) return false;
  const Flow& fl = flows_[arg];
  return fl.state != (kind == kTxDone ? State::Sending : State::Flying) || !(Generation(generation) == Generation(fl.gen));
}

size_t FlowSim::cancel(const std::function<bool(const FlowSink*)>& cut) {
  // In the order the flows began: the heaps the others stay in are left the same whatever
  // slots the cut ones had.
  std::vector<uint32_t> hit;
  for (uint32_t f = 0; f < flows_.size(); ++f)
    if (flows_[f].state != State::Free && cut(flows_[f].sink)) hit.push_back(f);
  std::sort(hit.begin(), hit.end(), [this](uint32_t a, uint32_t b) { return flows_[a].seq < flows_[b].seq; });
  size_t n = 0;
  for (uint32_t f : hit) {
    Flow& fl = flows_[f];
    if (fl.state == State::Sending) {
      level_bound_ = std::min(level_bound_, fl.rate_Bps);  // as a flow that ends: the others' shares only rise
      detach(f);
      --active_;
    }
    fl.rate_Bps = 0;
    fl.left_bytes = 0;
    fl.gen = (fl.gen + 1) & kGenMask;  // its completion or delivery pending is void
    fl.state = State::Free;
    if (fl.spray != kNoSpray && --sprays_[fl.spray].left == 0) free_sprays_.push_back(fl.spray);
    fl.spray = kNoSpray;
    free_.push_back(f);
    ++n;
  }
  if (n == 0) return 0;
  if (active_ == 0) {  // nothing left to re-rate: no recomputation is owed for these links
    clear_marks();
    level_bound_ = kInf;
  } else {
    request_recompute();
  }
  return n;
}

void FlowSim::on_event(Engine& engine, uint32_t kind, uint32_t arg) {
  switch (kind) {
    case kRecompute:
      recompute_pending_ = false;
      recompute();
      return;
    case kTxDone: {
      Flow& fl = flows_[arg];
      if (fl.state != State::Sending || !(engine.event_generation() == Generation(fl.gen))) {  // superseded by a rate change
        engine.discount_void_event();
        return;
      }
      settle(fl, engine.now().count_ns());
      fl.left_bytes = 0;
      level_bound_ = std::min(level_bound_, fl.rate_Bps);
      detach(arg);
      fl.state = State::Flying;
      fl.rate_Bps = 0;
      --active_;
      request_recompute();
      engine.schedule_in(SimTime::ns(fl.latency_ns), Priority::Network, this, kDeliver, arg, Generation(fl.gen));
      return;
    }
    case kDeliver: {
      Flow& fl = flows_[arg];
      if (fl.state != State::Flying || !(engine.event_generation() == Generation(fl.gen))) [[unlikely]] {  // cut (cancel)
        engine.discount_void_event();
        return;
      }
      FlowSink* sink = fl.sink;
      const uint64_t tag = fl.tag;
      fl.state = State::Free;
      free_.push_back(arg);
      ++stats_.completed;
      if (fl.spray == kNoSpray) {  // a split flow's parts share links with each other by design: not counted
        ++stats_.unsplit_completed;
        stats_.shared_bottleneck += fl.shared;
      }
      if (fl.spray != kNoSpray) {  // a part of a split flow: the flow is delivered with its last part
        Spray& s = sprays_[fl.spray];
        if (--s.left > 0) return;
        free_sprays_.push_back(fl.spray);
      }
      if (sink) sink->on_flow_done(engine, tag);
      return;
    }
    case kCapacity: {
      const auto& c = cap_changes_[arg];
      // A circuit coming up after its reconfiguration that failed meanwhile stays empty: its
      // repair gives it its bandwidth.
      if (c.Bps > 0 && !topo_.link(c.link).up) return;
      // (A link given a later capacity since, reprogrammed before this came: that one stands.)
      if (c.Bps > 0 && engine.now().count_ns() < ready_ns(c.link)) return;
      set_link_capacity(c.link, c.Bps);
      return;
    }
  }
}

}  // namespace sluice::net
