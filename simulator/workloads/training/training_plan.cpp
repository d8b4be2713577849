// The training job's plans: token slices (TeraPipe's DP over slice lengths) and the schedule
// estimate on an idle fabric that judges them (see training_job.h).
#include "workloads/training/training_job.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace sluice::training::detail {

// For each stage boundary of replica 0, what handing over activations costs when the
// fabric carries nothing else: every tensor-parallel rank sends its share at once over its
// route, so a link that k of them cross gives each 1/k of it. The slicing DP's estimate of a
// slice's hand-off (the simulation itself times every send as flows).
void TrainingJob::measure_handoffs() {
  for (int s = 0; s + 1 < c_.pp; ++s) {
    const auto& a = nodes_[static_cast<size_t>(slot(0, s))];
    const auto& b = nodes_[static_cast<size_t>(slot(0, s + 1))];
    std::map<int, int> crossing;
    std::vector<std::vector<int>> routes;
    for (size_t k = 0; k < a.size(); ++k) {
      routes.push_back(world_.fabric().router().route(a[k], b[k], k));
      for (int l : routes.back()) ++crossing[l];
    }
    double ns_per_byte = 0, lat = 0;
    for (const auto& r : routes) {
      for (int l : r) ns_per_byte = std::max(ns_per_byte, crossing[l] * 1e9 / world_.topology().link(l).bandwidth_Bps);
      lat = std::max(lat, static_cast<double>(world_.fabric().router().latency_ns(r)));
    }
    handoff_ns_per_byte_ = std::max(handoff_ns_per_byte_, ns_per_byte);
    handoff_latency_ns_ = std::max(handoff_latency_ns_, lat);
  }
}

// The same for a stage's tensor-parallel ring (replica 0, stage 0; every stage's ring has the
// same shape): the ring's slowest edge, and a step's route latency.
void TrainingJob::measure_tp_ring() {
  const auto& a = nodes_[static_cast<size_t>(slot(0, 0))];
  const size_t n = static_cast<size_t>(c_.tp);  // context-parallel rank 0's ring (every rank's has the same shape)
  if (n < 2) return;
  for (size_t k = 0; k < n; ++k) {
    const auto r = world_.fabric().router().route(a[k], a[(k + 1) % n], k);
    for (int l : r) ring_ns_per_byte_ = std::max(ring_ns_per_byte_, 1e9 / world_.topology().link(l).bandwidth_Bps);
    ring_latency_ns_ = std::max(ring_latency_ns_, static_cast<double>(world_.fabric().router().latency_ns(r)));
  }
}

// The collectives of a pass (see the comment above TpPass in training_job.h).
auto TrainingJob::tp_pass(int vs, bool forward) const -> TpPass {
  TpPass p;
  if (c_.tp < 2) return p;
  const LayerRange r = cost_.stage_range(vs);
  const bool shared = c_.ep > 1 && c_.model.shared_experts > 0;
  p.layers = c_.recompute && !forward ? 2 : 1;
  // (An MTP module's layer is of the model's last layer's kind, as CostModel's span counts it.)
  const int moe_layers = c_.model.moe_layers_in(r.first, r.count) + (c_.model.moe() ? r.mtp : 0);
  p.count = p.layers * (2 * layers_run(vs) + (shared ? moe_layers : 0));
  const double row = static_cast<double>(c_.model.hidden) * c_.model.dtype_bytes;  // a token's activation
  // The embedding: a reduce-scatter (or an all-gather backward); with learned positions an
  // all-reduce forward.
  const bool embed_ar = c_.model.learned_positions && forward;
  const double embed_count = embed_ar ? 1 : 0.5, embed_bytes = embed_ar ? row : row / 2;
  if (r.embedding) p.count += embed_count, p.extra_per_token += embed_bytes;
  if (r.lm_head) {
    const double heads = 1.0 + r.mtp;
    p.count += heads * 0.5, p.extra_per_token += heads * row / 2;
    if (forward) p.count += heads * (c_.loss_fusion ? 2 : 3), p.extra_per_token += heads * 12;
    // each module: its embedding's, and its input's 2h gathered (or reduce-scattered) and its
    // output's gather (the scatter's gather backward), in its checkpoint: twice recomputing
    p.count += r.mtp * (embed_count + p.layers), p.extra_per_token += r.mtp * (embed_bytes + p.layers * 1.5 * row);
  }
  return p;
}

// A pass's tensor-parallel collectives on stage s over `tokens` tokens (tp_pass), as the fused ring
// the simulation runs (2(n-1)/n of the bytes over the slowest edge, every step's latency).
double TrainingJob::tp_ns(double tokens, int s, bool forward) const {
  const double n = c_.tp;
  if (c_.tp < 2) return 0;
  const TpPass p = tp_pass(s, forward);
  return 2 * (n - 1) / n * p.bytes(cost_, tokens, s) * ring_ns_per_byte_ + 2 * (n - 1) * p.count * ring_latency_ns_;
}

// One direction of the slowest boundary for `tokens` tokens: each rank's share of the activations.
double TrainingJob::handoff_ns(double tokens) const {
  if (c_.pp == 1) return 0;
  return cost_.activation_bytes(tokens) / slot_devices() * handoff_ns_per_byte_ + handoff_latency_ns_;
}

// The forward/backward phase of one iteration with these slices, as the schedule runs it on
// an otherwise idle fabric: every stage takes its ops in schedule order, each once its input
// has arrived (the previous stage's activations or the next stage's gradients; the last
// stage's backward after its own forward), for its compute and then its tensor-parallel
// all-reduces. Sends do not hold a stage, but a stage's sends leave one after another and a
// stage receives one after another (its links carry them in turn: where hand-offs take longer
// than compute, as over one 25 Gb/s NIC, they queue). Returns the last stage op's end.
double TrainingJob::schedule_ns(const std::vector<int>& lengths) {
  const int K = c_.pp, n = static_cast<int>(lengths.size()), U = c_.micro_batches * n, b = c_.micro_batch_size;
  std::vector<int64_t> fwd(static_cast<size_t>(K * n)), bwd(fwd.size());
  std::vector<double> tp(static_cast<size_t>(K * n)), tpb(static_cast<size_t>(K * n)), x(static_cast<size_t>(n));
  std::vector<double> tx_free(static_cast<size_t>(K), 0), rx_free(static_cast<size_t>(K), 0);
  // A hand-off of slice i from stage `from` to `to`, sent at t: when it has arrived.
  auto handoff = [&](int from, int to, int i, double t) {
    const double start = std::max({t, tx_free[static_cast<size_t>(from)], rx_free[static_cast<size_t>(to)]});
    const double wire = x[static_cast<size_t>(i)] - handoff_latency_ns_;
    tx_free[static_cast<size_t>(from)] = rx_free[static_cast<size_t>(to)] = start + wire;
    return start + x[static_cast<size_t>(i)];
  };
  std::vector<double> arriveF(static_cast<size_t>(K * U), -1), arriveB(static_cast<size_t>(K * U), -1);
  std::vector<double> st(static_cast<size_t>(K));
  for (int i = 0, c = 0; i < n; c += lengths[static_cast<size_t>(i)], ++i) {
    const int l = lengths[static_cast<size_t>(i)];
    const auto key = std::make_pair(l, c);
    auto it = stage_cache_.find(key);
    if (it == stage_cache_.end()) {
      cost_.slice_stage_ns(b, l, c, true, st);
      it = stage_cache_.emplace(key, st).first;
    }
    for (int s = 0; s < K; ++s) {
      const PassNs p = pass_of(s, static_cast<double>(b) * l, pass_ns(it->second[static_cast<size_t>(s)]));
      fwd[static_cast<size_t>(s * n + i)] = p.forward;
      bwd[static_cast<size_t>(s * n + i)] = p.backward;
      tp[static_cast<size_t>(s * n + i)] = tp_ns(static_cast<double>(b) * l, s, true);
      tpb[static_cast<size_t>(s * n + i)] = tp_ns(static_cast<double>(b) * l, s, false);
    }
    x[static_cast<size_t>(i)] = handoff_ns(static_cast<double>(b) * l);
  }
  std::vector<std::vector<Op>> order(static_cast<size_t>(K));
  for (int s = 0; s < K; ++s) order[static_cast<size_t>(s)] = schedule_order(s, U);
  std::vector<double> endF(static_cast<size_t>(K * U), -1), free_at(static_cast<size_t>(K), 0);
  std::vector<size_t> next(static_cast<size_t>(K), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < K; ++s)
      while (next[static_cast<size_t>(s)] < order[static_cast<size_t>(s)].size()) {
        const Op op = order[static_cast<size_t>(s)][next[static_cast<size_t>(s)]];
        const int i = op.mb % n;
        const size_t at = static_cast<size_t>(s * U + op.mb);
        double ready = 0;
        if (op.forward && s > 0) ready = arriveF[at];
        else if (!op.forward) ready = s == K - 1 ? endF[at] : arriveB[at];
        if (ready < 0) break;
        const int64_t f = op.forward ? fwd[static_cast<size_t>(s * n + i)] : bwd[static_cast<size_t>(s * n + i)];
        const double end = std::max(free_at[static_cast<size_t>(s)], ready) + static_cast<double>(f) +
                           (op.forward ? tp : tpb)[static_cast<size_t>(s * n + i)];
        if (op.forward) endF[at] = end;
        free_at[static_cast<size_t>(s)] = end;
        if (op.forward && s + 1 < K) arriveF[static_cast<size_t>((s + 1) * U + op.mb)] = handoff(s, s + 1, i, end);
        if (!op.forward && s > 0) arriveB[static_cast<size_t>((s - 1) * U + op.mb)] = handoff(s, s - 1, i, end);
        ++next[static_cast<size_t>(s)];
        moved = true;
      }
  }
  return *std::max_element(free_at.begin(), free_at.end());
}

// The slices of a micro-batch's sequences (policy none: the whole sequence as one) and each
// stage's forward time of each: slice i of l tokens after c costs f(l, c) on every stage
// (cost model: the stage's own layers, attention over the c cached tokens, the LM head over
// every token on the last stage; for the formula also its tensor-parallel all-reduces), its
// backward 2f (3f recomputing; the formula leaves out the loss and the LM head's exemption from
// recomputation, pass_of: it only proposes, and schedule_ns, which judges, has them). The policies choose
// lengths by TeraPipe's formula over the m micro-batches, T = m sum a + (K-1) max t, with
// f, b the slowest stage's and x the slice's hand-off: t = f + b + 2x (one slice's way down
// and back up the pipeline) and a = max(f, x) + max(b, x) (a stage sends while it computes
// the next slice, so per slice it is held by the slower of the two); x = 0 on one stage.
void TrainingJob::plan_slices() {
  const SlicingConfig& sc = c_.slicing;
  const int K = c_.pp, VS = K * c_.virtual_stages, b = c_.micro_batch_size, S = c_.sequence;
  const double back = c_.recompute ? 3 : 2;
  std::vector<double> st(static_cast<size_t>(VS));
  int last_l = -1, last_c = -1;  // the DP asks for t and a of the same slice in turn
  std::pair<double, double> last{0, 0};
  auto parts = [&](int l, int c) {
    if (l == last_l && c == last_c) return last;
    cost_.slice_stage_ns(b, l, c, true, st);
    double f = 0;  // the slowest stage: compute and its tensor-parallel all-reduces
    for (int s = 0; s < VS; ++s) f = std::max(f, st[static_cast<size_t>(s)] + tp_ns(static_cast<double>(b) * l, s, true));
    last = {f, handoff_ns(static_cast<double>(b) * l)};
    last_l = l, last_c = c;
    return last;
  };
  auto t = [&](int l, int c) {
    const auto [f, x] = parts(l, c);
    return f * (1 + back) + 2 * x;
  };
  TeraPipeOptions o;
  o.granularity = sc.granularity;
  o.candidate_gap = sc.candidate_gap;
  o.micro_batches = c_.micro_batches;
  o.sum_cost = [&](int l, int c) {
    const auto [f, x] = parts(l, c);
    return std::max(f, x) + std::max(back * f, x);
  };
  std::vector<int> lengths{S};
  if (sc.policy == SlicingPolicy::Uniform) lengths = uniform_slices(S, sc.slices, sc.granularity);
  if (sc.policy == SlicingPolicy::TeraPipe) {
    // The DP's candidates (its best slicing under each t_max it evaluates) and every uniform
    // slicing, judged by the schedule the simulator runs; the formula only proposes.
    std::vector<std::vector<int>> cands;
    o.on_candidate = [&](const std::vector<int>& l) { cands.push_back(l); };
    const SlicePlan p = terapipe_slices(S, K, t, o);
    o.on_candidate = nullptr;
    res_.dp_candidates = p.candidates;
    res_.dp_evaluated = p.evaluated;
    lengths = p.lengths;
    double best = schedule_ns(lengths);
    for (const auto& l : cands)
      if (const double x = schedule_ns(l); x < best) best = x, lengths = l;
    const int granules = (S + sc.granularity - 1) / sc.granularity;
    double best_uniform = std::numeric_limits<double>::infinity();
    for (int k = 1; k <= std::min(granules, kMaxUniformSlices); ++k) {
      const auto l = uniform_slices(S, k, sc.granularity);
      const double x = schedule_ns(l);
      if (x < best_uniform) best_uniform = x, res_.best_uniform_slices = k;
      if (x < best) best = x, lengths = l;
    }
    res_.slice_schedule_ms = best / 1e6;
    res_.best_uniform_schedule_ms = best_uniform / 1e6;
  }
  const SlicePlan chosen = evaluate_slices(lengths, K, t, o), whole = evaluate_slices({S}, K, t, o);
  res_.slice_tokens = lengths;
  res_.slice_model_ms = chosen.latency_ns / 1e6;
  res_.unsliced_model_ms = whole.latency_ns / 1e6;
  res_.slice_bubble_model = chosen.latency_ns > 0 ? (K - 1) * chosen.max_ns / chosen.latency_ns : 0;
  n_slices_ = static_cast<int>(lengths.size());
  slice_len_ = lengths;
  fwd_ns_.assign(static_cast<size_t>(VS * n_slices_), 0);
  bwd_ns_.assign(fwd_ns_.size(), 0);
  loss_ns_ = 0;
  int c = 0;
  for (int i = 0; i < n_slices_; ++i) {
    const int l = lengths[static_cast<size_t>(i)];
    cost_.slice_stage_ns(b, l, c, true, st);
    for (int s = 0; s < VS; ++s)
      set_pass(static_cast<size_t>(s * n_slices_ + i), s, static_cast<double>(b) * l, pass_ns(st[static_cast<size_t>(s)]));
    c += l;
  }
}

// Megatron's vocabulary-parallel cross-entropy (tensor_parallel.vocab_parallel_cross_entropy,
// its default: cross_entropy_loss_fusion off) on each LM head's logits, the rank's vocab / tp of
// them a token, every kernel memory-bound (at the device's copy ceiling, a kernel's floor each):
//   forward: the logits cast to fp32 (b + 4 bytes a logit), their max (4), the max subtracted
//     (4 + 4), exp in place (4 + 4), its sum (4), the division by the sum (4 + 4): 38 bytes a
//     bf16 logit in six kernels; the fp32 softmax is what the backward keeps (training memory
//     counts it);
//   backward: the softmax scaled in place by the loss's gradient (4 + 4) and cast back for the
//     LM head's backward (4 + b): 14 bytes in two.
// With loss_fusion (Megatron's cross_entropy_loss_fusion, its native path: the same steps in
// jit-fused functions), each fused function taken as one pass over the logits (what a fuser can
// make of it; how well torch.compile fuses them varies with the version):
//   forward: cast and max (b + 4), subtract, exp and sum (4 + 4, exp in place), the division
//     (4 + 4): 22 bytes a bf16 logit in three;
//   backward: scale and cast back (4 + 4 + b: the softmax is scaled in place, an input the
//     fused function must write back, then cast): 10 bytes in one.
// The fp32 softmax is kept for the backward either way (the same memory). Models here are
// 2-byte (bf16, fp16); a 4-byte dtype would skip the casts.
// In both, the one-hot subtraction and the targets' gather are a token's work, not a logit's:
// left out. The tensor-parallel all-reduces of per-token scalars (three, two fused) run on the
// fabric with the stage's other collectives (TrainingJob::tp_pass).
std::pair<double, double> TrainingJob::loss_ns(double rows) const {
  const ModelSpec& m = c_.model;
  const double b = m.dtype_bytes, heads = 1.0 + c_.mtp_layers;
  const double logits = static_cast<double>(m.vocab) / c_.tp * heads;  // a token's, every head's
  const bool cast = b < 4;
  double fwd_bytes, bwd_bytes, fwd_kernels, bwd_kernels;
  if (c_.loss_fusion) {
    fwd_bytes = (cast ? b + 4 : 4) + 8 + 8, fwd_kernels = 3;
    bwd_bytes = 8 + (cast ? b : 0), bwd_kernels = 1;
  } else {
    fwd_bytes = (cast ? b + 4 : 0) + 4 + 8 + 8 + 4 + 8, fwd_kernels = cast ? 6 : 5;
    bwd_bytes = 8 + (cast ? 4 + b : 0), bwd_kernels = cast ? 2 : 1;
  }
  const double f = cost_.elementwise("loss.forward", "", rows, logits * fwd_bytes, heads * fwd_kernels).ns;
  const double g = cost_.elementwise("loss.backward", "", rows, logits * bwd_bytes, heads * bwd_kernels).ns;
  return {f, g};
}

auto TrainingJob::pass_of(int vs, double rows, int64_t layers_ns) const -> PassNs {
  if (!cost_.stage_range(vs).lm_head) return {layers_ns, backward_of(layers_ns), 0};
  const auto [lf, lb] = loss_ns(rows);
  const int64_t loss_f = std::llround(lf), loss_b = std::llround(lb);
  // The heads' GEMMs: their backward (input and weight gradients) twice their forward, recomputing or not.
  const int64_t heads = std::clamp<int64_t>(std::llround(cost_.lm_head_ns(rows) * (1 + c_.mtp_layers)), 0, layers_ns);
  return {layers_ns + loss_f, backward_of(layers_ns - heads) + 2 * heads + loss_b, loss_f + loss_b};
}

auto TrainingJob::schedule_order(int s, int m) const -> std::vector<Op> {
  const int K = c_.pp, v = c_.virtual_stages;
  std::vector<Op> out;
  if (v > 1) {
    // Megatron's interleaved 1F1B: the k-th forward runs micro-batch (k / Kv) K + k mod K on
    // chunk (k mod Kv) / K, backwards likewise with the chunks reversed; rank s warms up with
    // 2(K - s - 1) + (v - 1) K forwards, then alternates, then drains (m divides by K).
    const int total = m * v, warm = std::min(2 * (K - s - 1) + (v - 1) * K, total);
    auto unit = [&](int k, bool forward) {
      const int chunk = (k % (K * v)) / K, mb = k / (K * v) * K + k % K;
      return (forward ? chunk : v - 1 - chunk) * m + mb;
    };
    int f = 0, b = 0;
    for (; f < warm; ++f) out.push_back({true, unit(f, true)});
    while (f < total) {
      out.push_back({true, unit(f++, true)});
      out.push_back({false, unit(b++, false)});
    }
    while (b < total) out.push_back({false, unit(b++, false)});
    return out;
  }
  if (c_.schedule == Schedule::GPipe) {
    for (int i = 0; i < m; ++i) out.push_back({true, i});
    for (int i = m - 1; i >= 0; --i) out.push_back({false, i});
    return out;
  }
  const int warm = std::min(K - s - 1, m);
  int f = 0, b = 0;
  for (; f < warm; ++f) out.push_back({true, f});
  while (f < m) {
    out.push_back({true, f++});
    out.push_back({false, b++});
  }
  while (b < m) out.push_back({false, b++});
  return out;
}

}  // namespace sluice::training::detail
