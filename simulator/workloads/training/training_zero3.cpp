// ZeRO stage 3 (FSDP's full sharding). (An op's layers are equal shares of its compute: the last
// stage's loss and LM head are spread over its layers, not timed after the last one.) Each
// replica holds 1/dp of its stage's parameters (1/(dp x cp) with context parallelism: every CP
// rank holds the stage's parameters, so they shard too), so every forward and backward op
// all-gathers them over the data-parallel replicas layer by layer (FSDP wraps each transformer
// block as a unit), and reduce-scatters each layer's gradients as its
// backward ends (each replica keeps the sum of its shard); Adam's step runs on the shard and no
// all-gather follows it. An op's compute runs in its layers' order, each layer once its own gather
// is done; the gathers of a stage run in that order, one at a time (FSDP's all-gathers share one
// stream), up to zero3_prefetch layers ahead: layer k + p's gather may start once every replica
// has started layer k (FSDP's forward and backward prefetch is p = 1; 1 + p layers' parameters
// held at most, as training_memory.cpp counts), across op boundaries too. So only the first
// layer's gather of an iteration and the last one's reduce-scatter stand alone; the rest hide under
// compute where it is longer, and where it is not the op waits for them layer by layer (time
// not counted busy). A layer's share of an op's parameters and compute is 1/layers of them (the
// embedding's and the LM head's ride with the stage's layers, not as units of their own). With
// context parallelism a layer is also its share of the op's ring attention: its GEMMs, then its
// keys and values around the CP ring beside its attention (1/layers of the op's ring bytes, one
// layer's latencies), and its gradients are reduce-scattered once both its attention and its ring
// are done (training_cp.cpp); the gathers' unit is the layer, as without it.
// Interleaved, an op is one of the rank's v chunks: its layers move 1/v of the rank's parameters
// (the chunks taken as equal). With expert parallelism the shards follow ZeRO 1 and 2's: the
// dense parameters over all dp replicas, a device's experts over the dp x cp / ep ranks holding
// the same ones (none when ep = dp x cp), each layer's gather and reduce-scatter one collective
// per group.
#include "workloads/training/training_job.h"

#include <algorithm>

namespace sluice::training::detail {

bool TrainingJob::zero3() const { return c_.zero >= 3 && c_.dp * c_.cp > 1; }

void TrainingJob::z3_begin_iteration() {
  const size_t ops = stages_[0].order.size();
  if (z3_base_.empty()) {  // units per op: the layers its chunk runs (the schedule is the same every iteration)
    z3_base_.assign(static_cast<size_t>(c_.pp) * (ops + 1), 0);
    for (int s = 0; s < c_.pp; ++s) {
      const Stage& st = stages_[static_cast<size_t>(slot(0, s))];
      int* base = &z3_base_[static_cast<size_t>(s) * (ops + 1)];
      for (size_t j = 0; j < ops; ++j) base[j + 1] = base[j] + std::max(1, layers_run(virtual_stage(slot(0, s), st.order[j].mb)));
    }
  }
  size_t most = 0;
  for (int s = 0; s < c_.pp; ++s) most = std::max(most, static_cast<size_t>(z3_units(s)));
  z3_gathered_.assign(static_cast<size_t>(c_.pp), 0);
  z3_gather_left_.assign(static_cast<size_t>(c_.pp), 0);
  z3_started_.assign(static_cast<size_t>(c_.pp) * most, 0);
  z3_bwd_done_.assign(static_cast<size_t>(c_.pp) * most, 0);
  z3_rs_left_.assign(static_cast<size_t>(c_.pp), 0);
  z3_next_.assign(static_cast<size_t>(c_.pp), 0);
  z3_all_started_.assign(static_cast<size_t>(c_.pp), 0);
  for (int s = 0; s < c_.pp; ++s) z3_try_gather(s);
}

int TrainingJob::z3_count() const { return c_.tp * (1 + (c_.ep > 1 && expert_replicas() > 1 ? c_.ep : 0)); }

// Per tensor-parallel rank: one collective over the stage's data-parallel replicas and their
// context-parallel ranks (the dense parameters: FSDP shards over dp x cp), and with expert groups
// one over each expert-data-parallel group (its experts); each a layer's share of the op's chunk.
int TrainingJob::z3_collectives(net::CollectiveKind kind, int s, size_t op, uint64_t salt, const std::function<void()>& done) {
  const bool expert_groups = c_.ep > 1 && expert_replicas() > 1;
  // Interleaved 1F1B: an op runs one of the rank's v chunks, and moves that chunk's share.
  const double share = 1.0 / (c_.virtual_stages * static_cast<double>(z3_unit(s, op + 1) - z3_unit(s, op)));
  int n = 0;
  auto one = [&](std::vector<int> group, double bytes, uint64_t sa) {
    ++n;
    start_dp_collective(kind, std::move(group), bytes, sa, true, [done](Engine&) { done(); });
  };
  for (int k = 0; k < c_.tp; ++k) {
    const uint64_t sa = salt * 131 + static_cast<uint64_t>(k);
    one(dp_group(s, k), stage_dense_bytes_[static_cast<size_t>(s)] * share, sa);
    for (int j = 0; expert_groups && j < c_.ep; ++j)
      one(expert_dp_group(j, s, k), stage_expert_bytes_[static_cast<size_t>(s)] * share, sa * 67 + static_cast<uint64_t>(j) + 3);
  }
  return n;
}

size_t TrainingJob::z3_op(int s, int unit) const {
  const size_t ops = stages_[0].order.size();
  const int* base = &z3_base_[static_cast<size_t>(s) * (ops + 1)];
  return static_cast<size_t>(std::upper_bound(base, base + ops + 1, unit) - base) - 1;
}

void TrainingJob::z3_try_gather(int s) {
  const auto i = static_cast<size_t>(s);
  const int u = z3_next_[i];
  if (z3_gather_left_[i] > 0 || u >= z3_units(s) || u >= z3_all_started_[i] + c_.zero3_prefetch) return;
  ++z3_next_[i];
  z3_gather(s, u);
}

void TrainingJob::z3_gather(int s, int unit) {
  z3_gather_left_[static_cast<size_t>(s)] = z3_count();
  z3_collectives(net::CollectiveKind::AllGather, s, z3_op(s, unit), (static_cast<uint64_t>(s) << 33) + static_cast<uint64_t>(unit) * 2,
                 [this, s, unit] {
                   if (--z3_gather_left_[static_cast<size_t>(s)] > 0) return;
                   z3_gathered_[static_cast<size_t>(s)] = unit + 1;
                   z3_try_gather(s);
                   for (int d = 0; d < c_.dp; ++d) try_run(slot(d, s));
                 });
}

bool TrainingJob::z3_ready(int sl, int unit) const { return unit < z3_gathered_[static_cast<size_t>(sl % c_.pp)]; }

void TrainingJob::z3_begin_op(int sl, int64_t ns) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  const int s = sl % c_.pp;
  st.segs = z3_unit(s, st.running + 1) - z3_unit(s, st.running);
  st.seg = 0;
  st.seg_total_ns = ns;
  st.seg_wait = false;
  st.op_wait_ns = 0;
  z3_layer(sl);
}

void TrainingJob::z3_unit_started(int s, int unit) {
  // (Every replica starts its units in order, so the counts fill up in order: a prefix.)
  if (++z3_started_[z3_at(s, unit)] == c_.dp) {
    z3_all_started_[static_cast<size_t>(s)] = unit + 1;
    z3_try_gather(s);
  }
}

// Layer st.seg of the running op starts: the next unit's gather goes out once every replica has
// started this one, and the layer computes its share of the op (integer parts summing to it).
void TrainingJob::z3_layer(int sl) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  z3_unit_started(sl % c_.pp, z3_unit(sl % c_.pp, st.running) + st.seg);
  const int64_t n = st.segs;
  auto share = [&](int64_t total) { return total * (st.seg + 1) / n - total * st.seg / n; };
  const int64_t ns = share(st.seg_total_ns);
  if (cp()) {  // its GEMMs, then its ring beside its attention (cp_begin: slowed there, as a whole op's are)
    cp_begin(sl, ns, std::min(ns, share(st.seg_attention_ns)));
    return;
  }
  if (c_.alltoall_overlap) {  // counted as it runs: slower while a released op's all-to-alls fly
    st.work_left_ns = static_cast<double>(ns);
    st.work_at_ns = world_.engine().now().count_ns();
  }
  schedule(kCompute, ns, static_cast<uint32_t>(sl));
}

bool TrainingJob::z3_layer_done(int sl) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  const int s = sl % c_.pp;
  // This layer's gradients (with context parallelism once its ring's part is done too: cp_part_done).
  if (!st.order[st.running].forward) z3_backward_done(s, z3_unit(s, st.running) + st.seg);
  if (++st.seg >= st.segs) return false;
  if (z3_ready(sl, z3_unit(s, st.running) + st.seg)) {
    z3_layer(sl);
  } else {
    st.seg_wait = true;
    st.seg_wait_since_ns = world_.engine().now().count_ns();
  }
  return true;
}

void TrainingJob::z3_resume(int sl) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  if (!z3_ready(sl, z3_unit(sl % c_.pp, st.running) + st.seg)) return;
  st.seg_wait = false;
  // Not busy; but beside a released op's all-to-alls a stage counts as busy, as between ops.
  if (st.released < 0) st.op_wait_ns += world_.engine().now().count_ns() - st.seg_wait_since_ns;
  z3_layer(sl);
}

// Every replica finished unit's backward: its gradients are reduce-scattered.
void TrainingJob::z3_backward_done(int s, int unit) {
  if (++z3_bwd_done_[z3_at(s, unit)] < c_.dp) return;
  z3_rs_left_[static_cast<size_t>(s)] += z3_count();
  z3_collectives(net::CollectiveKind::ReduceScatter, s, z3_op(s, unit), (static_cast<uint64_t>(s) << 33) + static_cast<uint64_t>(unit) * 2 + 1, [this, s] {
    if (--z3_rs_left_[static_cast<size_t>(s)] == 0 && stage_bwd_done_[static_cast<size_t>(s)] == c_.dp) stage_reduced(s);
  });
}

}  // namespace sluice::training::detail
