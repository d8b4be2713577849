// Context parallelism (Megatron's CP; Liu et al., "Ring Attention", 2023): the sequence of
// every micro-batch is cut into 2 cp equal chunks and CP rank i of a (replica, stage) holds
// chunks i and 2cp - 1 - i, so that under the causal mask every rank attends over the same
// number of keys. Everything but attention runs once over the rank's s / cp tokens (its two
// chunks together); attention is costed per chunk, at its prefix. Each layer's attention needs
// every earlier token's keys and values, which go around the CP ring (cp - 1 steps: the traffic
// of an all-gather ring over the CP ranks, one fused ring per tensor-parallel rank carrying
// every layer's). The ring starts once the op's GEMMs before attention are done (kCpRing).
//   cp_comm: p2p (ring attention, Megatron's default): block j + 1 arrives while block j's
//     attention runs, and the last block's attention (one of cp) runs after the ring (kCpTail):
//     an op of GEMMs G, attention A and ring R takes G + max(A (cp - 1) / cp, R) + A / cp on an
//     idle fabric, the op going on to its tensor-parallel all-reduces when both its compute and
//     its ring's tail have ended.
//   cp_comm: allgather (Llama 3's): the keys and values are all gathered first, then all of the
//     attention runs: G + R + A, the gather exposed.
// A backward passes the keys and values again and their gradients back (twice the forward's
// bytes; three times with full recomputation, whose forward passes them once more), and its
// attention is twice the forward's (three times), as every op's backward is but for the last
// stage's loss and LM head (pass_of; no backward tables: FlashAttention's backward is nearer 2.5
// times its forward). The CP ranks of a slot run
// in lock step (the ring couples them every layer): the op takes the slowest rank's time.
#include "workloads/training/training_job.h"

#include <algorithm>
#include <cmath>

namespace sluice::training::detail {

void TrainingJob::plan_cp() {
  const int VS = c_.pp * c_.virtual_stages, b = c_.micro_batch_size, S = c_.sequence, chunks = 2 * c_.cp;
  const long l = S / chunks;
  n_slices_ = 1;
  slice_len_ = {S};
  fwd_ns_.assign(static_cast<size_t>(VS), 0);
  cp_attn_ns_.assign(static_cast<size_t>(VS), 0);
  // The attention ops of `tokens` new tokens after `prefix` on virtual stage vs (the cost model's
  // attention.* parts).
  auto attention = [&](long tokens, long prefix, int vs) {
    double ns = 0;
    for (const OpCost& o : cost_.slice(b, tokens, prefix, cost_.stage_range(vs)).ops)
      if (o.op.rfind("attention", 0) == 0) ns += o.ns;
    return ns;
  };
  // Everything but attention runs once over a rank's 2l tokens (its two chunks side by side, the
  // LM head over all of them on the last stage): a 2l-token slice less its attention.
  std::vector<double> whole(static_cast<size_t>(VS));
  cost_.slice_stage_ns(b, 2 * l, 0, true, whole);
  for (int vs = 0; vs < VS; ++vs) {
    const double rest = whole[static_cast<size_t>(vs)] - attention(2 * l, 0, vs);
    for (int i = 0; i < c_.cp; ++i) {
      const double a = attention(l, i * l, vs) + attention(l, (chunks - 1 - i) * l, vs);
      const int64_t total = pass_ns(rest + a);
      if (total <= fwd_ns_[static_cast<size_t>(vs)]) continue;
      fwd_ns_[static_cast<size_t>(vs)] = total;  // the slowest rank's
      cp_attn_ns_[static_cast<size_t>(vs)] = std::clamp<int64_t>(std::llround(a), 0, total - 1);
    }
  }
  // The last stage's loss over the rank's 2l tokens a sequence, and every backward (pass_of).
  bwd_ns_.assign(fwd_ns_.size(), 0);
  loss_ns_ = 0;
  for (int vs = 0; vs < VS; ++vs)
    set_pass(static_cast<size_t>(vs), vs, 2.0 * b * static_cast<double>(l), fwd_ns_[static_cast<size_t>(vs)]);
}

double TrainingJob::cp_kv_bytes(int vs) const {
  const ModelSpec& m = c_.model;
  // Keys and values of the tensor-parallel rank's heads (every rank at least one: Megatron
  // replicates the KV heads when tensor parallelism exceeds them).
  // Latent attention goes around the ring as its up-projected keys (head_dim + rope) and values
  // (v_head_dim) of the rank's heads (every query head has its own), as Megatron-Core's MLA runs
  // context parallelism.
  const double heads = std::ceil(static_cast<double>(m.mla() ? m.heads : m.kv_heads) / c_.tp);
  const double per_head = m.mla() ? static_cast<double>(m.head_dim + m.qk_rope_head_dim + m.v_head_dim) : 2.0 * m.head_dim;
  return static_cast<double>(c_.micro_batch_size) * c_.sequence * heads * per_head * m.dtype_bytes * layers_run(vs);
}

void TrainingJob::cp_begin(int sl, int64_t dur, int64_t attention) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  st.cp_attention_ns = attention;
  const size_t first = slot_first_device(sl), n = static_cast<size_t>(slot_devices());
  // A straggler slows every part of its rank's compute; the ring starts after the slowed GEMMs.
  schedule(kCpRing, slowed(dur - attention, first, n), static_cast<uint32_t>(sl));
  if (c_.cp_comm == TrainingConfig::CpComm::AllGather) {
    st.cp_wait = 1;  // the attention follows the gather (cp_ring_done)
    return;
  }
  st.cp_wait = 2;
  schedule(kCompute, slowed(dur, first, n), static_cast<uint32_t>(sl));
}

void TrainingJob::cp_start(int sl) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  const Op op = st.order[st.next - 1];
  const int vs = virtual_stage(sl, op.mb);
  const int times = op.forward ? 1 : exchanges_per_unit();
  // Under ZeRO-3 the op runs in layers (z3_layer), each its share of the ring.
  const double bytes = times * cp_kv_bytes(vs) / st.segs;
  const auto& nodes = nodes_[static_cast<size_t>(sl)];
  st.cp_ring.clear();  // the last op's rings, all done
  st.cp_ring_left = c_.tp;
  st.cp_ring_start_ns = world_.engine().now().count_ns();
  for (int k = 0; k < c_.tp; ++k) {
    std::vector<int> ring;
    for (int c = 0; c < c_.cp; ++c) ring.push_back(nodes[static_cast<size_t>(c * c_.tp + k)]);
    net::CollectiveOptions o;
    o.fused_ring_steps = true;
    o.fused_count = static_cast<double>(times) * layers_run(vs) / st.segs;  // every layer's ring pays its steps' latencies
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
      cp_ring_done(sl);
    });
}

void TrainingJob::cp_ring_done(int sl) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  const size_t first = slot_first_device(sl), n = static_cast<size_t>(slot_devices());
  if (c_.cp_comm == TrainingConfig::CpComm::AllGather) {
    // Every rank's keys and values are in: the whole attention now, all of the gather exposed.
    st.cp_exposed_ns += world_.engine().now().count_ns() - st.cp_ring_start_ns;
    schedule(kCompute, slowed(st.cp_attention_ns, first, n), static_cast<uint32_t>(sl));
    return;
  }
  // Ring attention: the last block arrived; its attention (one of cp) runs after it.
  schedule(kCpTail, slowed(st.cp_attention_ns / c_.cp, first, n), static_cast<uint32_t>(sl));
}

void TrainingJob::cp_part_done(int sl, bool ring) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  const int64_t now = world_.engine().now().count_ns();
  (ring ? st.cp_ring_end_ns : st.cp_compute_end_ns) = now;
  if (--st.cp_wait > 0) return;
  if (c_.cp_comm == TrainingConfig::CpComm::P2P) st.cp_exposed_ns += std::max<int64_t>(0, st.cp_ring_end_ns - st.cp_compute_end_ns);
  if (zero3() && z3_layer_done(sl)) return;  // the op's next layer started, or waits for its gather
  tp_allreduces(sl);
}

}  // namespace sluice::training::detail
