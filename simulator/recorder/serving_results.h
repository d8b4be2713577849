// Plain results of a serving deployment, with no serving types in them: what the workload
// (workloads/serving/serving_sim.cpp) hands the recorder (recorder/serving_report.h).
//  * One ServingRequestRecord per request, handed to a RequestSink the moment the request
//    ends (answered, rejected or failed), so records stream to disk as the run goes instead
//    of being kept for the end.
//  * One ServingResults at the end: the deployment, per-replica aggregates, counters.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

// One answered request, as requests.csv has it (times in ns since the run started).
struct ServingRequestRecord {
  uint32_t id = 0;  // the request's number in the run (arrival order of its creation)
  uint32_t conversation = 0, turn = 0;
  int32_t replica = -1;
  int64_t arrival_ns = 0, first_scheduled_ns = 0, first_token_ns = 0, last_token_ns = 0, max_gap_ns = 0;
  int32_t input_tokens = 0, history_tokens = 0, cached_tokens = 0, output_tokens = 0, preemptions = 0;
  int32_t prefix_id = -1, prefix_tokens = 0;  // the shared prefix its prompt starts with (-1: none)
  int32_t class_id = -1;                      // its request class (-1: none)
  int32_t prompt_len() const { return history_tokens + input_tokens; }
};

// Where a workload hands its requests as they end. Every request id of the run is handed
// exactly once: answered() with its record, or ended() when it got no answer (rejected as
// too long or as overload, or failed); ids still in flight at the end are never handed.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void answered(const ServingRequestRecord& r) = 0;
  virtual void ended(uint32_t id, int32_t class_id) = 0;
};

struct ServingReplicaResult {
  int64_t iterations = 0, prefill_iterations = 0, decode_iterations = 0, mixed_iterations = 0;
  int64_t busy_ns = 0;
  double cut_fraction = 0;  // of an iteration in flight at the horizon, the part past it (its weight reads are not counted)
  double batch_time_integral = 0, kv_time_integral = 0, kv_max = 0;
  int64_t max_batch = 0;
  int64_t sliced_prefills = 0, prefill_slices = 0;
  int64_t preemptions = 0;
  double swap_bytes = 0;
};

struct ServingSample {
  int64_t t_ns;
  int64_t running, waiting, swapped;
  double kv_occupancy, busy_fraction;
};

// A request class of the load, as the report names it.
struct ServingClass {
  std::string name;
  int priority = 0;
  int64_t ttft_ns = 0, tpot_ns = 0;  // its objectives (0: none)
};

// Inter-token gaps of every request, as a log histogram (the workload records them).
struct GapSummary {
  uint64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;  // ns
};

struct ServingResults {
  // The deployment.
  std::string hardware, model, topology, tp_allreduce, cost_source, d2h_source;
  int replicas = 1, tensor_parallel = 1, pipeline_parallel = 1, block_size = 16;
  double kv_bytes_per_token = 0;
  double model_parameters = 0, model_embedding_parameters = 0;  // vocab × hidden
  double peak_flops = 0, effective_flops = 0, effective_bandwidth_Bps = 0;
  std::string prefill_slicing;  // "" when prefills are not sliced
  // Memory per GPU.
  double capacity_per_gpu = 0, weights_per_gpu = 0, activation_per_gpu = 0, kv_per_gpu = 0;
  int64_t kv_tokens_per_replica = 0, blocks_per_replica = 0, blocks_per_engine = 0;
  // Requests.
  int64_t announced = 0, completed = 0, rejected_too_long = 0, rejected_overload = 0, rejected_late = 0, failed = 0;
  std::vector<ServingClass> classes;  // the load's request classes (empty: none)
  bool priority_scheduling = false;
  int64_t truncated_to_context = 0;    // requests whose drawn lengths exceeded the model's context, served truncated
  int64_t max_in_flight = 0;           // the bound on requests in flight (0: none)
  int64_t in_flight_high_water = 0;    // the most requests held at once (live request slots)
  bool truncated = false;
  bool faults = false;
  int64_t retried = 0, reprefilled = 0, replica_failures = 0, replica_down_ns = 0;
  std::vector<int64_t> outages_ns;
  // Time.
  int64_t first_arrival_ns = -1, last_delivery_ns = 0, end_ns = 0;
  uint64_t events = 0;
  int64_t fast_forwarded = 0;  // iterations run inline by the steady-decode fast-forward (the summary says so; not a metric: results do not depend on it)
  // Per engine (replica × virtual engine).
  std::vector<ServingReplicaResult> engines;
  GapSummary gaps;
  std::vector<ServingSample> samples;
  // Prefill/decode disaggregation (prefill_replicas 0: colocated): engines [0, prefill_replicas)
  // prefill, the others decode; each handed-over prompt's KV cache crossed the fabric once.
  int prefill_replicas = 0;
  // A prefill pool on devices or parallelism of its own (prefill_tensor_parallel 0: the
  // deployment's keys describe every replica).
  int prefill_tensor_parallel = 0;
  std::string prefill_hardware, prefill_scheduler, prefill_cost_source;
  double prefill_peak_flops = 0, prefill_weights_per_gpu = 0, prefill_kv_per_gpu = 0;
  int64_t prefill_kv_tokens_per_replica = 0;
  bool own_prefill_pool() const { return prefill_tensor_parallel > 0; }
  // GPUs of a fixed pool: every replica's tensor × pipeline parallel devices.
  double pool_gpus() const {
    const double per = static_cast<double>(tensor_parallel) * pipeline_parallel;
    if (!own_prefill_pool()) return static_cast<double>(replicas) * per;
    return static_cast<double>(prefill_replicas) * prefill_tensor_parallel + static_cast<double>(replicas - prefill_replicas) * per;
  }
  int64_t kv_transfers = 0;
  double kv_transfer_bytes = 0;
  GapSummary kv_transfer_time;  // from the start of the copy to its last byte (ns)
  GapSummary handoff_wait;      // from the end of the prefill to the start of the copy: waiting for decode KV blocks (ns)
  // Stages' communication on the fabric (tp > 1 or pp > 1 on a topology): their tensor-parallel
  // all-reduces and their hand-offs to the next stage, each from its start to its last flow's end.
  int64_t tp_allreduces = 0, tp_allreduce_ns = 0, stage_handoffs = 0, stage_handoff_ns = 0;
  // A mixture-of-experts model (experts 0: dense): its shape, how the deployment places and
  // reaches its experts, the routing model's device loads (max over mean of the token-expert
  // assignments each device computes: the slowest device sets an MoE layer's time), and the
  // dispatch/combine all-to-alls on the fabric (counted per MoE layer, timed per stage pass: an
  // iteration's pass through a pipeline stage, or a slice's; reported on a topology only, the
  // analytic path folds them into the step time).
  struct Moe {
    int experts = 0, experts_per_token = 0, shared_experts = 0, moe_layers = 0;
    double active_parameters = 0;
    bool expert_parallel = false;
    std::string dispatch, routing;
    int redundant_experts = 0;
    std::vector<double> device_load;  // each device's share of the assignments (expert parallelism; one entry otherwise)
    int64_t alltoalls = 0, alltoall_ns = 0, alltoall_passes = 0;
    int64_t decode_alltoalls = 0, decode_alltoall_ns = 0;    // of those, a separate decode pool's (disaggregated)
    int64_t prefill_alltoalls = 0, prefill_alltoall_ns = 0;  // ... and the prefill pool's (the rest)
    bool two_batch_overlap = false;
    bool data_parallel_attention = false;  // each device's attention over its own sequences (their KV there alone)
    bool prefill_data_parallel_attention = false;  // the same on the prefill pool (prefill_pool.data_parallel_attention)
    int64_t overlapped_iterations = 0;  // run as two micro-batches (two or more sequences, on a topology)
  } moe;
  // Speculative decoding (method empty: off): the drafter, the acceptance model (P(j drafts
  // accepted), j = 0..k) and what the run drew; the drafter's time; and, from the cost models
  // at the run's mean verified context with communication analytic, the gain over plain decode
  // (tokens per second of a step) at a few batch sizes and the batch from which it stops paying.
  struct Speculative {
    std::string method, drafter;
    int tokens = 0;
    std::vector<double> distribution;
    double expected_tokens_per_step = 0;
    int64_t steps = 0, proposed = 0, accepted = 0, tokens_made = 0;
    double draft_ns = 0;
    int context = 0;
    std::vector<std::pair<int, double>> gain_by_batch;
    int break_even_batch = 0, break_even_limit = 0;  // 0: it pays up to the limit
  } speculative;
  // The host tier of the KV cache (kv_host_cache_bytes 0: none): prefix claims served from HBM
  // and from host memory, and the bytes moved down, fetched back and dropped.
  double kv_host_cache_bytes = 0;
  // The remote pool (kv_remote_cache_bytes 0: none): claims served from it, bytes moved in
  // (from every replica's lowest tier), fetched over the fabric, and dropped when it was full.
  double kv_remote_cache_bytes = 0, kv_to_remote_bytes = 0, kv_remote_fetched_bytes = 0, kv_remote_dropped_bytes = 0;
  int64_t kv_claims_remote = 0;
  int64_t kv_conversation_fetches = 0;  // later turns whose conversation's cache came back from a tier or the pool
  int64_t kv_claims_hbm = 0, kv_claims_host = 0;
  double kv_offloaded_bytes = 0, kv_fetched_bytes = 0, kv_dropped_bytes = 0;
  // The SSD tier below it (kv_ssd_cache_bytes 0: none).
  double kv_ssd_cache_bytes = 0;
  int64_t kv_claims_ssd = 0, kv_ssd_skipped = 0;
  double kv_to_ssd_bytes = 0, kv_ssd_read_bytes = 0;
  // Autoscaling (autoscaled false: a fixed pool of `replicas`).
  bool autoscaled = false;
  std::string autoscale_policy;
  int autoscale_min = 0;
  double replica_s = 0;
  double gpu_s = 0;               // a prefill pool of its own parallelism: GPU-seconds paid (else replica_s x GPUs per replica)
  int autoscale_prefill_min = 0;  // disaggregated: the prefill pool's fewest (0: one pool)
  double prefill_replica_s = 0;   // disaggregated: of replica_s, the prefill pool's
  int64_t scale_ups = 0, scale_downs = 0, most_replicas = 0, under_provisioned_ns = 0;
  std::vector<std::pair<int64_t, int>> scale_timeline;  // (time ns, replicas paid) at each change
  // The trace.
  bool trace = false;
  int64_t traced_iterations = 0, trace_max_requests = 0;
  // llmperf counts output tokens with the Llama tokenizer: model tokens per Llama token.
  double model_tokens_per_llama = 1;
};

}  // namespace sluice
