// A deployment's plain results (ServingResults), which the recorder formats.
#include "workloads/serving/serving_sim.h"

#include <array>
#include <cmath>
#include <span>

namespace sluice::serving {

namespace serving_results {
// A batch's time through every pipeline stage of `cost` (the stages' sum).
double stages_ns(const CostModel& cost, int pp, std::span<const SeqWork> batch) {
  double t = 0;
  for (int s = 0; s < pp; ++s) t += cost.stage_ns(batch, s);
  return t;
}
}  // namespace serving_results

void ServingSim::set_kv_tiers(BlockManager& kv, double kv_bytes_per_token, int engine) const {
  const double per_block = kv_bytes_per_token * cfg_.block_size * pp_;
  kv.set_host_tier(static_cast<int64_t>(cfg_.kv_host_cache_bytes / per_block));
  kv.set_ssd_tier(static_cast<int64_t>(cfg_.kv_ssd_cache_bytes / per_block));
  kv.set_remote_tier(remote_.get(), engine);
  if (cfg_.kv_ssd_cache_bytes > 0 && cfg_.kv_ssd_when_faster) {
    // Read (the drives) then copy (the host link) against a prefill of the same tokens, on the
    // engine's own devices.
    const HardwareSpec& hw = own_prefill(engine) ? prefill_pool()->hardware : cfg_.hardware;
    const int shards = tp_of(engine) * cfg_.pipeline_parallel;
    const double per_token = kv_bytes_per_token;  // over the replica's devices, as the fetch charges it
    const double move_ns_per_token = per_token / (hw.ssd_read_Bps * shards) * 1e9 + per_token / (hw.pcie_Bps * shards) * 1e9;
    kv.set_ssd_policy([this, move_ns_per_token, engine](int64_t blocks) {
      const int tokens = static_cast<int>(blocks * cfg_.block_size);
      return move_ns_per_token * tokens < static_cast<double>(idle_ns(cost_of(engine), SeqWork{tokens, 0, true}));
    });
  }
}

int64_t ServingSim::idle_ns(const CostModel& cost, const SeqWork& w) const {
  return std::llround(serving_results::stages_ns(cost, pp_, std::span<const SeqWork>(&w, 1)));
}

// Disaggregated, prompts prefill on the prefill pool (engine 0's) and decode on the decode pool (the deployment's).
int64_t ServingSim::idle_ttft_ns(int tokens) const { return idle_ns(cost_of(0), SeqWork{tokens, 0, true}); }
int64_t ServingSim::idle_tpot_ns(int context) const { return idle_ns(cost_, SeqWork{1, context, true}); }

double ServingSim::marginal_utilization(double rate_per_s, double prompt_tokens, double cached_tokens, double output_tokens) const {
  if (cfg_.prefill_pool || cfg_.prefill_replicas > 0 || cfg_.replicas <= 0 || rate_per_s <= 0) return 0;
  double busy = 0, batch_ns = 0;
  for (const auto& st : rstats_) {
    busy += static_cast<double>(st.busy_ns);
    batch_ns += st.batch_time_integral;
  }
  if (busy <= 0) return 0;
  const int B = std::max(1, static_cast<int>(std::lround(batch_ns / busy)));
  const int prompt = std::max(1, static_cast<int>(std::lround(prompt_tokens)));
  const int context = prompt + static_cast<int>(std::lround(output_tokens / 2));
  std::vector<SeqWork> w(static_cast<size_t>(B) + 1, SeqWork{1, context, true});
  auto time = [&](size_t n) { return serving_results::stages_ns(cost_, pp_, std::span<const SeqWork>(w.data(), n)) / pp_; };
  const double base = time(static_cast<size_t>(B)), one_more = time(static_cast<size_t>(B) + 1) - base;
  const int cached = std::clamp(static_cast<int>(std::lround(cached_tokens)), 0, prompt - 1);
  w[static_cast<size_t>(B)] = SeqWork{prompt - cached, cached, true};
  const double prefill = time(static_cast<size_t>(B) + 1) - base;
  const double demand_ns = std::max(0.0, prefill) + std::max(0.0, output_tokens - 1) * std::max(0.0, one_more);
  return rate_per_s / cfg_.replicas * demand_ns / 1e9;
}

ServingResults ServingSim::results() const {
  ServingResults r;
  const ServingConfig& c = cfg_;
  r.hardware = c.hardware.name;
  r.model = c.model.name;
  r.topology = c.topology_name;
  r.tp_allreduce = on_fabric() ? "flows on the topology, every iteration"
                   : c.tensor_parallel > 1 || c.pipeline_parallel > 1 ? "analytic ring over the interconnect"
                                                                       : "none (tp 1)";
  r.cost_source = c.cost_source.empty() ? (c.tables_dir.empty() ? "roofline" : c.tables_dir) : c.cost_source;
  r.d2h_source = c.last_mile.d2h_source;
  r.replicas = c.replicas;
  r.tensor_parallel = c.tensor_parallel;
  r.pipeline_parallel = c.pipeline_parallel;
  r.block_size = c.block_size;
  // The model's, and a drafter's beside it (whole: over every device of a replica).
  r.kv_bytes_per_token = c.model.kv_bytes_per_token() + (spec_ ? spec_->drafter().kv_bytes_per_token() : 0.0);
  r.model_parameters = c.model.parameters();
  r.model_embedding_parameters = static_cast<double>(c.model.vocab) * c.model.hidden;
  // The datasheet peak of the format the decoder GEMMs run in (FP8 and FP4 at theirs: MFU over
  // the bf16 peak would pass 1 for an FP8 deployment).
  r.peak_flops = c.hardware.peak_flops(c.model.weights);
  r.effective_flops = c.hardware.effective_flops();
  r.effective_bandwidth_Bps = c.hardware.effective_bandwidth_Bps();
  if (c.prefill_slicing.policy != PrefillSlicing::None)
    r.prefill_slicing = c.prefill_slicing.policy == PrefillSlicing::Uniform ? "uniform" : "terapipe";
  r.capacity_per_gpu = mem_.capacity_per_gpu;
  r.weights_per_gpu = mem_.weights_per_gpu;
  r.activation_per_gpu = mem_.activation_per_gpu;
  r.kv_per_gpu = mem_.kv_per_gpu;
  r.kv_tokens_per_replica = mem_.kv_tokens_per_replica;
  r.blocks_per_replica = mem_.blocks_per_replica;
  r.blocks_per_engine = mem_.blocks_per_engine;
  const RequestCounts& n = front_.counts();
  r.announced = n.announced;
  r.completed = n.completed;
  r.rejected_too_long = n.rejected_too_long;
  r.rejected_overload = n.rejected_overload;
  r.rejected_late = n.rejected_late;
  for (const auto& c : cfg_.workload->classes()) r.classes.push_back(ServingClass{c.name, c.priority, c.ttft_ns, c.tpot_ns});
  r.priority_scheduling = cfg_.priority_scheduling;
  r.truncated_to_context = c.workload->truncated_to_context();
  r.failed = n.failed;
  r.max_in_flight = c.max_in_flight;
  r.in_flight_high_water = n.live_high_water;
  r.truncated = truncated_;
  r.faults = faults_enabled_;
  r.retried = retried_;
  r.reprefilled = reprefilled_;
  r.replica_failures = replica_failures_;
  r.replica_down_ns = replica_down_ns();
  r.outages_ns = outages_ns_;
  if (cfg_.kv_host_cache_bytes > 0 || cfg_.kv_ssd_cache_bytes > 0 || remote_) {
    r.kv_host_cache_bytes = cfg_.kv_host_cache_bytes;
    r.kv_remote_cache_bytes = cfg_.kv_remote_cache_bytes;
    r.kv_ssd_cache_bytes = cfg_.kv_ssd_cache_bytes;
    for (const auto& e : replicas_) {
      const auto& t = e->kv.tier_counts();
      const double per_block = cfg_.block_size * e->kv_bytes_per_token;
      r.kv_claims_hbm += t.hits_hbm;
      r.kv_claims_host += t.hits_host;
      r.kv_offloaded_bytes += static_cast<double>(t.offloaded_blocks) * per_block;
      r.kv_fetched_bytes += static_cast<double>(t.fetched_blocks) * per_block;
      r.kv_dropped_bytes += static_cast<double>(t.dropped_blocks) * per_block;
      r.kv_claims_ssd += t.hits_ssd;
      r.kv_ssd_skipped += t.ssd_skipped;
      r.kv_to_ssd_bytes += static_cast<double>(t.to_ssd_blocks) * per_block;
      r.kv_ssd_read_bytes += static_cast<double>(t.fetched_ssd_blocks) * per_block;
      r.kv_claims_remote += t.hits_remote;
      r.kv_conversation_fetches += t.conversation_fetches;
      r.kv_to_remote_bytes += static_cast<double>(t.to_remote_blocks) * per_block;
      r.kv_remote_fetched_bytes += static_cast<double>(t.fetched_remote_blocks) * per_block;
    }
    if (remote_) r.kv_remote_dropped_bytes = static_cast<double>(remote_->dropped_blocks()) * cfg_.block_size * kv_bytes_per_token_per_gpu(cfg_) * kv_shards(cfg_);
  }
  r.prefill_replicas = pool_split_;
  if (const PoolSpec* pool = prefill_pool()) {
    r.prefill_tensor_parallel = pool->tensor_parallel;
    r.prefill_hardware = pool->hardware.name;
    r.prefill_scheduler = pool->scheduler;
    r.prefill_cost_source = pool->cost_source;
    r.prefill_peak_flops = pool->hardware.peak_flops(c.model.weights);
    r.prefill_weights_per_gpu = prefill_mem_.weights_per_gpu;
    r.prefill_kv_per_gpu = prefill_mem_.kv_per_gpu;
    r.prefill_kv_tokens_per_replica = prefill_mem_.kv_tokens_per_replica;
  }
  if (!scale_state_.empty()) {
    r.autoscaled = true;
    using P = ServingConfig::Autoscaling::Policy;
    r.autoscale_policy = cfg_.autoscaling.policy == P::Queue ? "queue" : cfg_.autoscaling.policy == P::Concurrency ? "concurrency" : "utilization";
    r.autoscale_min = cfg_.autoscaling.min_replicas;
    r.replica_s = scale_.replica_s;
    r.gpu_s = scale_.gpu_s;
    r.prefill_replica_s = scale_.prefill_replica_s;
    r.autoscale_prefill_min = pool_split_ > 0 ? cfg_.autoscaling.prefill_min_replicas : 0;
    r.scale_ups = scale_.scale_ups;
    r.scale_downs = scale_.scale_downs;
    r.most_replicas = scale_.most;
    r.under_provisioned_ns = scale_.under_provisioned_ns;
    r.scale_timeline = scale_.timeline;
  }
  r.kv_transfers = kv_transfers_;
  r.kv_transfer_bytes = kv_transfer_bytes_;
  if (c.model.moe()) {
    auto& mo = r.moe;
    mo.experts = c.model.experts;
    mo.experts_per_token = c.model.experts_per_token;
    mo.shared_experts = c.model.shared_experts;
    mo.moe_layers = c.model.moe_layers_in(0, c.model.layers);
    mo.active_parameters = c.model.active_parameters();
    mo.expert_parallel = c.moe.expert_parallel && c.tensor_parallel > 1;
    mo.dispatch = !mo.expert_parallel ? "none (every expert split over the tensor-parallel devices)"
                  : c.moe.alltoall   ? fmt::format("alltoall{}{}", c.moe.rows_per_expert ? " (a row per token and expert)" : "",
                                                   c.moe.hierarchical_alltoall ? " (hierarchical: across servers once, then NVLink)" : "")
                                     : "allreduce";
    mo.routing = c.moe.routing == MoeOptions::Routing::Zipf       ? fmt::format("zipf s={}", c.moe.zipf_s)
                 : c.moe.routing == MoeOptions::Routing::Measured ? "measured"
                                                                  : "uniform";
    if (c.model.group_limited()) mo.routing += fmt::format(", group-limited: {} of {} expert groups a token", c.model.groups_per_token, c.model.expert_groups);
    mo.redundant_experts = c.moe.eplb ? c.moe.redundant_experts : 0;
    for (double x : cost_.expert_tokens_per_device(1.0)) mo.device_load.push_back(x / c.model.experts_per_token);
    mo.alltoalls = moe_a2a_count_;
    mo.alltoall_ns = moe_a2a_ns_;
    mo.alltoall_passes = moe_a2a_passes_;
    mo.decode_alltoalls = moe_a2a_decode_count_;
    mo.decode_alltoall_ns = moe_a2a_decode_ns_;
    if (pool_split_ > 0) {  // a disaggregated deployment: what the decode pool's leave is the prefill pool's
      mo.prefill_alltoalls = moe_a2a_count_ - moe_a2a_decode_count_;
      mo.prefill_alltoall_ns = moe_a2a_ns_ - moe_a2a_decode_ns_;
    }
    mo.prefill_data_parallel_attention = prefill_pool() && data_parallel_attention(c, prefill_pool());
    mo.two_batch_overlap = c.moe.two_batch_overlap;
    mo.data_parallel_attention = data_parallel_attention(c);
    mo.overlapped_iterations = overlapped_;
  }
  if (spec_) {
    auto& sp = r.speculative;
    const Speculator& s = *spec_;
    sp.method = method_name(c.speculative.method);
    sp.drafter = s.drafter().name;
    sp.tokens = s.k();
    sp.distribution = s.distribution();
    sp.expected_tokens_per_step = s.expected_tokens_per_step();
    sp.steps = s.steps;
    sp.proposed = s.proposed;
    sp.accepted = s.accepted;
    sp.tokens_made = s.tokens;
    sp.draft_ns = s.draft_ns_total;
    // The gain is judged at the mean context the verifications saw; a run without any at a
    // nominal context, at a spread of batch sizes, and the break-even batch searched up to a limit.
    constexpr int kNominalContext = 1024, kBreakEvenLimit = 1024;
    constexpr std::array<int, 5> kBatches{1, 4, 16, 64, 256};
    sp.context = s.steps > 0 ? static_cast<int>(std::lround(spec_context_sum_ / static_cast<double>(s.steps))) : kNominalContext;
    const CostModel analytic(c.hardware, c.model, cost_options(c));  // every transfer analytic, the drafter's as the target's
    for (int b : kBatches) sp.gain_by_batch.emplace_back(b, s.gain_at(analytic, b, sp.context));
    sp.break_even_limit = kBreakEvenLimit;
    sp.break_even_batch = s.break_even_batch(analytic, sp.context, sp.break_even_limit);
  }
  r.tp_allreduces = tp_comm_count_;
  r.tp_allreduce_ns = tp_comm_ns_;
  r.stage_handoffs = handoff_count_;
  r.stage_handoff_ns = handoff_ns_;
  auto summary = [](const LogHistogram& h) {
    GapSummary g;
    g.count = h.count();
    if (h.count()) {
      g.mean = h.mean();
      g.p50 = h.percentile(50);
      g.p90 = h.percentile(90);
      g.p95 = h.percentile(95);
      g.p99 = h.percentile(99);
      g.max = static_cast<double>(h.max());
    }
    return g;
  };
  r.gaps = summary(gaps_);
  r.kv_transfer_time = summary(kv_transfer_ns_);
  r.handoff_wait = summary(handoff_wait_ns_);
  r.first_arrival_ns = front_.first_arrival_ns();
  r.last_delivery_ns = front_.last_delivery_ns();
  r.end_ns = end_ns();
  r.events = events();
  r.fast_forwarded = fast_forwarded_;
  for (size_t i = 0; i < rstats_.size(); ++i) {
    const ReplicaStats& s = rstats_[i];
    ServingReplicaResult e;
    e.iterations = s.iterations;
    e.prefill_iterations = s.prefill_iterations;
    e.decode_iterations = s.decode_iterations;
    e.mixed_iterations = s.mixed_iterations;
    e.busy_ns = s.busy_ns;
    e.cut_fraction = s.cut_fraction;
    e.batch_time_integral = s.batch_time_integral;
    e.kv_time_integral = s.kv_time_integral;
    e.kv_max = s.kv_max;
    e.max_batch = s.max_batch;
    e.sliced_prefills = s.sliced_prefills;
    e.prefill_slices = s.prefill_slices;
    e.preemptions = replicas_[i]->preemptions;
    e.swap_bytes = replicas_[i]->swap_bytes;
    r.engines.push_back(e);
  }
  for (const auto& s : samples_) r.samples.push_back(ServingSample{s.t_ns, s.running, s.waiting, s.swapped, s.kv_occupancy, s.busy_fraction});
  r.trace = trace_enabled();
  r.traced_iterations = trace_iterations_;
  r.trace_max_requests = c.trace_max_requests;
  r.model_tokens_per_llama = c.model_tokens_per_llama;
  return r;
}

}  // namespace sluice::serving
