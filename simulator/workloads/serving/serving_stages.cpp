// The pipeline and fabric path of a serving iteration: each stage computes its layers,
// all-reduces over its tensor-parallel devices (flows), and hands its activations to the next
// stage (flows); stages take one batch at a time, and a long prompt's prefill may pass them
// as token slices (TeraPipe's DP, or uniform slices). Also the completion of every flow a
// replica engine started (stage hand-offs, swap copies, KV handoffs).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/round.h"
#include "workloads/serving/serving_sim.h"
#include "workloads/training/terapipe.h"

namespace sluice::serving {

void ServingSim::begin_stage(int ri, int k, int s) {
  InFlight& f = inflight_[static_cast<size_t>(ri)];
  if (k > f.done_on_stage[static_cast<size_t>(s)]) {  // the previous slice is not done here yet: it holds the cache this one reads
    f.parked[static_cast<size_t>(s)].push_back(k);
    return;
  }
  Pass& p = f.passes[static_cast<size_t>(k)];
  p.stage = s;
  const size_t slot = static_cast<size_t>(ri / pp_ * pp_ + s);
  if (stage_busy_[slot]) {
    stage_queue_[slot].push_back(ri * kMaxSlices + k);
    return;
  }
  stage_busy_[slot] = 1;
  p.stage_started_ns = engine_.now().count_ns();
  f.waiting_swap = s == 0 && k == 0 && f.swaps_pending > 0;
  if (f.waiting_swap) return;  // the first stage computes once the swap copies are done
  start_compute(ri, k, s);
}

void ServingSim::start_compute(int ri, int k, int s) {
  InFlight& f = inflight_[static_cast<size_t>(ri)];
  const int64_t now = engine_.now().count_ns();
  engine_.schedule_at(SimTime::ns(now + f.stage_ns[static_cast<size_t>(k * pp_ + s)] + (s == 0 && k == 0 ? f.extra_ns : 0)),
                      Priority::Compute, this, kStageCompute, static_cast<uint32_t>(ri * kMaxSlices + k), epoch(ri));
  if (f.overlap) {  // two-batch overlap: the communication runs under the compute
    Pass& p = f.passes[static_cast<size_t>(k)];
    p.compute_done = p.comm_done = false;
    p.compute_started_ns = now;
    start_comm(ri, k);
  }
}

void ServingSim::stage_compute_done(int ri, int k) {
  InFlight& f = inflight_[static_cast<size_t>(ri)];
  Pass& p = f.passes[static_cast<size_t>(k)];
  if (f.overlap) {
    p.compute_done = true;
    if (p.comm_done) stage_comm_done(ri, k);
    return;
  }
  start_comm(ri, k);
}

void ServingSim::start_comm(int ri, int k) {
  InFlight& f = inflight_[static_cast<size_t>(ri)];
  Pass& p = f.passes[static_cast<size_t>(k)];
  const CostModel& cost = cost_of(ri);
  const double allreduce_bytes = cost.tp_allreduce_bytes(p.tokens, p.stage);
  if (tp_of(ri) > 1 && allreduce_bytes > 0) {
    // The stage's all-reduces of this iteration, as one ring whose steps are fused into one
    // flow per ring edge (same bytes per link, same step latencies): 2(n-1) fewer flow starts.
    const auto& nodes = fabric_.stage_nodes[static_cast<size_t>(ri / pp_)][static_cast<size_t>(p.stage)];
    net::CollectiveOptions o;
    o.fused_ring_steps = true;
    o.fused_count = cost.tp_allreduce_count(p.stage);
    o.salt = static_cast<uint64_t>(ri);
    p.collective = std::make_unique<net::Collective>(*fabric_.flows, cfg_.tp_algorithm, nodes, allreduce_bytes, o);
    p.comm_started_ns = engine_.now().count_ns();
    p.collective->start([this, ri, k, ep = epoch_[static_cast<size_t>(ri)]](Engine& e) {
      if (ep != epoch_[static_cast<size_t>(ri)]) return;
      tp_comm_ns_ += e.now().count_ns() - inflight_[static_cast<size_t>(ri)].passes[static_cast<size_t>(k)].comm_started_ns;
      ++tp_comm_count_;
      start_alltoall(ri, k);
    });
    return;
  }
  start_alltoall(ri, k);
}

// An MoE model's dispatch and combine all-to-alls of the iteration's MoE layers, after its
// all-reduces: one all-to-all whose pairs carry every layer's bytes (fused per iteration, as
// the all-reduces are; each of them pays its route latency), each device sending its tokens'
// share to every other.
void ServingSim::start_alltoall(int ri, int k) {
  Pass& p = inflight_[static_cast<size_t>(ri)].passes[static_cast<size_t>(k)];
  const CostModel& cost = cost_of(ri);
  const double bytes = cost.moe_alltoall_bytes(p.a2a_tokens, p.stage);
  if (bytes <= 0) {
    stage_comm_done(ri, k);
    return;
  }
  const auto& nodes = fabric_.stage_nodes[static_cast<size_t>(ri / pp_)][static_cast<size_t>(p.stage)];
  net::CollectiveOptions o;
  o.salt = static_cast<uint64_t>(ri) + 0x5EED;
  o.fused_count = cost.moe_alltoall_count(p.stage);
  o.a2a_weights = cost.moe_alltoall_weights();  // hot experts' devices receive more
  o.a2a_dispatch_fraction = cost.moe_dispatch_fraction();  // an FP8 dispatch is lighter than its combine
  const bool hier = cfg_.moe.hierarchical_alltoall;
  if (hier)
    o.a2a_dedup = [this, &cost](const std::vector<int>& server) {
      const auto [it, fresh] = a2a_server_share_.try_emplace({&cost, server}, 0.0);
      if (fresh) it->second = cost.moe_alltoall_server_share(server);
      return it->second;
    };
  p.alltoall = std::make_unique<net::Collective>(*fabric_.flows, hier ? net::CollectiveKind::AllToAllHierarchical : net::CollectiveKind::AllToAll,
                                                 nodes, bytes, o);
  const int64_t started = engine_.now().count_ns();
  p.alltoall->start([this, ri, k, started, ep = epoch_[static_cast<size_t>(ri)]](Engine& e) {
    if (ep != epoch_[static_cast<size_t>(ri)]) return;
    const int64_t took = e.now().count_ns() - started;
    const int64_t count = cost_of(ri).moe_alltoall_count(inflight_[static_cast<size_t>(ri)].passes[static_cast<size_t>(k)].stage);
    moe_a2a_ns_ += took;
    ++moe_a2a_passes_;
    moe_a2a_count_ += count;
    if (pool_split_ > 0 && ri >= pool_split_) {  // a disaggregated deployment's decode engine
      moe_a2a_decode_ns_ += took;
      moe_a2a_decode_count_ += count;
    }
    stage_comm_done(ri, k);
  });
}

void ServingSim::stage_release(int r, int s) {
  const size_t slot = static_cast<size_t>(r * pp_ + s);
  stage_busy_[slot] = 0;
  if (!stage_queue_[slot].empty()) {
    const int next = stage_queue_[slot].front();
    stage_queue_[slot].pop_front();
    begin_stage(next / kMaxSlices, next % kMaxSlices, s);
  }
}

void ServingSim::stage_comm_done(int ri, int k) {
  InFlight& f = inflight_[static_cast<size_t>(ri)];
  Pass& p = f.passes[static_cast<size_t>(k)];
  const int64_t now = engine_.now().count_ns();
  if (f.overlap && !p.comm_done) {
    p.comm_done = true;
    p.comm_ended_ns = now;
    if (!p.compute_done) return;  // the compute event ends the stage
  }
  const int r = ri / pp_, s = p.stage, passes = static_cast<int>(f.passes.size());
  if (s == 0) {
    // The first stage's busy time: the replica's utilization.
    rstats_[ri].busy(p.stage_started_ns, now - p.stage_started_ns, batches_[ri].entries.size());
  }
  ++f.done_on_stage[static_cast<size_t>(s)];
  // A sliced prefill keeps the first stage: its next slice goes before any waiting batch.
  if (s == 0 && k + 1 < passes) stage_queue_[static_cast<size_t>(r * pp_)].push_front(ri * kMaxSlices + k + 1);
  stage_release(r, s);
  auto& parked = f.parked[static_cast<size_t>(s)];
  if (const auto it = std::find(parked.begin(), parked.end(), k + 1); it != parked.end()) {
    parked.erase(it);
    begin_stage(ri, k + 1, s);
  }
  if (s + 1 < pp_) {
    // Activations to the next stage: each tensor-parallel rank sends its share to its peer.
    const auto& from = fabric_.stage_nodes[static_cast<size_t>(r)][static_cast<size_t>(s)];
    const auto& to = fabric_.stage_nodes[static_cast<size_t>(r)][static_cast<size_t>(s + 1)];
    p.sends_pending = static_cast<int>(from.size());
    p.comm_started_ns = now;
    const double bytes = cost_.activation_bytes(p.tokens) / static_cast<double>(from.size());
    const uint64_t tag = static_cast<uint64_t>(ri) | (static_cast<uint64_t>(k) << 32) |
                         (static_cast<uint64_t>(epoch_[static_cast<size_t>(ri)] & 0x7FFFFF) << 41);
    for (size_t j = 0; j < from.size(); ++j)
      fabric_.flows->start(from[j], to[j], bytes, this, tag, static_cast<uint64_t>(ri) * 977 + j + static_cast<uint64_t>(k) * 7919);
    return;
  }
  if (k + 1 < passes) return;  // the prompt's first token comes with its last slice
  int64_t end = now + f.d2h_ns;
  if (f.overlap) {
    // What neither micro-batch can hide: when communication bounds the stage, the first
    // micro-batch's first layer computes before any of it starts; when compute does, the last
    // micro-batch's last layer communicates after all of it (a layer of a half: 1 / 2L).
    const double compute = static_cast<double>(f.stage_ns[0] + f.extra_ns), comm = static_cast<double>(p.comm_ended_ns - p.compute_started_ns);
    end += round_ns((comm > compute ? compute : comm) / (2.0 * cfg_.model.layers));
  }
  if (trace_ && trace_->enabled() && trace_iterations_ < cfg_.trace_max_iterations && ri < 64) {
    ++trace_iterations_;
    const Batch& b = batches_[ri];
    double tokens = 0;
    for (const Pass& q : f.passes) tokens += q.tokens;  // (a verification's drafts included)
    const char* what = b.prefill_entries && b.decode_entries ? "mixed" : b.prefill_entries ? "prefill" : "decode";
    trace_->complete(cfg_.trace_pid, ri, what, "iteration", f.started_ns, end - f.started_ns,
                     {{"batch", static_cast<double>(b.entries.size())}, {"tokens", tokens},
                      {"prefill_seqs", static_cast<double>(b.prefill_entries)}, {"decode_seqs", static_cast<double>(b.decode_entries)},
                      {"slices", static_cast<double>(passes)},
                      {"stage_compute_us", static_cast<double>(*std::max_element(f.stage_ns.begin(), f.stage_ns.end())) / 1e3},
                      {"extra_us", f.extra_ns / 1e3}});
  }
  engine_.schedule_at(SimTime::ns(end), Priority::Compute, this, kIterationEnd, static_cast<uint32_t>(ri), epoch(ri));
  last_activity_ns_ = std::max(last_activity_ns_, end);
}

void ServingSim::on_flow_done(Engine&, uint64_t tag) {
  if (tag == kOffloadFlow) return;  // a copy into host memory in the background: nothing waits for it
  if (tag & kHandoffFlow) {
    const auto id = static_cast<uint32_t>(tag & 0xFFFFFFFFu);
    if ((tag >> 40) == (front_.requests()[id].copy_gen & kCopyGenMask)) kv_copied(id);  // else a copy a failure voided
    return;
  }
  const int ri = static_cast<int>(tag & 0xFFFFFFFF);
  if ((tag >> 41) != (epoch_[static_cast<size_t>(ri)] & 0x7FFFFF)) return;  // sent by an iteration a failure voided
  InFlight& f = inflight_[static_cast<size_t>(ri)];
  if ((tag >> 40) & 1) {  // a swap copy
    if (--f.swaps_pending == 0 && f.waiting_swap) {
      f.waiting_swap = false;
      start_compute(ri, 0, 0);
    }
    return;
  }
  const int k = static_cast<int>((tag >> 32) & 0xFF);
  Pass& p = f.passes[static_cast<size_t>(k)];
  if (--p.sends_pending == 0) {
    handoff_ns_ += engine_.now().count_ns() - p.comm_started_ns;
    ++handoff_count_;
    begin_stage(ri, k, p.stage + 1);
  }
}

// Prefill slicing: a prompt's prefill of `tokens` new tokens after `context` cached ones, as
// slices when the deployment slices prefills and this one is long enough; {} otherwise. The
// DP's t(l, c) is the slowest stage's time of a slice of l tokens after context + c (its
// hand-offs left out: they are flows, timed as they run), T = sum t + (K - 1) max t.
std::vector<int> ServingSim::prefill_slices(int tokens, int context) {
  const PrefillSlicingConfig& ps = cfg_.prefill_slicing;
  if (ps.policy == PrefillSlicing::None || pp_ < 2 || tokens < ps.min_tokens || tokens < 2 * ps.granularity) return {};
  const auto key = std::make_pair(tokens, context);
  if (const auto it = slice_plans_.find(key); it != slice_plans_.end()) return it->second;
  std::vector<int> lengths;
  const int units = (tokens + ps.granularity - 1) / ps.granularity;
  if (ps.policy == PrefillSlicing::Uniform) {
    lengths = training::uniform_slices(tokens, std::min({ps.slices, units, kMaxSlices}), ps.granularity);
  } else {
    auto t = [&](int l, int c) {
      const SeqWork w{l, context + c, false};
      double mx = 0;
      for (int s = 0; s < pp_; ++s) mx = std::max(mx, cost_.stage_ns(std::span<const SeqWork>(&w, 1), s));
      return mx;
    };
    training::TeraPipeOptions o;
    o.granularity = std::max(ps.granularity, (tokens + 255) / 256);  // at most 256 units: a plan stays a few ms
    o.granularity = (o.granularity + ps.granularity - 1) / ps.granularity * ps.granularity;
    lengths = training::terapipe_slices(tokens, pp_, t, o).lengths;
    if (static_cast<int>(lengths.size()) > kMaxSlices) lengths = training::uniform_slices(tokens, kMaxSlices, o.granularity);
  }
  if (lengths.size() < 2) lengths.clear();
  slice_plans_.emplace(key, lengths);
  return lengths;
}

}  // namespace sluice::serving
