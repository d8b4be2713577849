#include "recorder/serving_report.h"

#include "recorder/csv_format.h"

#include <fmt/format.h>

#include "config/schema.h"
#include "config/units.h"
#include <stdexcept>

namespace sluice {

int64_t llmperf_counted_tokens(int64_t model_tokens, double model_per_llama) {
  return model_per_llama > 0 ? std::llround(static_cast<double>(model_tokens) / model_per_llama) : model_tokens;
}

ServingRecords::ServingRecords(Recorder* rec, const std::string& csv_name, double model_tokens_per_llama)
    : rec_(rec), per_llama_(model_tokens_per_llama) {
  if (rec_ && !csv_name.empty()) {
    csv_ = &rec_->stream(csv_name);
    csv_->buffer() +=
        "id,conversation,turn,replica,arrival_s,input_tokens,history_tokens,cached_tokens,output_tokens,"
        "queue_ms,ttft_ms,e2e_ms,tpot_ms,itl_ms,max_gap_ms,preemptions\n";
  }
}

void ServingRecords::answered(const ServingRequestRecord& q) {
  if (q.class_id >= 0 && static_cast<size_t>(q.class_id) < per_class.size()) {
    const ServingClass& c = classes_[static_cast<size_t>(q.class_id)];
    ClassCounts& k = per_class[static_cast<size_t>(q.class_id)];
    const int64_t ttft_ns = q.first_token_ns - q.arrival_ns;
    const double tpot_ns = q.output_tokens > 1 ? static_cast<double>(q.last_token_ns - q.first_token_ns) / (q.output_tokens - 1) : 0.0;
    ++k.ended;
    ++k.answered;
    k.met += (c.ttft_ns <= 0 || ttft_ns <= c.ttft_ns) && (c.tpot_ns <= 0 || tpot_ns <= static_cast<double>(c.tpot_ns));
    k.ttft.add(ttft_ns / 1e6);
    if (q.output_tokens > 1) k.tpot.add(tpot_ns / 1e6);
  }
  const double t = (q.first_token_ns - q.arrival_ns) / 1e6;
  const double e = (q.last_token_ns - q.arrival_ns) / 1e6;
  // TPOT: mean gap between tokens after the first. ITL (llmperf): e2e / output tokens, TTFT included.
  const double tp = q.output_tokens > 1 ? (q.last_token_ns - q.first_token_ns) / 1e6 / (q.output_tokens - 1) : 0.0;
  const double il = e / q.output_tokens;
  const double qd = (q.first_scheduled_ns - q.arrival_ns) / 1e6;
  ++answered_count;
  if (slo_ttft_ns > 0 || slo_tpot_ns > 0) {
    const bool ttft_ok = slo_ttft_ns <= 0 || q.first_token_ns - q.arrival_ns <= slo_ttft_ns;
    const bool tpot_ok = slo_tpot_ns <= 0 || q.output_tokens <= 1 ||
                         static_cast<double>(q.last_token_ns - q.first_token_ns) / (q.output_tokens - 1) <= static_cast<double>(slo_tpot_ns);
    slo_ttft_met += ttft_ok;
    slo_tpot_met += tpot_ok;
    slo_met += ttft_ok && tpot_ok;
  }
  ttft.add(t);
  e2e.add(e);
  if (q.output_tokens > 1) tpot.add(tp);
  itl.add(il);
  queue.add(qd);
  max_gap.add(q.max_gap_ns / 1e6);
  out_tokens += q.output_tokens;
  in_tokens += q.prompt_len();
  cached_in += q.cached_tokens;
  const int64_t lc = llmperf_counted_tokens(q.output_tokens, per_llama_);
  out_tokens_lc += lc;
  itl_lc.add(e / static_cast<double>(std::max<int64_t>(1, lc)));
  if (lc > 1) tpot_lc.add((q.last_token_ns - q.first_token_ns) / 1e6 / static_cast<double>(lc - 1));
  preemptions += q.preemptions;
  if (q.prefix_id >= 0 && q.turn == 0) {
    ++prefix_requests;
    prefix_tokens += q.prefix_tokens;
    prefix_hits += q.cached_tokens > 0;
    prefix_tokens_saved += q.cached_tokens;
  }
  if (q.turn > 0) {
    ++later_turns;
    later_prompt += q.history_tokens;
    reused += q.cached_tokens;
    later_hits += q.cached_tokens > 0;
  }
  if (!csv_) return;
  if (q.id < next_id_) throw std::logic_error(fmt::format("internal: request {} ended twice", q.id));
  const size_t k = q.id - next_id_;
  if (k == 0 && state_.empty()) {  // the common case: in order, nothing waits
    row(q);
    ++next_id_;
    return;
  }
  if (k >= state_.size()) {
    state_.resize(k + 1, 0);
    waiting_.resize(k + 1);
  }
  if (state_[k] != 0) throw std::logic_error(fmt::format("internal: request {} ended twice", q.id));
  state_[k] = 1;
  waiting_[k] = q;
  drain();
}

// Writes the rows that are now in id order (ended requests leave a gap that needs no row).
void ServingRecords::drain() {
  reorder_high_water_ = std::max(reorder_high_water_, state_.size());
  while (!state_.empty() && state_.front() != 0) {
    if (state_.front() == 1) row(waiting_.front());
    state_.pop_front();
    waiting_.pop_front();
    ++next_id_;
  }
}

void ServingRecords::ended(uint32_t id, int32_t class_id) {
  if (class_id >= 0 && static_cast<size_t>(class_id) < per_class.size()) ++per_class[static_cast<size_t>(class_id)].ended;
  if (!csv_) return;
  if (id < next_id_) throw std::logic_error(fmt::format("internal: request {} ended twice", id));
  const size_t k = id - next_id_;
  if (k >= state_.size()) {
    state_.resize(k + 1, 0);
    waiting_.resize(k + 1);
  }
  state_[k] = 2;
  drain();
}

// A single-token request has no gap between tokens: its TPOT is undefined, so its tpot_ms
// cell is empty (not 0).
void ServingRecords::row(const ServingRequestRecord& q) {
  using csv::write_fixed, csv::write_int, csv::write_scaled;
  const double e = (q.last_token_ns - q.arrival_ns) / 1e6;
  std::string& b = csv_->buffer();
  // Room for the widest row (9 integers, 5 scaled times, 2 doubles, 16 separators) made
  // once, written through a pointer, and cut to what was written.
  constexpr size_t kRoom = 9 * csv::kIntRoom + 5 * csv::kScaledRoom + 2 * csv::kFixedRoom + 16;
  const size_t at = b.size();
  b.resize(at + kRoom);
  char* const start = b.data() + at;
  char* p = start;
  // Times are integer ns: arrival in s with 9 decimals and the spans in ms with 6 are exact.
  p = write_int(p, q.id), *p++ = ',';
  p = write_int(p, q.conversation), *p++ = ',';
  p = write_int(p, q.turn), *p++ = ',';
  p = write_int(p, q.replica), *p++ = ',';
  p = write_scaled(p, q.arrival_ns, 9), *p++ = ',';
  p = write_int(p, q.input_tokens), *p++ = ',';
  p = write_int(p, q.history_tokens), *p++ = ',';
  p = write_int(p, q.cached_tokens), *p++ = ',';
  p = write_int(p, q.output_tokens), *p++ = ',';
  p = write_scaled(p, q.first_scheduled_ns - q.arrival_ns, 6), *p++ = ',';
  p = write_scaled(p, q.first_token_ns - q.arrival_ns, 6), *p++ = ',';
  p = write_scaled(p, q.last_token_ns - q.arrival_ns, 6), *p++ = ',';
  if (q.output_tokens > 1) p = write_fixed(p, (q.last_token_ns - q.first_token_ns) / 1e6 / (q.output_tokens - 1), 6);
  *p++ = ',';
  p = write_fixed(p, e / q.output_tokens, 6), *p++ = ',';
  p = write_scaled(p, q.max_gap_ns, 6), *p++ = ',';
  p = write_int(p, q.preemptions), *p++ = '\n';
  b.resize(at + static_cast<size_t>(p - start));
  csv_->maybe_flush();
}

void ServingRecords::close() {
  if (closed_) return;
  closed_ = true;
  if (!csv_) return;
  for (size_t k = 0; k < state_.size(); ++k)
    if (state_[k] == 1) row(waiting_[k]);
  state_.clear();
  waiting_.clear();
  rec_->close_stream(*csv_);
}

void report_serving(const ServingResults& res, ServingRecords& records, const std::string& workload_description,
                    Recorder& rec, bool timeseries_csv, const std::string& scope) {
  const std::string file_prefix = scope.empty() ? "" : scope + ".";
  auto summary = [&](std::string line) { rec.summary(scope.empty() ? std::move(line) : fmt::format("[{}] {}", scope, line)); };
  records.close();
  const ServingRecords& R = records;
  const int64_t out_tokens = R.out_tokens, in_tokens = R.in_tokens, preemptions = R.preemptions, cached_in = R.cached_in;
  const int64_t out_tokens_lc = R.out_tokens_lc, later_prompt = R.later_prompt, reused = R.reused, later_turns = R.later_turns,
                later_hits = R.later_hits;
  const double span_s = std::max<int64_t>(1, res.last_delivery_ns - std::max<int64_t>(0, res.first_arrival_ns)) / 1e9;
  const GapSummary& gaps = res.gaps;
  Json gap = Json::object();
  gap["count"] = gaps.count;
  if (gaps.count) {
    gap["mean"] = gaps.mean / 1e6;
    gap["p50"] = gaps.p50 / 1e6;
    gap["p90"] = gaps.p90 / 1e6;
    gap["p95"] = gaps.p95 / 1e6;
    gap["p99"] = gaps.p99 / 1e6;
    gap["max"] = gaps.max / 1e6;
  }

  double busy = 0, batch_int = 0, kv_int = 0, kv_max = 0;
  double cut_iters = 0;  // the parts of iterations in flight at the horizon that lie past it
  int64_t iters = 0, pre_it = 0, dec_it = 0, mix_it = 0, max_batch = 0, swaps = 0;
  double swap_bytes = 0;
  const double end = static_cast<double>(std::max<int64_t>(1, res.end_ns));
  Json per_replica = Json::array();
  for (size_t i = 0; i < res.engines.size(); ++i) {
    const auto& s = res.engines[i];
    busy += static_cast<double>(s.busy_ns);
    batch_int += s.batch_time_integral;
    kv_int += s.kv_time_integral;
    kv_max = std::max(kv_max, s.kv_max);
    iters += s.iterations;
    cut_iters += s.cut_fraction;
    pre_it += s.prefill_iterations;
    dec_it += s.decode_iterations;
    mix_it += s.mixed_iterations;
    max_batch = std::max(max_batch, s.max_batch);
    swaps += s.preemptions;
    swap_bytes += s.swap_bytes;
    if (res.engines.size() <= 16)
      per_replica.push_back(Json{{"replica", i}, {"iterations", s.iterations}, {"utilization", s.busy_ns / end},
                                 {"mean_batch", s.busy_ns ? s.batch_time_integral / s.busy_ns : 0.0},
                                 {"kv_occupancy_mean", s.kv_time_integral / end}, {"kv_occupancy_max", s.kv_max},
                                 {"preemptions", s.preemptions}});
  }
  (void)swaps;
  const double nrep = static_cast<double>(res.replicas);
  const double engines = static_cast<double>(res.engines.size());

  const int64_t served = res.completed - res.rejected_too_long - res.failed - res.rejected_overload - res.rejected_late;  // completed with an answer
  if (served != R.answered_count)
    throw std::logic_error(fmt::format("internal: {} requests answered but {} records handed to the recorder", served, R.answered_count));
  Json m = Json::object();
  m["workload"] = workload_description;
  m["deployment"] = Json{{"hardware", res.hardware}, {"model", res.model}, {"replicas", res.replicas},
                         {"tensor_parallel", res.tensor_parallel}, {"pipeline_parallel", res.pipeline_parallel},
                         {"topology", res.topology.empty() ? std::string("none (nodes x gpus_per_node)") : res.topology},
                         {"tp_allreduce", res.tp_allreduce},
                         {"cost_source", res.cost_source},
                         {"d2h", res.d2h_source}};
  if (res.own_prefill_pool())
    m["deployment"]["prefill_pool"] = Json{{"hardware", res.prefill_hardware}, {"tensor_parallel", res.prefill_tensor_parallel},
                                           {"scheduler", res.prefill_scheduler}, {"cost_source", res.prefill_cost_source},
                                           {"weights_bytes_per_gpu", res.prefill_weights_per_gpu},
                                           {"kv_cache_bytes_per_gpu", res.prefill_kv_per_gpu},
                                           {"kv_tokens_per_replica", res.prefill_kv_tokens_per_replica}};
  m["requests"] = Json{{"completed", served}, {"rejected_too_long", res.rejected_too_long},
                       {"rejected_overload", res.rejected_overload},
                       {"truncated_to_context", res.truncated_to_context},
                       {"announced", res.announced},
                       {"truncated_by_max_sim_time", res.truncated},
                       {"in_flight_max", res.in_flight_high_water}};
  if (!res.classes.empty()) m["requests"]["rejected_late"] = res.rejected_late;
  if (res.tp_allreduces + res.stage_handoffs > 0) {
    // The stages' traffic on the fabric, per iteration's stage pass: what contention stretches.
    auto mean_ms = [](int64_t ns, int64_t n) { return n ? static_cast<double>(ns) / 1e6 / static_cast<double>(n) : 0.0; };
    m["communication"] = Json{{"tp_allreduces", res.tp_allreduces},
                              {"tp_allreduce_ms_mean", mean_ms(res.tp_allreduce_ns, res.tp_allreduces)},
                              {"stage_handoffs", res.stage_handoffs},
                              {"stage_handoff_ms_mean", mean_ms(res.stage_handoff_ns, res.stage_handoffs)}};
  }
  if (res.moe.experts > 0) {
    const auto& mo = res.moe;
    double mx = 0, sum = 0;
    for (double x : mo.device_load) mx = std::max(mx, x), sum += x;
    Json j{{"experts", mo.experts}, {"experts_per_token", mo.experts_per_token}, {"shared_experts", mo.shared_experts},
           {"moe_layers", mo.moe_layers}, {"active_parameters", mo.active_parameters}, {"expert_parallel", mo.expert_parallel},
           {"dispatch", mo.dispatch}, {"routing", mo.routing}, {"redundant_experts", mo.redundant_experts},
           {"device_load", mo.device_load},
           {"device_load_max_over_mean", sum > 0 ? mx * static_cast<double>(mo.device_load.size()) / sum : 0.0}};
    if (mo.data_parallel_attention) j["data_parallel_attention"] = true;
    if (mo.prefill_data_parallel_attention) j["prefill_data_parallel_attention"] = true;
    if (mo.two_batch_overlap) {
      j["two_batch_overlap"] = true;
      j["overlapped_iterations"] = mo.overlapped_iterations;
    }
    if (mo.alltoall_passes > 0) {
      j["alltoalls"] = mo.alltoalls;
      j["alltoall_ms_mean"] = static_cast<double>(mo.alltoall_ns) / 1e6 / static_cast<double>(mo.alltoall_passes);  // per stage pass
      // per MoE layer: alltoalls counts a dispatch and a combine for each layer a pass carried
      j["alltoall_us_per_layer"] = static_cast<double>(mo.alltoall_ns) / 1e3 / (static_cast<double>(mo.alltoalls) / 2);
      if (mo.decode_alltoalls > 0)
        j["decode_alltoall_us_per_layer"] = static_cast<double>(mo.decode_alltoall_ns) / 1e3 / (static_cast<double>(mo.decode_alltoalls) / 2);
      if (mo.prefill_alltoalls > 0)
        j["prefill_alltoall_us_per_layer"] = static_cast<double>(mo.prefill_alltoall_ns) / 1e3 / (static_cast<double>(mo.prefill_alltoalls) / 2);
    }
    m["moe"] = std::move(j);
  }
  if (!res.speculative.method.empty()) {
    const auto& sp = res.speculative;
    Json gains = Json::object();
    for (const auto& [b, g] : sp.gain_by_batch) gains[std::to_string(b)] = g;
    int64_t busy = 0;
    for (const auto& e : res.engines) busy += e.busy_ns;
    m["speculative"] = Json{{"method", sp.method},
                            {"drafter", sp.drafter},
                            {"tokens", sp.tokens},
                            {"accepted_distribution", sp.distribution},
                            {"expected_tokens_per_step", sp.expected_tokens_per_step},
                            {"steps", sp.steps},
                            {"acceptance_rate", sp.proposed ? static_cast<double>(sp.accepted) / static_cast<double>(sp.proposed) : 0.0},
                            {"tokens_per_step", sp.steps ? static_cast<double>(sp.tokens_made) / static_cast<double>(sp.steps) : 0.0},
                            {"draft_share_of_busy", busy > 0 ? sp.draft_ns / static_cast<double>(busy) : 0.0},
                            {"gain_context", sp.context},
                            {"gain_by_batch", std::move(gains)},
                            {"break_even_batch", sp.break_even_batch},
                            {"break_even_searched_to", sp.break_even_limit}};
  }
  if (res.faults) {
    // Under failures: what the failures cost the requests, and how long replicas were out.
    int64_t in_flight = res.announced - res.completed;
    double out_mean = 0;
    for (int64_t o : res.outages_ns) out_mean += static_cast<double>(o);
    if (!res.outages_ns.empty()) out_mean /= static_cast<double>(res.outages_ns.size());
    const double rep_time = static_cast<double>(res.end_ns) * res.replicas;
    m["requests"]["failed"] = res.failed;
    m["requests"]["failed_reason"] = res.failed ? "no healthy replica within the failover timeout" : "";
    m["requests"]["in_flight_at_end"] = in_flight;
    m["requests"]["retried"] = res.retried;
    m["requests"]["re_prefilled"] = res.reprefilled;
    m["faults"] = Json{{"replica_failures", res.replica_failures},
                       {"availability", rep_time > 0 ? 1 - static_cast<double>(res.replica_down_ns) / rep_time : 1.0},
                       {"time_to_recover_s_mean", out_mean / 1e9},
                       {"outages_completed", res.outages_ns.size()}};
  }
  Json lat = Json::object();
  lat["ttft"] = R.ttft.json();
  lat["e2e"] = R.e2e.json();
  lat["tpot"] = R.tpot.json();
  lat["itl_llmperf"] = R.itl.json();
  lat["itl_llmperf_counted_tokens"] = R.itl_lc.json();  // per output token as llmperf counts them (Llama tokenizer)
  lat["tpot_llmperf_counted_tokens"] = R.tpot_lc.json();
  lat["queueing_delay"] = R.queue.json();
  lat["inter_token_gap"] = gap;
  lat["max_gap_per_request"] = R.max_gap.json();
  m["latency_ms"] = lat;
  m["percentiles"] = R.ttft.exact() ? fmt::format("exact (every value kept; a 0.1% sketch past {} requests)", StreamingSummary::kExactLimit)
                                    : std::string("sketch: percentiles within 0.1% (relative); count, mean, min, max, stddev exact; "
                                                  "inter_token_gap: log histogram within 0.8%");
  m["throughput"] = Json{{"output_tokens_per_s", out_tokens / span_s}, {"input_tokens_per_s", in_tokens / span_s},
                         {"requests_per_s", (served) / span_s}, {"span_s", span_s},
                         {"output_tokens", out_tokens}, {"input_tokens", in_tokens},
                         {"output_tokens_llmperf_counted", out_tokens_lc},
                         {"output_tokens_per_s_llmperf_counted", out_tokens_lc / span_s},
                         {"llmperf_tokens_per_model_token", 1 / res.model_tokens_per_llama}};
  // GPUs paid for: the pool's, or an autoscaled pool's mean over the run.
  const double gpus = res.autoscaled && res.own_prefill_pool() ? res.gpu_s / (std::max<int64_t>(1, res.end_ns) / 1e9)
                     : res.autoscaled ? res.replica_s / (std::max<int64_t>(1, res.end_ns) / 1e9) * res.tensor_parallel * res.pipeline_parallel
                                     : res.pool_gpus();
  if (R.slo_ttft_ns > 0 || R.slo_tpot_ns > 0) {
    // Goodput: answered requests that met both objectives, per second of the measured span and
    // per GPU; attainment over every request that ended (a rejected or failed one met nothing).
    const double ended = static_cast<double>(res.completed);
    m["slo"] = Json{{"ttft_ms", R.slo_ttft_ns / 1e6}, {"tpot_ms", R.slo_tpot_ns / 1e6},
                    {"met", R.slo_met}, {"ttft_met", R.slo_ttft_met}, {"tpot_met", R.slo_tpot_met},
                    {"attainment", ended > 0 ? static_cast<double>(R.slo_met) / ended : 0.0},
                    {"goodput_requests_per_s", R.slo_met / span_s},
                    {"goodput_requests_per_s_per_gpu", R.slo_met / span_s / gpus},
                    {"gpus", gpus}};
  }
  if (res.autoscaled) {
    const double run_s = std::max<int64_t>(1, res.end_ns) / 1e9;
    m["autoscaling"] = Json{{"policy", res.autoscale_policy},
                            {"min_replicas", res.autoscale_min},
                            {"max_replicas", res.replicas},
                            {"replica_hours", res.replica_s / 3600},
                            {"replicas_mean", res.replica_s / run_s},
                            {"replicas_most", res.most_replicas},
                            {"scale_ups", res.scale_ups},
                            {"scale_downs", res.scale_downs},
                            {"under_provisioned_s", res.under_provisioned_ns / 1e9}};
    Json tl = Json::array();  // [time s, replicas paid] at each change (the first 10,000)
    for (size_t i = 0; i < res.scale_timeline.size() && i < 10000; ++i)
      tl.push_back(Json::array({res.scale_timeline[i].first / 1e9, res.scale_timeline[i].second}));
    m["autoscaling"]["timeline"] = tl;
    if (res.autoscale_prefill_min > 0) {
      m["autoscaling"]["prefill_min_replicas"] = res.autoscale_prefill_min;
      m["autoscaling"]["prefill_replicas_mean"] = res.prefill_replica_s / run_s;
      m["autoscaling"]["decode_replicas_mean"] = (res.replica_s - res.prefill_replica_s) / run_s;
    }
  }
  if (!res.classes.empty()) {
    // Each class: its objectives, how many of its requests ended and met them, its goodput;
    // Jain's index of the classes' attainments (1: all served alike; 1/n: one class alone).
    Json cls = Json::object();
    double sum = 0, sum_sq = 0;
    for (size_t i = 0; i < res.classes.size() && i < R.per_class.size(); ++i) {
      const ServingClass& c = res.classes[i];
      const auto& k = R.per_class[i];
      const double att = k.ended ? static_cast<double>(k.met) / static_cast<double>(k.ended) : 0.0;
      sum += att;
      sum_sq += att * att;
      cls[c.name] = Json{{"priority", c.priority}, {"slo_ttft_ms", c.ttft_ns / 1e6}, {"slo_tpot_ms", c.tpot_ns / 1e6},
                         {"requests", k.ended}, {"answered", k.answered}, {"met", k.met}, {"attainment", att},
                         {"goodput_requests_per_s", k.met / span_s},
                         {"ttft_ms", k.ttft.json()}, {"tpot_ms", k.tpot.json()}};
    }
    m["classes"] = cls;
    const double n = static_cast<double>(res.classes.size());
    m["fairness"] = Json{{"jain_attainment", sum_sq > 0 ? sum * sum / (n * sum_sq) : 1.0},
                         {"priority_scheduling", res.priority_scheduling}};
  }
  m["memory_per_gpu"] = Json{{"capacity_bytes", res.capacity_per_gpu}, {"weights_bytes", res.weights_per_gpu},
                             {"activation_bytes", res.activation_per_gpu}, {"kv_cache_bytes", res.kv_per_gpu}};
  m["kv_cache"] = Json{{"block_size", res.block_size}, {"blocks_per_replica", res.blocks_per_replica},
                       {"virtual_engines_per_replica", res.pipeline_parallel}, {"blocks_per_engine", res.blocks_per_engine},
                       {"tokens_per_replica", res.kv_tokens_per_replica},
                       {"bytes_per_token", res.kv_bytes_per_token},
                       {"occupancy_mean", kv_int / end / engines}, {"occupancy_max", kv_max},
                       {"preemptions", preemptions}, {"swap_bytes", swap_bytes},
                       {"later_turns", later_turns}, {"later_turn_hits", later_hits},
                       {"reuse_hit_rate", later_turns ? static_cast<double>(later_hits) / later_turns : 0.0},
                       {"reused_history_fraction", later_prompt ? static_cast<double>(reused) / later_prompt : 0.0}};
  if (R.prefix_requests > 0)
    m["kv_cache"]["prefix_caching"] =
        Json{{"requests_with_prefix", R.prefix_requests},
             {"hits", R.prefix_hits},
             {"hit_rate", static_cast<double>(R.prefix_hits) / static_cast<double>(R.prefix_requests)},
             {"prefix_tokens", R.prefix_tokens},
             {"tokens_saved", R.prefix_tokens_saved},
             {"saved_fraction_of_prefix_tokens",
              R.prefix_tokens ? static_cast<double>(R.prefix_tokens_saved) / static_cast<double>(R.prefix_tokens) : 0.0}};
  if (res.kv_host_cache_bytes > 0)
    m["kv_cache"]["host_tier"] = Json{{"capacity_bytes_per_replica", res.kv_host_cache_bytes},
                                      {"prefix_claims_from_hbm", res.kv_claims_hbm},
                                      {"prefix_claims_from_host", res.kv_claims_host},
                                      {"offloaded_bytes", res.kv_offloaded_bytes},
                                      {"fetched_bytes", res.kv_fetched_bytes},
                                      {"dropped_bytes", res.kv_dropped_bytes}};
  if (res.kv_ssd_cache_bytes > 0) {
    if (res.kv_host_cache_bytes <= 0)  // the HBM claims are counted with the tiers below
      m["kv_cache"]["host_tier"] = Json{{"capacity_bytes_per_replica", 0.0}, {"prefix_claims_from_hbm", res.kv_claims_hbm},
                                        {"prefix_claims_from_host", 0}, {"offloaded_bytes", 0.0},
                                        {"fetched_bytes", res.kv_fetched_bytes}, {"dropped_bytes", res.kv_dropped_bytes}};
    m["kv_cache"]["ssd_tier"] = Json{{"capacity_bytes_per_replica", res.kv_ssd_cache_bytes},
                                     {"prefix_claims_from_ssd", res.kv_claims_ssd},
                                     {"recomputed_instead", res.kv_ssd_skipped},
                                     {"moved_down_bytes", res.kv_to_ssd_bytes},
                                     {"read_bytes", res.kv_ssd_read_bytes}};
  }
  if (res.kv_remote_cache_bytes > 0)
    m["kv_cache"]["remote_tier"] = Json{{"capacity_bytes", res.kv_remote_cache_bytes},
                                        {"prefix_claims_from_hbm", res.kv_claims_hbm},
                                        {"prefix_claims_from_remote", res.kv_claims_remote},
                                        {"conversation_fetches", res.kv_conversation_fetches},
                                        {"moved_in_bytes", res.kv_to_remote_bytes},
                                        {"fetched_bytes", res.kv_remote_fetched_bytes},
                                        {"dropped_bytes", res.kv_remote_dropped_bytes}};
  m["batching"] = Json{{"iterations", iters}, {"prefill_iterations", pre_it}, {"decode_iterations", dec_it},
                       {"mixed_iterations", mix_it}, {"mean_batch", busy > 0 ? batch_int / busy : 0.0},
                       {"max_batch", max_batch}, {"utilization", busy / end / nrep}};
  if (!res.prefill_slicing.empty()) {
    int64_t sliced = 0, slices = 0;
    for (const auto& st : res.engines) sliced += st.sliced_prefills, slices += st.prefill_slices;
    m["prefill_slicing"] = Json{{"policy", res.prefill_slicing}, {"sliced_prefills", sliced},
                                {"slices_mean", sliced ? static_cast<double>(slices) / static_cast<double>(sliced) : 0.0}};
  }
  // Beside the busy fraction, what the iterations achieve while busy: model FLOPs utilisation
  // (2 FLOPs per non-embedding parameter per computed token, attention left out, over the
  // datasheet peak of the replica's GPUs at the format its GEMMs run in) and the HBM bandwidth of the weight reads (each
  // iteration reads its GPU's weights once; KV-cache reads not counted, so a lower bound).
  const double gpus_per_replica = res.tensor_parallel * res.pipeline_parallel;
  // An MoE model: the parameters one token passes through (its experts_per_token experts).
  const double nonembed = (res.moe.experts > 0 ? res.moe.active_parameters : res.model_parameters) - res.model_embedding_parameters;
  const double model_flops = 2 * nonembed * static_cast<double>(in_tokens - cached_in + out_tokens);
  double mfu = busy > 0 ? model_flops / (busy / 1e9 * gpus_per_replica * res.peak_flops) : 0.0;
  // (An iteration cut at the horizon reads its weights only in the part of it that ran.)
  double weight_Bps = busy > 0 ? (static_cast<double>(iters) - cut_iters) * res.weights_per_gpu / (busy / 1e9) : 0.0;
  if (res.own_prefill_pool() && busy > 0) {
    // Two kinds of replica: each engine's busy time at its own GPUs' peak, its own weight reads.
    double peak_s = 0, weight_bytes = 0;
    for (size_t i = 0; i < res.engines.size(); ++i) {
      const bool pre = static_cast<int>(i) < res.prefill_replicas;
      const auto& e = res.engines[i];
      const double per = pre ? res.prefill_tensor_parallel : gpus_per_replica;
      peak_s += static_cast<double>(e.busy_ns) / 1e9 * per * (pre ? res.prefill_peak_flops : res.peak_flops);
      weight_bytes += (static_cast<double>(e.iterations) - e.cut_fraction) * (pre ? res.prefill_weights_per_gpu : res.weights_per_gpu);
    }
    mfu = model_flops / peak_s;
    weight_Bps = weight_bytes / (busy / 1e9);
  }
  m["batching"]["mfu"] = mfu;
  m["batching"]["hbm_weight_read_Bps_per_gpu"] = weight_Bps;
  if (!per_replica.empty()) m["replicas"] = per_replica;
  if (res.prefill_replicas > 0) {
    // Each pool's share of the work, and what the handoff between them cost.
    auto pool = [&](size_t from, size_t to) {
      double b = 0, kvi = 0, kvm = 0;
      int64_t it = 0;
      for (size_t i = from; i < to; ++i) {
        b += static_cast<double>(res.engines[i].busy_ns);
        kvi += res.engines[i].kv_time_integral;
        kvm = std::max(kvm, res.engines[i].kv_max);
        it += res.engines[i].iterations;
      }
      const double n = static_cast<double>(to - from);
      const double per = from == 0 && res.own_prefill_pool() ? res.prefill_tensor_parallel : gpus_per_replica;
      return Json{{"replicas", to - from}, {"gpus", n * per}, {"iterations", it}, {"utilization", b / end / n},
                  {"kv_occupancy_mean", kvi / end / n}, {"kv_occupancy_max", kvm}};
    };
    auto ms = [](const GapSummary& g) {
      Json j = Json{{"count", g.count}};
      if (g.count) {
        j["mean"] = g.mean / 1e6;
        j["p50"] = g.p50 / 1e6;
        j["p99"] = g.p99 / 1e6;
        j["max"] = g.max / 1e6;
      }
      return j;
    };
    const size_t split = static_cast<size_t>(res.prefill_replicas);
    m["disaggregation"] = Json{{"prefill", pool(0, split)},
                               {"decode", pool(split, res.engines.size())},
                               {"kv_transfers", res.kv_transfers},
                               {"kv_transfer_bytes", res.kv_transfer_bytes},
                               {"kv_transfer_ms", ms(res.kv_transfer_time)},
                               {"wait_for_decode_blocks_ms", ms(res.handoff_wait)}};
  }
  if (res.trace) {
    const int64_t traced_requests = std::min<int64_t>(res.trace_max_requests, served);
    m["trace"] = Json{{"iterations_traced", res.traced_iterations}, {"iterations", iters},
                      {"requests_traced", traced_requests}, {"requests", served},
                      {"to_trace_all", "outputs.trace_max_iterations and outputs.trace_max_requests"}};
  }
  m["simulated_s"] = res.end_ns / 1e9;
  m["events"] = res.events;
  if (scope.empty()) rec.metrics()["serving"] = m;
  else rec.metrics()["workloads"][scope] = m;

  if (timeseries_csv && !res.samples.empty()) {
    std::string ts = "t_s,running,waiting,swapped,kv_occupancy,busy_fraction\n";
    for (const auto& s : res.samples) {
      csv::put_fixed(ts, s.t_ns / 1e9, 6), ts += ',';
      csv::put_int(ts, s.running), ts += ',';
      csv::put_int(ts, s.waiting), ts += ',';
      csv::put_int(ts, s.swapped), ts += ',';
      csv::put_fixed(ts, s.kv_occupancy, 6), ts += ',';
      csv::put_fixed(ts, s.busy_fraction, 6), ts += '\n';
    }
    rec.file(file_prefix + "timeseries.csv", ts);
  }

  auto pct = [](const Json& s, const char* k) { return s.contains(k) ? s[k].get<double>() : 0.0; };
  // "1 × h100 (tp 4)" read as one GPU: say replicas and GPUs apart.
  const int gpus_per_rep = res.tensor_parallel * res.pipeline_parallel;
  if (res.own_prefill_pool()) {
    const int pre = res.prefill_replicas, dec = res.replicas - res.prefill_replicas;
    summary(fmt::format("{} on {} prefill replica{} × {} {} GPU{} (tp {}) and {} decode replica{} × {} {} GPU{} (tp {}) = {} GPUs; {}",
                        res.model, pre, pre == 1 ? "" : "s", res.prefill_tensor_parallel, res.prefill_hardware,
                        res.prefill_tensor_parallel == 1 ? "" : "s", res.prefill_tensor_parallel, dec, dec == 1 ? "" : "s", gpus_per_rep,
                        res.hardware, gpus_per_rep == 1 ? "" : "s", res.tensor_parallel, res.pool_gpus(), workload_description));
  } else {
    summary(fmt::format("{} on {} replica{} × {} {} GPU{} (tp {}, pp {}) = {} GPU{}; {}", res.model, res.replicas,
                        res.replicas == 1 ? "" : "s", gpus_per_rep, res.hardware, gpus_per_rep == 1 ? "" : "s",
                        res.tensor_parallel, res.pipeline_parallel, res.replicas * gpus_per_rep,
                        res.replicas * gpus_per_rep == 1 ? "" : "s", workload_description));
  }
  summary(fmt::format("requests {} completed{}{}{}; {:.1f} s simulated", served,
                          res.rejected_too_long ? fmt::format(", {} rejected as longer than a replica's KV cache", res.rejected_too_long) : "",
                          res.rejected_overload ? fmt::format(", {} rejected as overload (more than {} in flight)", res.rejected_overload, res.max_in_flight) : "",
                          res.truncated ? " (stopped at max_sim_time)" : "", res.end_ns / 1e9));
  int64_t iterations = 0;
  for (const auto& e : res.engines) iterations += e.iterations;
  summary(fmt::format("{} events, {} iterations; {} of them took the steady-decode shortcut (computed without an event "
                      "each; --no-fast-forward turns it off and gives the same results)",
                      res.events, iterations, res.fast_forwarded));
  if (res.faults)
    summary(fmt::format("faults: {} replica failures; {} requests failed, {} retried ({} prefilled again); replicas available {:.2f}%",
                        res.replica_failures, res.failed, res.retried, res.reprefilled,
                        100 * m["faults"]["availability"].get<double>()));
  if (res.prefill_replicas > 0) {
    const Json& d = m["disaggregation"];
    summary(fmt::format("disaggregated: {} prefill + {} decode replicas, utilization {:.0f}% and {:.0f}%; {} KV caches handed over "
                        "({}), each copy {:.3f} ms mean after {:.3f} ms waiting for decode blocks",
                        res.prefill_replicas, res.replicas - res.prefill_replicas, 100 * d["prefill"]["utilization"].get<double>(),
                        100 * d["decode"]["utilization"].get<double>(), res.kv_transfers, format_bytes(res.kv_transfer_bytes),
                        res.kv_transfer_time.mean / 1e6, res.handoff_wait.mean / 1e6));
  }
  if (m.contains("communication"))
    summary(fmt::format("on the fabric: {} tensor-parallel all-reduce passes, {:.3f} ms each on average (a stage's all-reduces "
                        "of one iteration); {} stage hand-offs, {:.3f} ms each",
                        res.tp_allreduces, m["communication"]["tp_allreduce_ms_mean"].get<double>(), res.stage_handoffs,
                        m["communication"]["stage_handoff_ms_mean"].get<double>()));
  if (m.contains("moe")) {
    const Json& j = m["moe"];
    std::string line = fmt::format("experts: {} of {} per token on {} MoE layers ({:.1f}B of {:.1f}B parameters active); {}; routing {}, "
                                   "busiest device {:.2f}x the mean",
                                   res.moe.experts_per_token, res.moe.experts, res.moe.moe_layers, res.moe.active_parameters / 1e9,
                                   res.model_parameters / 1e9,
                                   res.moe.expert_parallel ? fmt::format("expert parallel over {} devices, dispatch by {}", res.tensor_parallel, res.moe.dispatch)
                                                           : std::string("each expert split over the tensor-parallel devices"),
                                   res.moe.routing, j["device_load_max_over_mean"].get<double>());
    if (j.contains("alltoalls"))
      line += fmt::format("; {} dispatch/combine all-to-alls on the fabric, {:.3f} ms a stage pass (its MoE layers' all-to-alls)",
                          res.moe.alltoalls, j["alltoall_ms_mean"].get<double>());
    if (res.moe.data_parallel_attention)
      line += fmt::format("; data-parallel attention: each of the {} devices attends over its own sequences, whose KV cache only it holds",
                          res.tensor_parallel);
    if (res.moe.prefill_data_parallel_attention)
      line += "; the prefill pool's devices each prefill their own prompts (data-parallel attention)";
    if (res.moe.two_batch_overlap)
      line += fmt::format("; two-batch overlap: {} iterations as two micro-batches, their communication under each other's compute",
                          res.moe.overlapped_iterations);
    summary(line);
  }
  if (m.contains("speculative")) {
    const Json& j = m["speculative"];
    const auto& sp = res.speculative;
    std::string gains;
    for (const auto& [b, g] : sp.gain_by_batch) gains += fmt::format("{}{:.2f}x at {}", gains.empty() ? "" : ", ", g, b);
    summary(fmt::format("speculative decoding ({}, {} drafts a step): {:.2f} tokens a verification step ({:.2f} expected; {:.1f}% of "
                        "the drafts accepted); the drafter took {:.1f}% of the busy time; against plain decode at context {} (cost "
                        "model alone): {}; {}",
                        sp.method == "draft" ? fmt::format("draft model {}", sp.drafter) : sp.method, sp.tokens,
                        j["tokens_per_step"].get<double>(), sp.expected_tokens_per_step, 100 * j["acceptance_rate"].get<double>(),
                        100 * j["draft_share_of_busy"].get<double>(), sp.context, gains,
                        sp.break_even_batch > 0 ? fmt::format("it stops paying from a batch of {}", sp.break_even_batch)
                                                : fmt::format("it pays up to a batch of {}", sp.break_even_limit)));
  }
  if (res.autoscaled)
    summary(fmt::format("autoscaling ({}): {:.2f} replicas on average ({} to {}, at most {} at once), {:.3f} replica-hours; {} "
                        "scale-ups, {} scale-downs; {:.0f} s under-provisioned",
                        res.autoscale_policy, m["autoscaling"]["replicas_mean"].get<double>(), res.autoscale_min + res.autoscale_prefill_min,
                        res.replicas, res.most_replicas, res.replica_s / 3600, res.scale_ups, res.scale_downs, res.under_provisioned_ns / 1e9));
  if (res.autoscaled && res.autoscale_prefill_min > 0)
    summary(fmt::format("  of them {:.2f} prefill and {:.2f} decode replicas on average, each pool scaled on its own signal",
                        m["autoscaling"]["prefill_replicas_mean"].get<double>(), m["autoscaling"]["decode_replicas_mean"].get<double>()));
  if (m.contains("classes")) {
    for (const auto& [name, c] : m["classes"].items())
      summary(fmt::format("class {} (priority {}): {} of {} requests met TTFT <= {} ms and TPOT <= {} ms ({:.1f}%), TTFT p99 {:.1f} ms",
                          name, c["priority"].get<int>(), c["met"].get<int64_t>(), c["requests"].get<int64_t>(),
                          c["slo_ttft_ms"].get<double>(), c["slo_tpot_ms"].get<double>(), 100 * c["attainment"].get<double>(),
                          c["ttft_ms"].contains("p99") ? c["ttft_ms"]["p99"].get<double>() : 0.0));
    summary(fmt::format("Jain fairness of the classes' attainment {:.3f}{}", m["fairness"]["jain_attainment"].get<double>(),
                        res.rejected_late ? fmt::format("; {} requests shed as late (their TTFT objective passed before they were scheduled)", res.rejected_late) : ""));
  }
  if (R.prefix_requests > 0)
    summary(fmt::format("shared prefixes: {} of {} requests with one found it cached ({:.1f}%); {} of its {} tokens not computed again",
                        R.prefix_hits, R.prefix_requests, 100.0 * static_cast<double>(R.prefix_hits) / static_cast<double>(R.prefix_requests),
                        R.prefix_tokens_saved, R.prefix_tokens));
  if (m.contains("slo"))
    summary(fmt::format("SLO (TTFT <= {} ms, TPOT <= {} ms): {:.1f}% of requests met both; goodput {:.3f} req/s, {:.4f} req/s per GPU",
                        R.slo_ttft_ns / 1e6, R.slo_tpot_ns / 1e6, 100 * m["slo"]["attainment"].get<double>(),
                        m["slo"]["goodput_requests_per_s"].get<double>(), m["slo"]["goodput_requests_per_s_per_gpu"].get<double>()));
  summary(fmt::format("TTFT  ms  p50 {:8.2f}  p90 {:8.2f}  p99 {:8.2f}  mean {:8.2f}", pct(lat["ttft"], "p50"),
                          pct(lat["ttft"], "p90"), pct(lat["ttft"], "p99"), pct(lat["ttft"], "mean")));
  const uint64_t single_token = R.ttft.count() - R.tpot.count();
  if (R.tpot.count() == 0)
    summary(fmt::format("TPOT  ms  none: all {} requests had a single output token, so no gap between tokens", single_token));
  else
  summary(fmt::format("TPOT  ms  p50 {:8.2f}  p90 {:8.2f}  p99 {:8.2f}  mean {:8.2f}{}", pct(lat["tpot"], "p50"),
                          pct(lat["tpot"], "p90"), pct(lat["tpot"], "p99"), pct(lat["tpot"], "mean"),
                          single_token ? fmt::format("  ({} single-token requests have no TPOT: left out)", single_token) : ""));
  summary(fmt::format("E2E   ms  p50 {:8.1f}  p90 {:8.1f}  p99 {:8.1f}  mean {:8.1f}", pct(lat["e2e"], "p50"),
                          pct(lat["e2e"], "p90"), pct(lat["e2e"], "p99"), pct(lat["e2e"], "mean")));
  summary(fmt::format("throughput {:.1f} output tok/s, {:.2f} req/s; mean batch {:.1f}, utilization {:.0f}% (of the time "
                          "replicas run an iteration)",
                          out_tokens / span_s, (served) / span_s, busy > 0 ? batch_int / busy : 0.0,
                          100 * busy / end / nrep));
  summary(fmt::format("  as llmperf counts (Llama tokenizer): {:.1f} output tok/s, ITL mean {:.2f} ms; the GPUs were busy "
                          "{:.0f}% of the time but used {:.1f}% of their peak FLOP/s (MFU) while busy, and read weights at {} per GPU",
                          out_tokens_lc / span_s, R.itl_lc.count() == 0 ? 0.0 : pct(lat["itl_llmperf_counted_tokens"], "mean"),
                          100 * busy / end / nrep, 100 * mfu, format_bandwidth(weight_Bps)));
  const std::string decode_pool = res.own_prefill_pool() ? " (the decode pool)" : "";
  summary(fmt::format("costs{}: {}; ceilings {:.0f} TFLOP/s, {}; d2h {}", decode_pool, res.cost_source, res.effective_flops / 1e12,
                      format_bandwidth(res.effective_bandwidth_Bps), res.d2h_source));
  if (res.own_prefill_pool())
    summary(fmt::format("the prefill pool: {} (tp {}, {}); costs: {}; memory/GPU: weights {}, KV {} ({} tokens/replica)", res.prefill_hardware,
                        res.prefill_tensor_parallel, res.prefill_scheduler, res.prefill_cost_source, format_bytes(res.prefill_weights_per_gpu),
                        format_bytes(res.prefill_kv_per_gpu), res.prefill_kv_tokens_per_replica));
  summary(fmt::format("memory/GPU{}: weights {}, KV {} ({} tokens/replica); KV occupancy mean {:.1f}% max {:.1f}%; "
                          "preemptions {}{}",
                          decode_pool, format_bytes(res.weights_per_gpu), format_bytes(res.kv_per_gpu), res.kv_tokens_per_replica,
                          100 * kv_int / end / engines, 100 * kv_max, preemptions,
                          later_turns ? fmt::format("; KV reuse hit rate {:.0f}%", 100.0 * later_hits / later_turns) : ""));
}

}  // namespace sluice
