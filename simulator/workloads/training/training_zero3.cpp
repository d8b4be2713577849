// ZeRO stage 3 (FSDP's full sharding): each replica holds 1/dp of its stage's parameters (1/(dp
// x cp) with context parallelism: every CP rank holds the stage's parameters, so they shard too), so
// every forward and backward op first all-gathers them over the data-parallel replicas, and
// every backward op's gradients are reduce-scattered at once (each replica keeps the sum of its
// shard); Adam's step runs on the shard and no all-gather follows it. The gathers of a stage
// run in op order, one ahead: op j + 1's gather starts once every replica has started op j
// (FSDP's prefetch; two ops' parameters held at most), so a gather hides under the op before
// it when the compute is longer. Timed per stage op (every layer's gather as one collective);
// memory counts FSDP's buffer of two layers (training_memory.cpp). Interleaved, an op is one of
// the rank's v chunks: its gather and reduce-scatter move 1/v of the rank's parameters (the
// chunks taken as equal: the embedding's and the LM head's are not told apart). With expert parallelism the
// shards follow ZeRO 1 and 2's: the dense parameters over all dp replicas, a device's experts
// over the dp x cp / ep ranks holding the same ones (none when ep = dp x cp), each op's gather and
// reduce-scatter one collective per group.
#include "workloads/training/training_job.h"

namespace sluice::training::detail {

bool TrainingJob::zero3() const { return c_.zero >= 3 && c_.dp * c_.cp > 1; }

void TrainingJob::z3_begin_iteration() {
  const size_t ops = stages_[0].order.size();
  z3_gathered_.assign(static_cast<size_t>(c_.pp), 0);
  z3_gather_left_.assign(static_cast<size_t>(c_.pp), 0);
  z3_started_.assign(static_cast<size_t>(c_.pp) * ops, 0);
  z3_bwd_done_.assign(static_cast<size_t>(c_.pp) * ops, 0);
  z3_rs_left_.assign(static_cast<size_t>(c_.pp), 0);
  for (int s = 0; s < c_.pp; ++s) z3_gather(s, 0);
}

int TrainingJob::z3_count() const { return c_.tp * (1 + (c_.ep > 1 && expert_replicas() > 1 ? c_.ep : 0)); }

// Per tensor-parallel rank: one collective over the stage's data-parallel replicas and their
// context-parallel ranks (the dense parameters: FSDP shards over dp x cp), and with expert
// groups one over each expert-data-parallel group (its experts).
int TrainingJob::z3_collectives(net::CollectiveKind kind, int s, uint64_t salt, const std::function<void()>& done) {
  const bool expert_groups = c_.ep > 1 && expert_replicas() > 1;
  int n = 0;
  auto one = [&](std::vector<int> group, double bytes, uint64_t sa) {
    ++n;
    start_dp_collective(kind, std::move(group), bytes, sa, true, [done](Engine&) { done(); });
  };
  for (int k = 0; k < c_.tp; ++k) {
    const uint64_t sa = salt * 131 + static_cast<uint64_t>(k);
    // Interleaved 1F1B: an op runs one of the rank's v chunks, and moves that chunk's share.
    const double v = c_.virtual_stages;
    one(dp_group(s, k), stage_dense_bytes_[static_cast<size_t>(s)] / v, sa);
    for (int j = 0; expert_groups && j < c_.ep; ++j)
      one(expert_dp_group(j, s, k), stage_expert_bytes_[static_cast<size_t>(s)] / v, sa * 67 + static_cast<uint64_t>(j) + 3);
  }
  return n;
}

void TrainingJob::z3_gather(int s, size_t op) {
  z3_gather_left_[static_cast<size_t>(s)] = z3_count();
  z3_collectives(net::CollectiveKind::AllGather, s, (static_cast<uint64_t>(s) * 65537 + op) * 2, [this, s, op] {
    if (--z3_gather_left_[static_cast<size_t>(s)] > 0) return;
    z3_gathered_[static_cast<size_t>(s)] = static_cast<int>(op) + 1;
    for (int d = 0; d < c_.dp; ++d) try_run(slot(d, s));
  });
}

bool TrainingJob::z3_ready(int sl, size_t op) const { return static_cast<int>(op) < z3_gathered_[static_cast<size_t>(sl % c_.pp)]; }

void TrainingJob::z3_op_started(int sl, size_t op) {
  const int s = sl % c_.pp;
  const size_t ops = stages_[0].order.size();
  if (++z3_started_[static_cast<size_t>(s) * ops + op] == c_.dp && op + 1 < ops) z3_gather(s, op + 1);
}

void TrainingJob::z3_backward_done(int sl, size_t op) {
  const int s = sl % c_.pp;
  const size_t ops = stages_[0].order.size();
  if (++z3_bwd_done_[static_cast<size_t>(s) * ops + op] < c_.dp) return;
  z3_rs_left_[static_cast<size_t>(s)] += z3_count();
  z3_collectives(net::CollectiveKind::ReduceScatter, s, (static_cast<uint64_t>(s) * 65537 + op) * 2 + 1, [this, s] {
    if (--z3_rs_left_[static_cast<size_t>(s)] == 0 && stage_bwd_done_[static_cast<size_t>(s)] == c_.dp) stage_reduced();
  });
}

}  // namespace sluice::training::detail
