// The serving simulation: replicas of a model behind a router, each iterating batches chosen
// by its scheduler, with iteration times from the cost model and token delivery through the
// host last mile (device-to-host copy, detokenization, streaming).
//
// Its parts, each in its own files:
//   front end          frontend.h         loads, conversations, request slots, admission, how requests end
//   global scheduler   global_scheduler.h which replica a request goes to (the router), parking, failover
//   replica engine     serving_sim.cpp    iterations (the scheduler's batches), pipeline stages on the
//                                         fabric, KV accounting, the steady-decode fast-forward
//   recovery           serving_recovery.cpp  a replica lost and reloaded; its requests back to the router
// ServingSim owns them and is what a workload, a benchmark or a test holds.
#pragma once
#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/busy_profile.h"
#include "engine/engine.h"
#include "hardware/cost_model.h"
#include "hardware/last_mile.h"
#include "network/collective.h"
#include "network/flow.h"
#include "recorder/histogram.h"
#include "recorder/recorder.h"
#include "recorder/serving_results.h"
#include "registry/registry.h"
#include "workloads/serving/frontend.h"
#include "workloads/serving/global_scheduler.h"
#include "workloads/serving/router.h"
#include "workloads/serving/scheduler.h"
#include "workloads/serving/speculative.h"
#include "workloads/serving/workload.h"

namespace sluice::serving {

// Per-GPU memory of a deployment and the KV capacity it leaves.
struct ServingConfig;

struct PoolSpec;

// The cost model's options for a deployment (parallelism, tables, network all-reduce), or for
// its prefill pool's own devices and parallelism.
CostOptions cost_options(const ServingConfig& cfg, const PoolSpec* pool = nullptr);
// KV bytes one GPU holds per token: the model's share and a drafter's beside it, token for token.
double kv_bytes_per_token_per_gpu(const ServingConfig& cfg, const PoolSpec* pool = nullptr);
// Whether the deployment's decode engines (pool null) run data-parallel attention (an MoE model
// with deployment.moe.data_parallel_attention); its prefill pool where prefill_pool.data_parallel_attention.
bool data_parallel_attention(const ServingConfig& cfg, const PoolSpec* pool = nullptr);
// The devices one sequence's KV cache is spread over (or copied on): a replica's tp × pp, or 1
// under data-parallel attention.
int kv_shards(const ServingConfig& cfg, const PoolSpec* pool = nullptr);
// Two-batch overlap's micro-batches of a step's sequences `work`: alternately by position, or
// under data-parallel attention (`ranks` beside work: each sequence's device, -1 or out of
// [0, dp) for position mod dp) each device's own sequences alternately, so a half keeps every
// sequence on its device (half_ranks). `parity` is scratch (dp counters). Returns whether both
// halves hold a sequence: where no device holds two, the second is empty and nothing overlaps.
bool two_batch_halves(std::span<const SeqWork> work, std::span<const int32_t> ranks, int dp, std::vector<SeqWork> (&halves)[2],
                      std::vector<int32_t> (&half_ranks)[2], std::vector<uint32_t>& parity);


struct MemoryPlan {
  double capacity_per_gpu = 0;    // HBM × gpu_memory_utilization
  double weights_per_gpu = 0;
  double activation_per_gpu = 0;
  double kv_per_gpu = 0;
  int64_t kv_tokens_per_replica = 0;
  int64_t blocks_per_replica = 0;
  int64_t blocks_per_engine = 0;  // with pipeline parallelism, each virtual engine gets 1/pp of them
};

struct LastMile {
  D2hTable d2h;
  double d2h_fixed_ns = 0;      // used when no table
  int64_t detokenize_ns = 0;    // per token, on the replica's host detokenizer thread
  int64_t stream_ns = 0;        // per token, to the client
  std::string d2h_source;
  double d2h_ns(int tokens) const { return tokens <= 0 ? 0 : d2h.loaded() ? d2h.ns(tokens) : d2h_fixed_ns; }
};

// Token-level pipelining of a long prompt's prefill (TeraPipe applied to serving): in a
// pipeline-parallel deployment, an iteration whose batch is one prompt's prefill of at least
// min_tokens new tokens runs as slices that enter the stages one after another (each after
// the previous slices' cache), so later stages start on the first slice while the first stage
// computes the next; the prompt's first token comes after the last slice leaves the last stage.
enum class PrefillSlicing { None, Uniform, TeraPipe };
struct PrefillSlicingConfig {
  PrefillSlicing policy = PrefillSlicing::None;
  int slices = 2;          // uniform
  int granularity = 64;    // slice lengths in steps of this many tokens
  int min_tokens = 1024;   // shorter prefills are not sliced
};

// Disaggregation's prefill pool, where it runs on devices or parallelism of its own
// (deployment.prefill_pool): Splitwise prefills on H100s and decodes on A100s; DistServe
// picks each phase's parallelism apart. The deployment's own keys are the decode pool's.
struct PoolSpec {
  HardwareSpec hardware;
  int tensor_parallel = 1;
  std::string tables_dir;  // its cost source, as the deployment's (below)
  std::shared_ptr<const HardwareSpec> tables_device;
  double cost_time_scale = 1;  // every kernel time x this: an end of the cost model's error band (CostOptions::time_scale)
  std::string cost_source;
  std::string scheduler;  // its scheduler's kind
  std::function<std::unique_ptr<Scheduler>()> make_scheduler;
  int nodes = 0;  // the short form's servers of its own hardware (0: it shares the deployment's servers)
  // Each device prefills its own prompts whole (an MoE model's attention, dense layers and shared
  // experts data-parallel, the routed experts expert-parallel over the same devices): DeepSeek's
  // prefill deployment, and DeepEP's normal kernels' setting.
  bool data_parallel_attention = false;
};

struct ServingConfig {
  HardwareSpec hardware;
  ModelSpec model;
  int replicas = 1, tensor_parallel = 1, pipeline_parallel = 1;
  MoeOptions moe;  // a mixture-of-experts model's experts (deployment.moe)
  SpeculativeConfig speculative;  // speculative decoding (deployment.speculative)
  uint64_t seed = 0;              // the run's seed (the acceptance draws)
  Precision precision = Precision::BF16;  // the decoder layers' weights and GEMMs (copied into model.weights)
  bool kv_fp8 = false;                    // the KV cache in FP8 (copied into model.kv_fp8)
  net::CollectiveKind tp_algorithm = net::CollectiveKind::AllReduceRing;  // on a fabric: ring, NVLS or auto
  int nodes = 1, gpus_per_node = 8;  // the short form's implicit cluster (a named topology or placement decides otherwise)
  double gpu_memory_utilization = 0.9;
  int block_size = 16;
  double watermark = 0.01;
  PreemptionMode preemption = PreemptionMode::Recompute;
  double swap_space_bytes = 0;  // per replica
  bool prefix_reuse = true;
  bool prefix_caching = true;  // shared prompt prefixes' KV blocks shared across requests
  double kv_host_cache_bytes = 0;  // per replica: host memory that evicted prefixes move to (0: none)
  double kv_ssd_cache_bytes = 0;   // per replica: local SSD below host memory (0: none)
  bool kv_ssd_when_faster = false; // read a prefix back from the SSD only when that beats prefilling it again
  double kv_remote_cache_bytes = 0;  // the deployment's remote pool (Mooncake Store) below every replica's tiers (0: none)
  // Request classes: waiting queues ordered by class priority (else FCFS), and a request still
  // waiting for its first scheduling when its class's TTFT objective has passed is shed.
  bool priority_scheduling = false;
  bool shed_late = false;
  std::string tables_dir;
  // `cost_tables: derived`: the device whose tables tables_dir holds, scaled to this one by the
  // ratio of their ceilings (null: the tables are this device's own).
  std::shared_ptr<const HardwareSpec> tables_device;
  double cost_time_scale = 1;  // every kernel time x this: an end of the cost model's error band (CostOptions::time_scale)
  std::string cost_source;  // how it is costed, in words (CostSource::describe)
  bool fused_elementwise = false;
  Implementation implementation = Implementation::PytorchLean;
  std::string topology_name;                        // "" when none was named
  std::function<double(double bytes)> allreduce_ns;  // TP all-reduce over the topology, if named
  std::function<std::unique_ptr<Scheduler>()> make_scheduler;
  std::unique_ptr<Router> router;
  std::unique_ptr<Router> decode_router;  // disaggregated: which decode engine a prefilled request goes to
  std::unique_ptr<WorkloadSource> workload;
  LastMile last_mile;
  PrefillSlicingConfig prefill_slicing;
  int64_t sample_interval_ns = 0;  // 0: no time series
  int64_t max_sim_time_ns = 0;     // 0: unlimited
  int trace_max_requests = 0;
  int trace_pid = 1;  // Perfetto process ids: replicas at trace_pid, requests at trace_pid + 1
  int trace_max_iterations = 0;
  // Failures (world faults): a replica that lost a device reloads the model for this long after repair.
  int64_t reload_ns = 0;
  int64_t failover_timeout_ns = 0;  // a request no healthy replica takes within this fails (0: waits forever)
  // Overload: an arrival that finds this many requests in flight (arrived or made, not yet
  // ended) is rejected and counted; 0: no bound.
  int64_t max_in_flight = 0;
  double model_tokens_per_llama = 1;  // llmperf's counting (tokenizers.yaml)
  // Prefill/decode disaggregation: the first `prefill_replicas` replicas form the prefill pool,
  // the others the decode pool (0: every replica prefills and decodes its own requests).
  int prefill_replicas = 0;
  // The prefill pool's own devices, parallelism and scheduler (none: the deployment's).
  std::optional<PoolSpec> prefill_pool;
  // How a prompt's KV cache crosses to the decode pool: whole, after the prefill, or layer by
  // layer during it (each layer's share leaves as that layer is computed: Splitwise).
  bool kv_layerwise = false;
  // Autoscaling: the deployment runs between min_replicas and `replicas` (the most), judged
  // every `interval` by a signal against its target (queue: requests waiting per serving
  // replica; concurrency: requests in flight per serving replica, Knative's signal;
  // utilization: the busy fraction of the serving replicas over the interval). A
  // replica added serves after provision + model_load; one removed drains first. After a
  // change, no other for `cooldown`.
  struct Autoscaling {
    enum class Policy { None, Queue, Concurrency, Utilization } policy = Policy::None;
    int min_replicas = 1;
    double target = 4;
    int prefill_min_replicas = 1;  // disaggregated: the prefill pool's fewest
    double prefill_target = 0;     // and its target (0: target)
    int64_t interval_ns = 10'000'000'000, provision_ns = 30'000'000'000, model_load_ns = 30'000'000'000, cooldown_ns = 60'000'000'000;
  } autoscaling;
  // Service-level objectives for goodput (0: none).
  int64_t slo_ttft_ns = 0, slo_tpot_ns = 0;
};

// Aggregates per replica.
struct ReplicaStats {
  int64_t iterations = 0, prefill_iterations = 0, decode_iterations = 0, mixed_iterations = 0;
  int64_t busy_ns = 0;
  double cut_fraction = 0;         // of the iteration in flight at a horizon, the part past it (0..1)
  double batch_time_integral = 0;  // Σ batch size × iteration duration
  int64_t max_batch = 0;
  double kv_time_integral = 0;     // Σ occupancy × duration
  double kv_max = 0;
  int64_t tokens_processed = 0;
  int64_t sliced_prefills = 0, prefill_slices = 0;  // prefill iterations run as slices, and their slices
  // Every path that starts an iteration (an event, the fabric's stages, the steady-decode
  // fast-forward) counts it here, and every busy stretch of the replica through busy().
  void started(int prefill_entries, int decode_entries, size_t batch) {
    ++iterations;
    if (prefill_entries && decode_entries) ++mixed_iterations;
    else if (prefill_entries) ++prefill_iterations;
    else ++decode_iterations;
    max_batch = std::max<int64_t>(max_batch, static_cast<int64_t>(batch));
  }
  void busy(int64_t start_ns, int64_t ns, size_t batch) {
    busy_ns += ns;
    batch_time_integral += static_cast<double>(batch) * static_cast<double>(ns);
    profile.add(start_ns, start_ns + ns);
  }
  // Tokens computed by an iteration ending at t_ns.
  void processed(int64_t t_ns, int64_t tokens) {
    tokens_processed += tokens;
    profile.work(t_ns, static_cast<double>(tokens));
  }
  // When it was busy and when its tokens were computed (for the energy ledger's peak power).
  BusyProfile profile;
};

// Where a deployment sits on the world's fabric: for each replica and pipeline stage, the
// topology nodes of its tensor-parallel devices. With it, every tensor-parallel all-reduce and
// every activation hand-off between stages is a flow on the shared fabric, each iteration.
struct ServingFabric {
  net::FlowSim* flows = nullptr;
  std::vector<std::vector<int>> replica_nodes;  // [replica] -> its devices' nodes (disaggregation's KV copies)
  std::vector<std::vector<std::vector<int>>> stage_nodes;  // [replica][stage] -> tp node ids
  std::vector<std::vector<std::pair<int, int>>> host_links;  // [replica] -> (device node, its host node); empty: no host link
  bool active() const { return flows != nullptr; }
};

struct TimeSample {
  int64_t t_ns;
  int64_t running, waiting, swapped;
  double kv_occupancy, busy_fraction;
};

class ServingSim final : public EventHandler, public net::FlowSink, public ReplicaPool {
 public:
  // Runs on `engine` (shared with other workloads in a world); `fabric` places its transfers.
  ServingSim(ServingConfig cfg, Engine& engine, TraceWriter* trace, ServingFabric fabric = {});
  // Validates memory and builds replicas; throws std::runtime_error with bytes needed/available.
  // With `pool`, the plan of the prefill pool's own devices and parallelism.
  static MemoryPlan plan_memory(const ServingConfig& cfg, int64_t max_tokens_per_iteration, const PoolSpec* pool = nullptr);
  // Schedules the first arrivals; `on_done` runs once every announced request has completed.
  void start(const std::function<void(double)>& progress, std::function<void()> on_done = {});
  // After the engine stopped: detects stalls and truncation, closes the KV accounting.
  void finish();
  // start(), the engine until it drains (or max_sim_time), finish(): a deployment alone.
  void run(const std::function<void(double)>& progress);
  void on_event(Engine& e, uint32_t kind, uint32_t arg) override;
  void on_flow_done(Engine& e, uint64_t tag) override;
  int prefill_engines() const { return pool_split_; }
  // Autoscaling's record: replica-seconds paid (provisioning, serving or draining), changes,
  // and the time the signal was above its target with the pool not yet at its most.
  struct ScaleRecord {
    double replica_s = 0;
    double gpu_s = 0;  // disaggregated: GPU-seconds paid (a prefill pool of its own parallelism counts its own)
    double prefill_replica_s = 0;  // disaggregated: of replica_s, the prefill pool's
    int64_t scale_ups = 0, scale_downs = 0, most = 0;
    int64_t under_provisioned_ns = 0;
    std::vector<std::pair<int64_t, int>> timeline;  // (time, replicas paid) at each change
    std::vector<double> replica_on_s;  // each replica's seconds paid (the energy ledger's: off the rest)
    double accounted_s = 0;            // the span replica_on_s covers (from 0 to the last accounting)
  };
  const ScaleRecord& scale_record() const { return scale_; }
  // Failures. A replica that loses a device stops at once: its iteration in flight is void,
  // its KV cache is lost, and its running, queued and swapped requests go back to the router
  // (a healthy replica prefills them again). It takes requests again `reload_ns` after repair.
  void replica_down(int replica);
  void replica_repaired(int replica);
  int64_t failed() const { return front_.counts().failed; }
  void enable_faults();
  bool faults_enabled() const { return faults_enabled_; }
  int64_t retried() const { return retried_; }
  int64_t reprefilled() const { return reprefilled_; }
  int64_t replica_failures() const { return replica_failures_; }
  // Replica-time (ns) replicas were not serving (down or reloading), and each outage's length.
  int64_t replica_down_ns() const;
  const std::vector<int64_t>& outages_ns() const { return outages_ns_; }
  // Run-time invariants, checked at the end of every run. Request conservation: every request announced so far is completed, rejected, failed, or
  // still in flight (queued, running, swapped, parked, not yet arrived). Throws std::logic_error
  // naming the counts when not. Also: time order of each answered request, KV blocks within
  // capacity, busy time within the run.
  void check_conservation() const;

  // Where each request goes as it ends (answered, rejected, failed); none: not recorded.
  void set_sink(RequestSink* sink) { front_.set_sink(sink); }
  // The plain results the recorder formats (ServingResults), after finish().
  ServingResults results() const;

  // Results. requests(): the request table, one slot per request in flight; a slot is reused
  // once its request ended, so after a run it holds each slot's last request.
  const std::vector<Request>& requests() const { return front_.requests(); }
  // Request slots in use now, and the most in use at once (memory follows it, not the run's length).
  int64_t live_requests() const { return front_.counts().live; }
  int64_t live_high_water() const { return front_.counts().live_high_water; }
  int64_t conversation_slots() const { return front_.conversation_slots(); }
  int64_t rejected_overload() const { return front_.counts().rejected_overload; }
  const std::vector<ReplicaStats>& replica_stats() const { return rstats_; }
  const std::vector<std::unique_ptr<Replica>>& replicas() const { return replicas_; }
  const std::vector<TimeSample>& samples() const { return samples_; }
  const LogHistogram& gaps() const { return gaps_; }
  const MemoryPlan& memory() const { return mem_; }
  const ServingConfig& config() const { return cfg_; }
  // The KV tiers below a replica's HBM (host memory, SSD), sized per engine.
  void set_kv_tiers(BlockManager& kv, double kv_bytes_per_token, int engine) const;
  // Lower bounds for one request alone on an idle replica (every stage's compute; no
  // communication, no last mile): its prefill of `tokens` to the first token, and one decode
  // step at `context` tokens. What no load, router or scheduler can beat.
  int64_t idle_ttft_ns(int tokens) const;
  int64_t idle_tpot_ns(int context) const;
  int64_t idle_ns(const CostModel& cost, const SeqWork& w) const;
  // The load's marginal utilization of the deployment: requests per second per replica times
  // what one more request adds to its replica's iteration times at the run's mean batch (its
  // prompt's prefill beside that batch, then one more sequence in it for each further output
  // token; over pipeline stages, the stages' mean). The fixed cost of an iteration (reading the
  // weights) is shared by the batch, so this, not the busy fraction, is what approaches 1 at
  // capacity; latencies then move about 1 / (1 - it) times as fast as step costs. 0 when it
  // cannot be told (no batch ran, or prefill runs on a pool of its own).
  // `cached_tokens` of the prompt are found in the prefix cache and not computed.
  double marginal_utilization(double rate_per_s, double prompt_tokens, double cached_tokens, double output_tokens) const;
  int64_t completed() const { return front_.counts().completed; }
  int64_t rejected() const { return front_.counts().rejected_too_long; }
  int64_t first_arrival_ns() const { return front_.first_arrival_ns(); }
  int64_t last_delivery_ns() const { return front_.last_delivery_ns(); }
  uint64_t events() const { return engine_.events_processed(); }
  bool on_fabric() const { return fabric_.active(); }
  int64_t end_ns() const { return activity_end(); }  // last iteration end, token delivery or failure
  bool truncated() const { return truncated_; }
  int64_t traced_iterations() const { return trace_iterations_; }
  bool trace_enabled() const { return trace_ && trace_->enabled(); }
  // Iterations run inline by the steady-decode fast-forward (decide_inline); off: every
  // iteration is its own events (RunControl::set_fast_forward; the same results, slower).
  int64_t fast_forwarded_iterations() const { return fast_forwarded_; }
  // Of those, the ones decode_lazily ran on work_ alone (the requests written once after them).
  int64_t lazy_iterations() const { return run_lazily_; }
  // Speculative decoding's drafter and counters (null: off).
  const Speculator* speculator() const { return spec_.get(); }

 private:
  enum Kind : uint32_t { kIterationEnd = 3, kWake, kDecide, kSample, kStageCompute, kReplicaUp, kScale, kScaledUp };
  // Autoscaling (serving_autoscale.cpp).
  enum class Scale : uint8_t { Off, Provisioning, Serving, Draining };
  void scale_start();
  void scale_tick();
  void scaled_up(int replica);
  void scale_account(int64_t now_ns);
  // The pools scaled apart: engines [begin, end), at least `min` of them serving, against `target`.
  struct ScaleGroup {
    int begin, end, min;
    double target;
  };
  std::vector<ScaleGroup> scale_groups_;
  std::vector<int64_t> scale_group_changed_ns_;
  void scale_group(const ScaleGroup& g, size_t gi, int64_t now);
  std::vector<Scale> scale_state_;
  std::vector<int64_t> scale_busy_mark_;  // busy_ns of each replica at the last tick
  int64_t scale_last_ns_ = 0;
  int scale_paid_ = 0;
  ScaleRecord scale_;
  // The engine's events of an iteration carry the engine's epoch as their generation: a
  // failure bumps it, voiding those in flight.
  Generation epoch(int ri) const { return Generation(epoch_[static_cast<size_t>(ri)]); }
  // The last iteration end, token delivery or failed request.
  int64_t activity_end() const { return std::max(last_activity_ns_, front_.last_failure_ns()); }
  // Recovery (serving_recovery.cpp): repaired and reloaded, the replica serves again.
  void replica_up(int replica, int64_t now_ns);
  int64_t down_until_ns() const;  // where down time stops counting (see replica_down_ns)
  std::vector<uint32_t> epoch_;  // per engine
  net::Graveyard graveyard_;  // collectives a failure voided, whose flows may still land
  std::vector<int64_t> down_since_ns_;  // per replica, -1 when serving
  std::vector<int64_t> outages_ns_;
  int64_t down_ns_ = 0;
  bool faults_enabled_ = false;
  int64_t retried_ = 0, reprefilled_ = 0, replica_failures_ = 0;
  std::vector<uint32_t> ended_;        // slots answered in the iteration being closed
  // Disaggregation (serving_handoff.cpp): a prompt prefilled on a prefill engine goes to the
  // least-loaded decode engine, waits there for KV blocks (FCFS), and its KV cache crosses the
  // fabric as flows from each prefill device to its decode peer; it then joins that engine's
  // waiting queue with its blocks held, its prompt's last token the first step there.
  void start_handoff(int from, uint32_t id);
  int pick_decode_engine(const Request& q);
  void begin_layerwise(int from, uint32_t id, int32_t final_tokens);
  void pump_handoffs(int to);
  void kv_copied(uint32_t id);
  int32_t send_kv(const Request& q, const std::vector<int>& from, const std::vector<int>& to, double bytes, size_t salt);
  void deal_rank(int32_t& engine, int32_t& rank, int to);
  // The device of engine ri that runs q's tokens under data-parallel attention (Replica::rank_of):
  // a prompt's on a prefill engine dealt now if `deal` (else the one it would get), a decoding
  // sequence's its dp_rank.
  int rank_on(int ri, Request& q, bool deal);
  // Flow tag bit: a KV copy (low 32 bits: the request; from bit 40: the copy's generation).
  static constexpr uint64_t kHandoffFlow = uint64_t{1} << 39;
  static constexpr uint32_t kCopyGenMask = 0xFFFFFF;
  uint32_t copy_gen_ = 0;  // copies started or voided so far: each one's generation
  // Never 0 in the tag's bits (a fresh request's): a stale flow cannot match a slot reused since.
  uint32_t next_copy_gen() {
    if ((++copy_gen_ & kCopyGenMask) == 0) ++copy_gen_;
    return copy_gen_;
  }
  void fail_handoffs(int engine, std::vector<uint32_t>& lost);
  void send_back(uint32_t id);
  int pool_split_ = 0;                          // prefill engines (0: one pool)
  std::vector<uint32_t> handing_off_;           // slots whose prefill ended in the iteration being closed
  std::vector<std::deque<uint32_t>> handoff_wait_;  // per decode engine: waiting for its KV blocks
  int64_t in_handoff_ = 0, kv_transfers_ = 0;
  double kv_transfer_bytes_ = 0;
  LogHistogram kv_transfer_ns_, handoff_wait_ns_;
  void try_start(int replica);
  // Starts the iteration of batches_[replica] at now, its end an event (pp = 1 and the flow
  // shop; the fabric path is begin_stage's).
  void launch_iteration(int replica, int64_t dur_ns, int64_t occupied_ns, double compute_ns);
  // Defers a scheduling decision to the end of the current instant (Priority::Schedule), so it
  // sees every arrival and completion that happens at the same nanosecond.
  void request_schedule(int replica) override;
  void on_iteration_end(int replica);
  // The end of an iteration: tokens to the last mile, finished requests out.
  void end_iteration(int replica);
  // The next iteration of an idle replica decided now: steady decode runs inline to each
  // iteration's end while nothing else is due (a fast-forward), else try_start.
  void decide_inline(int replica);
  // After an inline iteration of decide_inline that ended no sequence: the iterations after
  // it that change only counts (no sequence ends or needs more than free blocks, nothing else
  // is due), at most `most` of them from `end`, run on work_ alone; the requests are brought
  // up to date once, at the end. Returns how many it ran.
  int decode_lazily(int replica, int64_t end, int most);
  bool steady_now(int replica) const;
  // decode_lazily's block plan: lazy_room_[k] sequences have k free token slots in their last
  // block after decide_inline's iteration (so need a block every block_size iterations from k + 1;
  // those with a block or more to spare limit the stretch instead).
  std::vector<int32_t> lazy_room_;
  bool fast_forward_ = true;
  int64_t fast_forwarded_ = 0;
  int64_t run_lazily_ = 0;
  // A request's last token reached its client: its resident cache kept, the front end told.
  void finish(Request& q, int64_t delivered_ns);
  void sample();
  void account_kv(int replica, int64_t now_ns);
  // The fabric path of one iteration: each stage computes, all-reduces over its tp devices
  // (flows), then hands its activations to the next stage (flows); stages take one batch at a time.
  void begin_stage(int engine, int pass, int stage);
  void stage_compute_done(int engine, int pass);
  void stage_comm_done(int engine, int pass);
  void stage_release(int replica, int stage);
  void start_compute(int engine, int pass, int stage);
  // Each pipeline stage's compute time of the batch in work_ (its own layers) on engine ri,
  // into stage_ns_; returns their sum.
  double stage_times(int ri, std::span<const SeqWork> work, std::span<const int32_t> ranks = {});
  std::vector<double> stage_ns_;
  std::vector<double> pass_ns_;  // per pass (slice) and stage of the iteration being started
  // One slice of an iteration's batch on its way through the stages (an unsliced iteration
  // is one pass of all its tokens).
  struct Pass {
    int stage = 0;
    int sends_pending = 0;
    int64_t stage_started_ns = 0;
    int64_t comm_started_ns = 0;  // when its all-reduce or hand-off began (the communication metrics)
    double tokens = 0;
    // The tokens its MoE all-to-alls are sized by (the collective sends every device's alike): the
    // pass's, or on an engine with data-parallel attention (prefill or decode) its busiest device's
    // times the devices (a lone prompt's rows all leave its one device; exact when the devices are
    // balanced).
    double a2a_tokens = 0;
    std::unique_ptr<net::Collective> collective;
    std::unique_ptr<net::Collective> alltoall;  // the MoE layers' dispatch and combine, after the all-reduces
    // Two-batch overlap: the communication started with the compute; the stage ends when both
    // are done (and the part neither can hide: see stage_comm_done).
    bool compute_done = false, comm_done = false;
    int64_t compute_started_ns = 0, comm_ended_ns = 0;
  };
  struct InFlight {
    std::vector<Pass> passes;
    std::vector<int64_t> stage_ns;  // per pass and stage: pass x pp + stage
    std::vector<int> done_on_stage; // passes each stage has finished (a pass follows the previous one on every stage)
    std::vector<std::vector<int>> parked;  // per stage: passes that arrived before the previous pass finished there
    int64_t extra_ns = 0, d2h_ns = 0;
    int64_t started_ns = 0;
    int swaps_pending = 0;
    bool waiting_swap = false;  // holds the first stage, computes once the swap copies land
    bool overlap = false;       // two-batch overlap (one stage, one pass)
  };
  static constexpr int kMaxSlices = 64;  // passes per iteration; a stage queue entry is engine x kMaxSlices + pass
  // Prefill slicing: the slices (tokens each) of `tokens` new tokens after `context` cached
  // ones, or {tokens} when the iteration is not sliced; plans are cached per (tokens, context).
  std::vector<int> prefill_slices(int tokens, int context);
  std::map<std::pair<int, int>, std::vector<int>> slice_plans_;
  // A hierarchical all-to-all's share of a server's devices (CostModel::moe_alltoall_server_share),
  // by cost model and positions: the same for every pass of a deployment, and dear to compute
  // with many expert groups (every set of groups a token may pick), so computed once.
  std::map<std::pair<const CostModel*, std::vector<int>>, double> a2a_server_share_;
  std::vector<InFlight> inflight_;            // per engine
  std::vector<char> stage_busy_;              // per replica and stage
  std::vector<std::deque<int>> stage_queue_;  // per replica and stage: engines waiting for it
  ServingFabric fabric_;
  // Time stages spent in their tensor-parallel all-reduces and in their hand-offs to the next
  // stage (start to the last flow's end), and how many: the fabric's share of an iteration.
  int64_t tp_comm_ns_ = 0, tp_comm_count_ = 0, handoff_ns_ = 0, handoff_count_ = 0;
  int64_t moe_a2a_ns_ = 0, moe_a2a_count_ = 0, moe_a2a_passes_ = 0;
  int64_t moe_a2a_decode_ns_ = 0, moe_a2a_decode_count_ = 0;  // of those, the decode pool's (with a prefill pool beside it)
  void start_alltoall(int ri, int k);
  // A stage's all-reduces then its all-to-alls (after its compute, or with it under two-batch
  // overlap); both end in stage_comm_done.
  void start_comm(int ri, int k);
  std::vector<SeqWork> halves_[2];  // two-batch overlap's micro-batches
  std::vector<int32_t> half_ranks_[2];  // (with data-parallel attention: each half's devices)
  std::vector<uint32_t> half_parity_;   // (and how many of each device's sequences are dealt so far)
  int64_t overlapped_ = 0;          // iterations run with two-batch overlap
  // Speculative decoding: the drafter, and the decode steps of the batch being started that
  // verify drafts (their contexts, for the drafter's passes; prefill chunks the drafter also runs).
  std::unique_ptr<Speculator> spec_;
  std::vector<int> spec_contexts_;
  std::vector<SeqWork> spec_prefill_;
  double spec_context_sum_ = 0;
  // Marks the batch's decode steps as verifications and returns the drafter's time for it.
  double speculate(Batch& b);
  // A verification's tokens: the step's own and the accepted drafts (at most what is left).
  int64_t accept_drafts(Request& q, int64_t& t, int64_t detok, int64_t stream, LogHistogram::Runs& gaps);

  ServingConfig cfg_;
  Engine& engine_;
  TraceWriter* trace_;
  CostModel cost_;
  MemoryPlan mem_;
  // Disaggregation's prefill pool on devices or parallelism of its own (deployment.prefill_pool):
  // its cost model and memory plan (null: the deployment's, cost_ and mem_, serve every engine).
  std::unique_ptr<RemoteKvStore> remote_;  // the remote KV pool (null: none)
  std::vector<std::pair<int, double>> remote_fetch_;  // the iteration being started: (home engine, bytes) to fetch first
  int64_t remote_fetches_ = 0;
  // Flow tag of a copy the iteration waits for before computing (a swap, a host-tier or pool
  // fetch): bit 40, the engine, its epoch from bit 41 (a failure voids them).
  uint64_t swap_tag(int ri) const {
    return (uint64_t{1} << 40) | static_cast<uint64_t>(ri) | (static_cast<uint64_t>(epoch_[static_cast<size_t>(ri)] & 0x7FFFFF) << 41);
  }
  static constexpr uint64_t kOffloadFlow = uint64_t{1} << 38;  // flow tag: a background copy into host memory
  std::unique_ptr<CostModel> prefill_cost_;
  MemoryPlan prefill_mem_;
  const PoolSpec* prefill_pool() const { return cfg_.prefill_pool ? &*cfg_.prefill_pool : nullptr; }
  bool own_prefill(int engine) const { return engine < pool_split_ && cfg_.prefill_pool; }
  const CostModel& cost_of(int engine) const { return own_prefill(engine) ? *prefill_cost_ : cost_; }
  int tp_of(int engine) const { return own_prefill(engine) ? cfg_.prefill_pool->tensor_parallel : cfg_.tensor_parallel; }
  std::vector<std::unique_ptr<Replica>> replicas_;
  FrontEnd front_;
  GlobalScheduler global_;
  std::vector<std::unique_ptr<Scheduler>> schedulers_;
  std::vector<Batch> batches_;
  std::vector<int64_t> detok_free_ns_, kv_last_ns_, wake_pending_ns_, decide_pending_ns_;
  std::vector<int64_t> stage_free_ns_;  // per replica and pipeline stage: when the stage is next free
  int pp_ = 1;                          // virtual engines (batches in flight) per replica
  std::vector<double> kv_last_occ_;
  std::vector<uint8_t> busy_;  // bytes, not bits: read and written every iteration
  std::vector<int64_t> busy_until_;  // the end of each replica's iteration started by launch_iteration (counted busy ahead)
  std::vector<int64_t> busy_len_;    // and how long it occupies the replica
  std::vector<ReplicaStats> rstats_;
  std::vector<TimeSample> samples_;
  std::vector<SeqWork> work_;
  std::vector<int32_t> ranks_;  // data-parallel attention: work_[i]'s device (Request::dp_rank)
  std::vector<int64_t> per_rank_tokens_;  // ... and a data-parallel pass's tokens by device, prefill or decode (Pass::a2a_tokens)
  std::vector<int32_t> dp_next_;  // per engine under data-parallel attention: the device dealt next (round-robin)
  bool runs_dp_attention(int engine) const {
    return engine < pool_split_ ? own_prefill(engine) && data_parallel_attention(cfg_, prefill_pool()) : data_parallel_attention(cfg_);
  }
  LogHistogram gaps_;
  int64_t last_activity_ns_ = 0;
  int64_t trace_iterations_ = 0;
  bool truncated_ = false;
};

// Builds a ServingConfig from a validated serving section (the short form's top level, or a
// `kind: serving` workload, whose hardware is the cluster's); also used by benchmarks and tests.
ServingConfig build_serving_config(const Params& p, const Registry& reg, uint64_t seed, std::string* workload_desc,
                                   const HardwareSpec* cluster_hardware = nullptr);

}  // namespace sluice::serving
