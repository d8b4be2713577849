// A training job on the world: iterations of a catalog model with tensor parallelism inside
// each pipeline stage, pipeline stages under GPipe or 1F1B over micro-batches, and data
// parallelism across pipeline replicas. Compute comes from the cost model; every transfer
// (TP all-reduces, activations and gradients between stages, the DP gradient all-reduce) is a
// flow on the world's fabric, every time it happens.
#pragma once
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hardware/cost_model.h"
#include "network/collective.h"
#include "workloads/training/terapipe.h"
#include "world/world.h"

namespace sluice::training {

enum class Schedule { GPipe, OneFOneB };

// Token-level slicing of each sequence (TeraPipe): slices of a micro-batch enter the pipeline
// one after another (GPipe order: every forward, then the backwards in reverse slice order).
struct SlicingConfig {
  SlicingPolicy policy = SlicingPolicy::None;
  int slices = 1;          // uniform: this many slices
  int granularity = 8;     // slice lengths in steps of this many tokens
  double candidate_gap = 1e-3;  // terapipe: see TeraPipeOptions
};

struct TrainingConfig {
  ModelSpec model;
  HardwareSpec hardware;
  int tp = 1, pp = 1, dp = 1;
  Schedule schedule = Schedule::OneFOneB;
  int micro_batches = 1;       // m per pipeline replica per iteration
  int micro_batch_size = 1;    // sequences per micro-batch
  // ZeRO stage over the data-parallel replicas: 0 none; 1 the optimizer state sharded
  // (Megatron's distributed optimizer: gradients reduce-scattered, each replica updates its
  // shard, the parameters all-gathered); 2 the gradients sharded too (memory only: the same
  // traffic as 1).
  int zero = 0;
  // Expert parallelism of a mixture-of-experts model (Megatron-Core's EP): the experts spread
  // over groups of this many consecutive data-parallel replicas (1: every replica holds every
  // expert). Every MoE layer's forward and backward moves its tokens by two all-to-alls inside
  // the group; expert gradients are all-reduced over the expert-data-parallel group (the dp / ep
  // replicas holding the same experts), the rest over all dp (CostModel: MoeOptions::data_parallel_ep).
  int ep = 1;
  MoeOptions::Routing routing = MoeOptions::Routing::Uniform;  // uniform or zipf over the experts
  double zipf_s = 1.0;
  // Interleaved 1F1B (Megatron): each pipeline rank holds this many model chunks, the model
  // cut into pp x v virtual stages (virtual stage j on rank j mod pp); 1: plain 1F1B.
  int virtual_stages = 1;
  int sequence = 2048;
  int iterations = 1;          // 0: runs as long as the other workloads
  bool recompute = false;      // full activation recomputation (one more forward in the backward)
  net::CollectiveKind dp_algorithm = net::CollectiveKind::AllReduceRing;
  net::CollectiveKind tp_algorithm = net::CollectiveKind::AllReduceRing;  // ring, NVLS or auto
  std::string tables_dir;
  std::shared_ptr<const HardwareSpec> tables_device;  // derived tables: the device they were measured on
  std::string cost_source;                            // how it is costed, in words (CostSource::describe)
  double optimizer_bytes_per_param = 28;  // Adam, mixed precision: read and write fp32 master, m, v and bf16 weight
  // Failures: a failure stops the job; it restarts from its last checkpoint.
  int64_t checkpoint_interval_ns = 0;  // 0: no checkpoints (a failure loses everything since the start)
  int64_t checkpoint_write_ns = 0;     // the job pauses this long to write one
  int64_t restart_ns = 0;              // from healthy devices to training again (reload, re-init)
  int64_t collective_timeout_ns = 0;   // a transfer making no progress this long fails the job (its group is cut off)
  std::array<int, 3> slice_cubes{0, 0, 0};  // the TPU slice shape in cubes when placed as a slice (it may re-form there)
  bool slice_twisted = false;               // and whether it is wired twisted where its shape allows (place.twisted)
  SlicingConfig slicing;
};

// Parameters one device holds: its tp x pp share of the model, with 1/ep of the routed experts.
double params_per_device(const TrainingConfig& c);
// Memory one device of a stage holds (bytes).
struct TrainingMemory {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};
// The heaviest stage's memory per device; activations for the micro-batches a stage holds at
// once (GPipe: all m; 1F1B: at most pp on the first stage), after Korthikanti et al. (2022):
// s·b·h·(34 + 5·a·s/h)/tp per layer, or 2·s·b·h per layer with full recomputation.
TrainingMemory training_memory(const TrainingConfig& c);
// The checks a job's shape must pass, each failing at its key: tensor parallelism divides the
// heads (in `parallel`), no more stages than layers, the sequence within the context (in `job`).
void check_training_shape(const TrainingConfig& c, const Params& job, const Params& parallel);

// What one job measured.
struct TrainingResults {
  std::vector<double> iteration_s;
  double tokens_per_iteration = 0;
  double model_flops_per_iteration = 0;  // 6·N·T + 12·layers·hidden·seq·T (Megatron's count, causal attention included)
  int devices = 0;
  double peak_flops_per_device = 0;
  std::vector<double> stage_busy_fraction;  // replica 0, per stage: compute time / iteration time
  double bubble_fraction = 0;               // mean over stages of 1 - compute / pipeline span (F/B phase only)
  double textbook_bubble = 0;               // (K-1)/(m+K-1)
  double forward_ms = 0, backward_ms = 0;   // one micro-batch on the slowest stage (compute only; all its slices)
  // Token slicing: the slices' lengths, the formula's pass time T = m sum a + (K-1) max t of
  // the m micro-batches (t: the slowest stage's forward + backward of a slice plus its
  // hand-offs; a: what a stage is held per slice, see plan_slices) for these slices and for the
  // whole sequence as one, and the DP's work.
  std::vector<int> slice_tokens;
  double slice_model_ms = 0, unsliced_model_ms = 0;
  double slice_bubble_model = 0;            // (K-1) max t / T: the bubble the formula predicts for one micro-batch
  // TeraPipe: the chosen slicing's forward/backward phase as the schedule runs it (every stage's
  // ops in order, each after its input hand-off, tensor-parallel all-reduces in line; no other
  // traffic), and the best uniform slicing's: the DP's candidates and every uniform slicing are
  // judged by it, so no uniform slicing the simulator would run faster is passed over.
  double slice_schedule_ms = 0, best_uniform_schedule_ms = 0;
  int best_uniform_slices = 0;
  long dp_candidates = 0, dp_evaluated = 0;
  double dp_allreduce_ms = 0;               // mean per iteration, from the last backward to the last gradient
  // Expert parallelism: the MoE layers' all-to-alls, mean per iteration on replica 0's busiest
  // pipeline rank (each exchange from its group's last arrival to its end), and the bytes one
  // device's dispatches and combines address per iteration (forward, backward, and the
  // recomputed forward; the share bound for its own experts, which stays on it, included).
  double alltoall_ms = 0, alltoall_bytes_per_device = 0;
  double expert_dp_bytes_per_device = 0;    // of dp_bytes_per_device, the expert gradients (over dp / ep replicas)
  double optimizer_ms = 0;
  TrainingMemory memory;
  double dp_bytes_per_device = 0;
  uint64_t flows = 0;
  int64_t fast_forwarded = 0;     // iterations counted by the steady-state fast-forward (not a metric: results do not depend on it)
  // Under failures (all zero without them).
  bool faults = false;            // the world has fault processes
  int failures = 0, restarts = 0, reformed = 0, checkpoints = 0;
  double useful_s = 0;            // iterations kept (computed and not lost)
  double lost_s = 0;              // work lost: since the last checkpoint, at each failure
  double checkpoint_s = 0;        // writing checkpoints
  double recovering_s = 0;        // from a failure to training again (waiting for devices, restart)
  double wall_s = 0;              // from start to done (or the end of the run)
  std::vector<double> recover_s;  // each failure's time to recover
  // The same per cause: the fault process whose failure stopped the job (processes named by
  // cause, as in scenarios/training-llama3-faults.yaml).
  struct CauseCost {
    int interruptions = 0;
    double lost_s = 0, recovering_s = 0;
  };
  std::map<std::string, CauseCost> by_cause;
  bool failed = false;            // stopped for good (a stalled collective)
  std::string failure_reason;
};

// A training job on `devices` of `world` (placed and claimed by the caller, in rank order):
// for studies that place jobs themselves (workloads/cluster/pod_study.cpp). After
// world.run(), training_results() gives what it measured.
std::unique_ptr<Workload> make_training_job(const std::string& name, TrainingConfig cfg, World& world, std::vector<int> devices);
// The results of a job made by make_training_job; throws std::invalid_argument for another workload.
const TrainingResults& training_results(const Workload& job);

}  // namespace sluice::training
