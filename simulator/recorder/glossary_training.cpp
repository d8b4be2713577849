// The metrics glossary: a training job's report (training_report.cpp), at `training.` in a
// one-job run and at `workloads.<name>.` in a world. See glossary.h for the path rules.
#include "recorder/glossary.h"

namespace sluice {

std::span<const MetricDef> training_metric_defs() {
  static const MetricDef kDefs[] = {
      // The job.
      {"training", "job.model", "text", "The trained model's catalog name."},
      {"training", "job.hardware", "text", "The accelerator's catalog name."},
      {"training", "job.devices", "count", "Devices the job runs on: tp x cp x pp x dp."},
      {"training", "job.tp", "count", "Tensor-parallel degree: devices each pipeline stage's layers are split over."},
      {"training", "job.pp", "count", "Pipeline-parallel degree: stages the model is cut into."},
      {"training", "job.dp", "count", "Data-parallel degree: pipeline replicas, each on its own share of the batch."},
      {"training", "job.cp", "count", "Context-parallel degree: ranks each sequence is split over in every stage (1: off)."},
      {"training", "job.schedule", "text", "The pipeline schedule: gpipe or 1f1b (interleaved 1F1B when virtual_stages > 1)."},
      {"training", "job.micro_batches", "count", "Micro-batches per pipeline replica per iteration."},
      {"training", "job.micro_batch_size", "count", "Sequences per micro-batch."},
      {"training", "job.sequence", "tokens", "Tokens per sequence."},
      {"training", "job.recompute", "bool", "True with full activation recomputation (one more forward inside the backward)."},
      {"training", "job.dp_algorithm", "text", "The collective algorithm of the data-parallel gradient reduction."},
      {"training", "job.tp_algorithm", "text", "The collective algorithm of the tensor-parallel all-reduces (ring, NVLS or auto)."},
      {"training", "job.virtual_stages", "count", "Model chunks each pipeline rank holds (interleaved 1F1B); 1 is plain 1F1B or GPipe."},
      {"training", "job.zero", "count",
       "ZeRO stage over the data-parallel replicas: 0 none, 1 optimizer state sharded, 2 gradients sharded too."},
      {"training", "job.cost_source", "text",
       "Where compute times come from: measured calibration tables, tables derived from another device's and scaled, or the roofline model."},
      {"training", "job.backward", "text", "How the backward pass is costed, in words (twice the forward's time)."},

      // Iterations and efficiency.
      {"training", "iterations", "count", "Iterations completed and kept (those a failure lost are not counted)."},
      {"training", "iteration_s[]", "s", "Each iteration's time, from its start to the end of its optimizer step (listed up to 1000 iterations)."},
      {"training", "iteration_s_runs[][]", "s / count",
       "Iteration times of a long run as runs of equal times: a [seconds, iterations] pair each, in order (instead of iteration_s)."},
      {"training", "iteration_s_mean", "s", "Mean iteration time."},
      {"training", "tokens_per_s", "tokens/s",
       "Training throughput: tokens per iteration (micro_batch_size x sequence x micro_batches x dp) / mean iteration time."},
      {"training", "mfu", "fraction",
       "Model FLOPs utilization: model FLOPs per iteration (6 x active parameters x tokens + 12 x layers x hidden x sequence x tokens; "
       "latent attention: 6 x layers x sequence x heads x (head_dim + rope + v_head_dim) x tokens in place of the 12 x ... term) / "
       "(mean iteration time x devices x bf16 peak FLOP/s)."},
      {"training", "bubble_fraction", "fraction",
       "Pipeline bubble as simulated: mean over stages of 1 - the stage's busy time / the forward-backward span, averaged over iterations."},
      {"training", "bubble_textbook", "fraction",
       "The textbook bubble (K-1) / (v x m + K-1) for K stages, v virtual stages and m micro-batches (times slices), to compare with bubble_fraction."},
      {"training", "stage_busy_fraction[]", "fraction",
       "Per pipeline stage (of replica 0): busy time over the iteration's time, for the last iteration."},
      {"training", "per_micro_batch_ms.forward", "ms", "Forward compute of one micro-batch on the slowest stage (all its chunks and slices)."},
      {"training", "per_micro_batch_ms.backward", "ms", "Backward compute of one micro-batch on the slowest stage (all its chunks and slices)."},
      {"training", "dp_allreduce_ms", "ms",
       "Mean per iteration of the data-parallel gradient reduction's exposed time: from the last backward to the last gradient reduced."},
      {"training", "optimizer_ms", "ms",
       "The optimizer step: the optimizer state of the parameters a device updates (its shard under ZeRO) streamed at HBM bandwidth."},
      {"training", "flows", "count", "Flows the job put on the fabric (all its transfers, every time they happened)."},

      // Memory.
      {"training", "memory_per_device.weights_bytes", "bytes", "Weights per device on the heaviest stage."},
      {"training", "memory_per_device.gradients_bytes", "bytes", "Gradients per device on the heaviest stage (sharded under ZeRO-2)."},
      {"training", "memory_per_device.optimizer_bytes", "bytes", "Optimizer state per device on the heaviest stage (sharded under ZeRO-1 and up)."},
      {"training", "memory_per_device.activations_bytes", "bytes",
       "Activations per device held at once on the heaviest stage (all micro-batches under GPipe, up to pp under 1F1B)."},
      {"training", "memory_per_device.total_bytes", "bytes", "Weights + gradients + optimizer state + activations per device."},
      {"training", "memory_per_device.capacity_bytes", "bytes", "The device's HBM capacity."},

      // Mixture of experts.
      {"training", "context_parallel.cp", "count", "Context-parallel ranks per (replica, stage): each sequence split over them, ring attention between them."},
      {"training", "context_parallel.tokens_per_rank", "tokens", "Tokens of each sequence one context-parallel rank holds (its two chunks): sequence / cp."},
      {"training", "context_parallel.comm", "text", "How keys and values move: p2p (ring attention, overlapped with attention) or allgather (gathered first, exposed)."},
      {"training", "context_parallel.attention_ms_per_micro_batch", "ms",
       "The attention in one micro-batch's forward on the pipeline rank with the most (its slowest CP rank's): what a p2p ring hides under."},
      {"training", "context_parallel.ring_bytes_per_device", "bytes",
       "Keys and values one device sends around its context-parallel rings per iteration ((cp-1)/cp of the sequence's per forward, twice per backward, three times recomputing)."},
      {"training", "context_parallel.ring_exposed_ms", "ms",
       "Mean per iteration: the time key/value exchanges held ops past their compute (p2p) or before their attention (allgather), summed over the ops of replica 0's pipeline rank with the most."},
      {"training", "context_parallel.ring_exposed_share", "fraction", "ring_exposed_ms over the mean iteration time."},
      {"training", "moe.expert_parallel", "count", "Expert-parallel degree: data-parallel replicas (with context parallelism, data-parallel x context-parallel ranks) the experts are spread over (1: every replica holds all)."},
      {"training", "moe.routing", "text", "The model of how tokens pick experts: uniform or zipf."},
      {"training", "moe.alltoall_overlap", "bool",
       "True when an op's all-to-alls run under the stage's next op (a forward beside a backward; moe.alltoall_overlap)."},
      {"training", "moe.token_dispatcher", "text",
       "What the all-to-alls carry: flex (a token once per device its experts are on, DeepEP) or alltoall (a row per token and expert, Megatron-Core's alltoall dispatcher)."},
      {"training", "moe.active_parameters", "parameters", "Parameters one token passes through (its experts and the dense part); MFU counts these."},
      {"training", "moe.alltoall_ms", "ms",
       "The MoE layers' all-to-alls per iteration on the busiest expert-parallel group and pipeline rank, mean over iterations (with "
       "alltoall_overlap, the time any of them is in flight, rounds out together counted once, part of it under compute)."},
      {"training", "moe.alltoall_share", "fraction", "alltoall_ms over the mean iteration time."},
      {"training", "moe.alltoall_bytes_per_device", "bytes",
       "Bytes one device's dispatches and combines address per iteration (forward, backward and recomputation; its own experts' share included)."},
      {"training", "moe.expert_dp_bytes_per_device", "bytes",
       "Expert-gradient bytes per device reduced over the expert-data-parallel group (the replicas holding the same experts)."},

      // Token slicing (TeraPipe).
      {"training", "slicing.policy", "text", "How each sequence is cut into token slices for the pipeline: none, uniform or terapipe."},
      {"training", "slicing.slices", "count", "Slices per sequence."},
      {"training", "slicing.tokens[]", "tokens", "Each slice's length, in order."},
      {"training", "slicing.granularity", "tokens", "Slice lengths are multiples of this many tokens."},
      {"training", "slicing.model_pass_ms", "ms",
       "The formula's forward-backward pass time for the chosen slices: m x sum of slice times + (K-1) x the longest slice time."},
      {"training", "slicing.unsliced_model_pass_ms", "ms", "The same formula with each sequence as one slice."},
      {"training", "slicing.model_speedup", "ratio", "unsliced_model_pass_ms / model_pass_ms."},
      {"training", "slicing.bubble_model", "fraction", "The bubble the formula predicts: (K-1) x the longest slice time / model_pass_ms."},
      {"training", "slicing.schedule_pass_ms", "ms",
       "terapipe: the chosen slicing's forward-backward phase as the schedule runs it (0 under other policies)."},
      {"training", "slicing.best_uniform_schedule_pass_ms", "ms", "terapipe: the same for the best uniform slicing (0 under other policies)."},
      {"training", "slicing.best_uniform_slices", "count", "terapipe: the slice count of the best uniform slicing (0 under other policies)."},
      {"training", "slicing.dp_candidates", "count", "terapipe: distinct t_max candidates of TeraPipe's dynamic program."},
      {"training", "slicing.dp_evaluated", "count", "terapipe: dynamic programs run before the early stop."},

      // Failures.
      {"training", "faults.failures", "count", "Failures that stopped the job (a device it uses went down)."},
      {"training", "faults.restarts", "count", "Times the job trained again after a failure."},
      {"training", "faults.slices_reformed", "count", "Times the job's TPU slice was re-formed from healthy cubes instead of waiting for a repair."},
      {"training", "faults.checkpoints", "count", "Checkpoints written."},
      {"training", "faults.useful_s", "s", "Time of work kept: iterations computed and not lost."},
      {"training", "faults.lost_s", "s", "Work lost to failures: the time since the last checkpoint at each failure."},
      {"training", "faults.checkpoint_s", "s", "Time spent writing checkpoints."},
      {"training", "faults.spare_servers", "count", "Hot spare servers the job holds idle (recovery.spare_servers)."},
      {"training", "faults.spare_swaps", "count", "Failed servers swapped for a healthy spare, so the job restarted without waiting for a repair."},
      {"training", "faults.checkpoint_bytes", "B",
       "One checkpoint's bytes, every device's share together: the weights and fp32 Adam state once (checkpoint_to: storage)."},
      {"training", "faults.checkpoint_write_s_mean", "s",
       "Mean time of a completed checkpoint write: its flows to the storage servers, to the last byte (checkpoint_to: storage)."},
      {"training", "faults.recovering_s", "s", "Time from each failure to training again (waiting for devices, restart)."},
      {"training", "faults.wall_s", "s", "The job's wall time, from its start to done (or the end of the run)."},
      {"training", "faults.goodput", "fraction", "Useful work over wall time: useful_s / wall_s."},
      {"training", "faults.availability", "fraction", "1 - recovering_s / wall_s: the share of wall time the job could train."},
      {"training", "faults.time_to_recover_s_mean", "s", "Mean time from a failure to training again."},
      {"training", "faults.failed", "bool", "True when the job stopped for good (a transfer made no progress for collective_timeout)."},
      {"training", "faults.failure_reason", "text", "Why the job stopped for good; empty when it did not."},
      {"training", "faults.by_cause.*.interruptions", "count", "Interruptions by this cause (the fault process, named by cause, that stopped the job)."},
      {"training", "faults.by_cause.*.lost_s", "s", "Work this cause's interruptions lost."},
      {"training", "faults.by_cause.*.recovering_s", "s", "Time from this cause's interruptions to training again."},
      {"training", "faults.by_cause.*.cost_s", "s", "What this cause cost: lost_s + recovering_s."},
  };
  return kDefs;
}

}  // namespace sluice
