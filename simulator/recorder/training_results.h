// What a training job hands the recorder: plain figures (its results) and a plain description
// of the job (its setup), so that the report needs nothing from the workload's own headers.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sluice::training {

// Memory one device of a stage holds (bytes), by what holds it.
struct TrainingMemory {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};

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
  double loss_ms = 0;  // one micro-batch's cross-entropy on the last stage, forward and backward (in its forward_ms and backward_ms)
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
  // Expert parallelism: the MoE layers' all-to-alls, mean per iteration on the busiest EP group
  // and pipeline rank (each exchange from its group's last arrival to its end), and the bytes one
  // device's dispatches and combines address per iteration (forward, backward, and the
  // recomputed forward; the share bound for its own experts, which stays on it, included).
  double alltoall_ms = 0, alltoall_bytes_per_device = 0;
  double expert_dp_bytes_per_device = 0;    // the expert gradients (over dp / ep replicas), the most over the pipeline ranks
  // Context parallelism: the time the key/value rings ran past their ops' compute, summed over
  // an iteration's ops on replica 0's busiest pipeline rank (mean per iteration), and the bytes
  // one device sends around its rings per iteration.
  double cp_exposed_ms = 0, cp_ring_bytes_per_device = 0;
  double cp_attention_ms = 0;  // of forward_ms, the attention (a backward's: twice it, three times recomputing)
  double optimizer_ms = 0;
  TrainingMemory memory;
  double dp_bytes_per_device = 0;
  double embedding_grads_bytes_per_device = 0;  // the word embedding's gradient all-reduced between the first and last pipeline rank
  uint64_t flows = 0;
  int64_t fast_forwarded = 0;     // iterations counted by the steady-state fast-forward (not a metric: results do not depend on it)
  int64_t checkpoints_replayed = 0;  // checkpoint writes counted at once (not a metric)
  int64_t tape_instants = 0, tape_flows = 0;  // the last kept tape's (not metrics)
  double tape_mib = 0;
  int64_t partials_replayed = 0;  // iterations a failure cut short, counted up to it from the proven iteration's tape (not a metric)
  int64_t resumed = 0;            // restarts (and iterations after an interruption) that took a proven steady iteration as their last (not a metric either)
  // Under failures (all zero without them).
  bool faults = false;            // the world has fault processes
  int failures = 0, restarts = 0, reformed = 0, checkpoints = 0;
  double useful_s = 0;            // iterations kept (computed and not lost)
  double lost_s = 0;              // work lost: since the last checkpoint, at each failure
  double checkpoint_s = 0;        // writing checkpoints
  int spare_servers = 0, spare_swaps = 0;  // hot spares held, and failed servers swapped for one
  bool checkpoint_storage = false;  // written to the storage servers as flows (else a fixed pause)
  double checkpoint_bytes = 0;    // one checkpoint's bytes, all devices together (storage only)
  double checkpoint_write_s = 0;  // the completed writes' time together (storage only)
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

// The job as the report names it: names and sizes, no workload types.
struct TrainingSetup {
  std::string model, hardware, cost_source;
  std::string precision = "bf16";  // the GEMMs' (TrainingConfig::precision)
  double hbm_bytes = 0;
  int tp = 1, pp = 1, dp = 1, ep = 1, cp = 1, virtual_stages = 1, zero = 0, zero3_prefetch = 1;
  std::string cp_comm;  // context parallelism's key/value exchange: "p2p" or "allgather"
  std::string schedule;  // "gpipe" or "1f1b"
  int micro_batches = 1, micro_batch_size = 1, sequence = 0;
  bool recompute = false;
  int mtp_layers = 0;  // multi-token prediction modules trained
  bool loss_fusion = false;  // the cross-entropy fused (Megatron's cross_entropy_loss_fusion)
  bool dropout = true;       // dropout masks kept (TrainingConfig::dropout_masks)
  std::vector<int> stage_layers;  // decoder layers on each pipeline rank (its chunks' together; MTP modules not counted)
  std::string dp_algorithm, tp_algorithm;
  bool moe = false;
  std::string routing;  // the experts' load: "uniform" or "zipf"
  bool alltoall_overlap = false;  // moe.alltoall_overlap
  std::string token_dispatcher;   // moe.token_dispatcher: "flex" or "alltoall"
  double active_parameters = 0;
  std::string slicing_policy;  // "none", "uniform" or "terapipe"
  int slicing_granularity = 0;
};

}  // namespace sluice::training
