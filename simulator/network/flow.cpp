#include "network/flow.h"

#include <cmath>
#include <limits>
#include <algorithm>
#include <functional>

namespace sluice::net {

namespace {
constexpr uint32_t kGenMask = (1u << 30) - 1;
}

FlowSim::FlowSim(Engine& engine, const Topology& topo, Router& router) : engine_(engine), topo_(topo), router_(router) {
  sync_links();
}

void FlowSim::sync_links() {
  const size_t n = static_cast<size_t>(topo_.link_count());
  for (size_t e = cap_.size(); e < n; ++e) cap_.push_back(topo_.link(static_cast<int>(e)).bandwidth_Bps);
  link_flows_.resize(n);
  rem_.resize(n);
  cnt_.resize(n);
  link_mark_.resize(n);
}

uint32_t FlowSim::alloc() {
  if (!free_.empty()) {
    const uint32_t f = free_.back();
    free_.pop_back();
    return f;
  }
  if (flows_.size() >= (1u << 31)) throw std::overflow_error("too many concurrent flows");
  flows_.emplace_back();
  return static_cast<uint32_t>(flows_.size() - 1);
}

uint32_t FlowSim::start(int src, int dst, double bytes, FlowSink* sink, uint64_t tag, uint64_t salt) {
  const uint32_t f = alloc();
  Flow& fl = flows_[f];
  fl.path.clear();
  router_.route(src, dst, salt, fl.path);
  fl.left_bytes = bytes;
  fl.sink = sink;
  fl.tag = tag;
  begin(f);
  return f;
}

uint32_t FlowSim::start_on_path(const std::vector<int>& path, double bytes, FlowSink* sink, uint64_t tag) {
  const uint32_t f = alloc();
  Flow& fl = flows_[f];
  fl.path = path;
  fl.left_bytes = bytes;
  fl.sink = sink;
  fl.tag = tag;
  begin(f);
  return f;
}

void FlowSim::begin(uint32_t f) {
  if (static_cast<size_t>(topo_.link_count()) > cap_.size()) sync_links();
  Flow& fl = flows_[f];
  const int64_t now = engine_.now().count_ns();
  fl.latency_ns = router_.latency_ns(fl.path);
  fl.rate_Bps = 0;
  fl.settled_ns = now;
  fl.gen = (fl.gen + 1) & kGenMask;
  ++stats_.started;
  if (fl.path.empty() || fl.left_bytes <= 0) {
    // Nothing to share: the bytes (if any) are local, or only the latency remains.
    fl.left_bytes = 0;
    fl.state = State::Flying;
    engine_.schedule_in(SimTime::ns(fl.latency_ns), Priority::Network, this, kDeliver, f);
    return;
  }
  fl.state = State::Sending;
  ++active_;
  if (active_ > stats_.max_active) stats_.max_active = active_;
  fl.pos.resize(fl.path.size());
  for (size_t h = 0; h < fl.path.size(); ++h) {
    auto& lf = link_flows_[static_cast<size_t>(fl.path[h])];
    fl.pos[h] = static_cast<uint32_t>(lf.size());
    lf.push_back(f);
    mark_dirty(fl.path[h]);
  }
  request_recompute();
}

void FlowSim::mark_dirty(int link) { dirty_.push_back(link); }

void FlowSim::request_recompute() {
  if (recompute_pending_) return;
  recompute_pending_ = true;
  engine_.schedule_in(SimTime::zero(), Priority::Network, this, kRecompute, 0);
}

void FlowSim::set_link_capacity(int link, double Bps) {
  if (static_cast<size_t>(topo_.link_count()) > cap_.size()) sync_links();
  cap_[static_cast<size_t>(link)] = Bps < 0 ? 0 : Bps;
  mark_dirty(link);
  request_recompute();
}

void FlowSim::set_link_capacity_at(SimTime at, int link, double Bps) {
  cap_changes_.push_back(CapChange{link, Bps});
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
  if (fl.rate_Bps <= 0) return;  // stalled: no completion until a link comes back
  const double dt = fl.left_bytes / fl.rate_Bps * 1e9;
  const int64_t d = static_cast<int64_t>(std::ceil(dt - 1e-3));
  int64_t end = (SimTime::ns(now_ns) + SimTime::ns(d < 0 ? 0 : d)).count_ns();
  if (quantum_ns_ > 1) end = (end + quantum_ns_ - 1) / quantum_ns_ * quantum_ns_;
  ++stats_.reschedules;
  engine_.schedule_at(SimTime::ns(end), Priority::Network, this, kTxDone | (fl.gen << 2), f);
}

void FlowSim::detach(uint32_t f) {
  Flow& fl = flows_[f];
  for (size_t h = 0; h < fl.path.size(); ++h) {
    auto& lf = link_flows_[static_cast<size_t>(fl.path[h])];
    const uint32_t p = fl.pos[h];
    const uint32_t moved = lf.back();
    lf[p] = moved;
    lf.pop_back();
    if (moved != f) {
      Flow& m = flows_[moved];
      for (size_t k = 0; k < m.path.size(); ++k)
        if (m.path[k] == fl.path[h] && m.pos[k] == lf.size()) {
          m.pos[k] = p;
          break;
        }
    }
    mark_dirty(fl.path[h]);
  }
}

void FlowSim::recompute() {
  const int64_t now = engine_.now().count_ns();
  ++epoch_;
  if (epoch_ == 0) {  // wrapped: clear marks
    std::fill(link_mark_.begin(), link_mark_.end(), 0);
    for (auto& f : flows_) f.mark = f.frozen = 0;
    epoch_ = 1;
  }
  comp_links_.clear();
  comp_flows_.clear();
  for (int l : dirty_)
    if (link_mark_[static_cast<size_t>(l)] != epoch_) {
      link_mark_[static_cast<size_t>(l)] = epoch_;
      comp_links_.push_back(l);
    }
  dirty_.clear();
  // The connected component: links -> their flows -> those flows' links -> ...
  for (size_t i = 0; i < comp_links_.size(); ++i) {
    for (uint32_t f : link_flows_[static_cast<size_t>(comp_links_[i])]) {
      Flow& fl = flows_[f];
      if (fl.mark == epoch_) continue;
      fl.mark = epoch_;
      comp_flows_.push_back(f);
      for (int l : fl.path)
        if (link_mark_[static_cast<size_t>(l)] != epoch_) {
          link_mark_[static_cast<size_t>(l)] = epoch_;
          comp_links_.push_back(l);
        }
    }
  }
  ++stats_.recomputes;
  stats_.flows_rated += comp_flows_.size();
  stats_.links_rated += comp_links_.size();
  if (comp_flows_.size() > stats_.max_component_flows) stats_.max_component_flows = comp_flows_.size();
  if (comp_flows_.empty()) return;
  for (uint32_t f : comp_flows_) settle(flows_[f], now);
  // Progressive filling: repeatedly saturate the link with the smallest fair share. Freezing
  // a flow at the current minimum share never lowers another link's share, so keys only
  // grow: a popped entry whose link's share has grown is pushed back with the new share
  // (lazy increase-key), and a hop update is O(1) instead of a heap push.
  using Entry = std::pair<double, int>;
  heap_.clear();
  for (int l : comp_links_) {
    const size_t li = static_cast<size_t>(l);
    rem_[li] = cap_[li];
    cnt_[li] = static_cast<uint32_t>(link_flows_[li].size());
    if (cnt_[li] > 0) heap_.emplace_back(rem_[li] / cnt_[li], l);
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
    for (uint32_t f : link_flows_[li]) {
      Flow& fl = flows_[f];
      if (fl.frozen == epoch_) continue;
      fl.frozen = epoch_;
      fl.new_rate_Bps = share;
      for (int l2 : fl.path) {
        const size_t l2i = static_cast<size_t>(l2);
        rem_[l2i] -= share;
        --cnt_[l2i];
      }
    }
  }
  for (uint32_t f : comp_flows_) {
    Flow& fl = flows_[f];
    if (fl.new_rate_Bps != fl.rate_Bps) {
      fl.rate_Bps = fl.new_rate_Bps;
      schedule_finish(f, now);
    }
  }
}

void FlowSim::on_event(Engine& engine, uint32_t kind, uint32_t arg) {
  switch (kind & 3u) {
    case kRecompute:
      recompute_pending_ = false;
      recompute();
      return;
    case kTxDone: {
      Flow& fl = flows_[arg];
      if (fl.state != State::Sending || (kind >> 2) != fl.gen) return;  // superseded by a rate change
      settle(fl, engine.now().count_ns());
      fl.left_bytes = 0;
      detach(arg);
      fl.state = State::Flying;
      fl.rate_Bps = 0;
      --active_;
      request_recompute();
      engine.schedule_in(SimTime::ns(fl.latency_ns), Priority::Network, this, kDeliver, arg);
      return;
    }
    case kDeliver: {
      Flow& fl = flows_[arg];
      FlowSink* sink = fl.sink;
      const uint64_t tag = fl.tag;
      fl.state = State::Free;
      free_.push_back(arg);
      ++stats_.completed;
      if (sink) sink->on_flow_done(engine, tag);
      return;
    }
    case kCapacity: {
      const auto& c = cap_changes_[arg];
      set_link_capacity(c.link, c.Bps);
      return;
    }
  }
}

}  // namespace sluice::net
