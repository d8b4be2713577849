// Context parallelism (Megatron's CP, ring attention; Liu et al., "Ring Attention", 2023): the
// sequence of every micro-batch is cut into 2 cp equal chunks and CP rank i of a (replica,
// stage) holds chunks i and 2cp - 1 - i, so that under the causal mask every rank attends over
// the same number of keys. Everything but attention runs on the rank's own s / cp tokens; each
// layer's attention needs every earlier token's keys and values, which go around the CP ring
// (cp - 1 steps, one chunk pair a step: the traffic of an all-gather ring over the CP ranks)
// while the rank computes attention over the blocks it already has. Per layer the GEMMs before
// attention run first, then attention and the ring side by side, so an op of a stage with G of
// GEMM and A of attention and a ring R takes G + max(A, R) on an idle fabric: the ring starts
// when the GEMMs are done (kCpRing) and the op goes on to its tensor-parallel all-reduces when
// both its compute and its ring have ended. A backward passes the keys and values again and
// their gradients back (twice the forward's bytes; three times with full recomputation, whose
// forward passes them once more), and its attention is twice the forward's (three times).
// The CP ranks of a slot run in lock step (the ring couples them every layer): the op takes the
// slowest rank's time.
#include "workloads/training/training_job.h"

#include <algorithm>
#include <cmath>

namespace sluice::training::detail {

void TrainingJob::plan_cp() {
  const int VS = c_.pp * c_.virtual_stages, b = c_.micro_batch_size, S = c_.sequence, chunks = 2 * c_.cp;
  const long l = S / chunks;
  n_slices_ = 1;
  slice_len_ = {S};
  res_.slice_tokens = {S};
  fwd_ns_.assign(static_cast<size_t>(VS), 0);
  cp_attn_ns_.assign(static_cast<size_t>(VS), 0);
  std::vector<double> lo(static_cast<size_t>(VS)), hi(static_cast<size_t>(VS));
  // The attention ops of one chunk on virtual stage vs (the cost model's attention.* parts).
  auto attention = [&](long prefix, int vs) {
    double ns = 0;
    for (const OpCost& o : cost_.slice(b, l, prefix, cost_.stage_range(vs)).ops)
      if (o.op.rfind("attention", 0) == 0) ns += o.ns;
    return ns;
  };
  for (int i = 0; i < c_.cp; ++i) {
    const long first = i * l, second = (chunks - 1 - i) * l;
    cost_.slice_stage_ns(b, l, first, true, lo);
    cost_.slice_stage_ns(b, l, second, true, hi);
    for (int vs = 0; vs < VS; ++vs) {
      const int64_t total = pass_ns(lo[static_cast<size_t>(vs)] + hi[static_cast<size_t>(vs)]);
      if (total <= fwd_ns_[static_cast<size_t>(vs)]) continue;
      fwd_ns_[static_cast<size_t>(vs)] = total;  // the slowest rank's
      const double a = attention(first, vs) + attention(second, vs);
      cp_attn_ns_[static_cast<size_t>(vs)] = std::clamp<int64_t>(std::llround(a), 0, total - 1);
    }
  }
}

double TrainingJob::cp_kv_bytes(int vs) const {
  const ModelSpec& m = c_.model;
  // Keys and values of the tensor-parallel rank's heads (every rank at least one: Megatron
  // replicates the KV heads when tensor parallelism exceeds them).
  const double heads = std::ceil(static_cast<double>(m.kv_heads) / c_.tp);
  return static_cast<double>(c_.micro_batch_size) * c_.sequence * 2 * heads * m.head_dim * m.dtype_bytes * cost_.stage_range(vs).count;
}

void TrainingJob::cp_begin(int sl, int64_t dur, int64_t attention) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  st.cp_wait = 2;
  const size_t first = slot_first_device(sl), n = static_cast<size_t>(slot_devices());
  // A straggler slows both parts of its rank's compute; the ring starts after the slowed GEMMs.
  schedule(kCpRing, slowed(dur - attention, first, n), static_cast<uint32_t>(sl));
  schedule(kCompute, slowed(dur, first, n), static_cast<uint32_t>(sl));
}

void TrainingJob::cp_start(int sl) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  const Op op = st.order[st.next - 1];
  const int vs = virtual_stage(sl, op.mb);
  const int times = op.forward ? 1 : exchanges_per_unit();
  const double bytes = times * cp_kv_bytes(vs);
  const auto& nodes = nodes_[static_cast<size_t>(sl)];
  st.cp_ring.clear();  // the last op's rings, all done
  st.cp_ring_left = c_.tp;
  for (int k = 0; k < c_.tp; ++k) {
    std::vector<int> ring;
    for (int c = 0; c < c_.cp; ++c) ring.push_back(nodes[static_cast<size_t>(c * c_.tp + k)]);
    net::CollectiveOptions o;
    o.fused_ring_steps = true;
    o.fused_count = times * cost_.stage_range(vs).count;  // every layer's ring pays its steps' latencies
    o.salt = static_cast<uint64_t>(sl) * 257 + static_cast<uint64_t>(k) + 11;
    o.channels = 1;  // one ring through the CP ranks in order (ring attention's neighbours)
    st.cp_ring.push_back(std::make_unique<net::Collective>(world_.fabric(), net::CollectiveKind::AllGather, std::move(ring), bytes, o));
  }
  for (auto& coll : st.cp_ring)
    coll->start([this, sl, g = gen_](Engine&) {
      if (g != gen_) return;
      Stage& s = stages_[static_cast<size_t>(sl)];
      if (--s.cp_ring_left > 0) return;
      for (auto& c : s.cp_ring) flows_ += c->flows_started();
      progress_ns_ = world_.engine().now().count_ns();
      cp_part_done(sl, true);
    });
}

void TrainingJob::cp_part_done(int sl, bool ring) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  const int64_t now = world_.engine().now().count_ns();
  (ring ? st.cp_ring_end_ns : st.cp_compute_end_ns) = now;
  if (--st.cp_wait > 0) return;
  st.cp_exposed_ns += std::max<int64_t>(0, st.cp_ring_end_ns - st.cp_compute_end_ns);
  tp_allreduces(sl);
}

}  // namespace sluice::training::detail
