#include "recorder/serving_report.h"

#include <fmt/format.h>

#include "config/schema.h"
#include "config/units.h"
#include "workloads/serving/serving_sim.h"
#include "workloads/serving/workload.h"

namespace sluice {

using serving::Request;

// Paths inside the sluice tree are reported relative to it, so outputs do not depend on
// where the checkout lives.
static std::string relative_to_root(const std::string& p) {
  const std::string root = catalog_root();
  if (p.rfind(root, 0) == 0) {
    std::string rel = p.substr(root.size());
    while (!rel.empty() && rel.front() == '/') rel.erase(rel.begin());
    return rel;
  }
  return p;
}

int64_t llmperf_counted_tokens(int64_t model_tokens, double model_per_llama) {
  return model_per_llama > 0 ? std::llround(static_cast<double>(model_tokens) / model_per_llama) : model_tokens;
}

void report_serving(const serving::ServingSim& sim, const std::string& workload_description, Recorder& rec,
                    bool requests_csv, bool timeseries_csv, const std::string& scope) {
  const std::string file_prefix = scope.empty() ? "" : scope + ".";
  auto summary = [&](std::string line) { rec.summary(scope.empty() ? std::move(line) : fmt::format("[{}] {}", scope, line)); };
  const auto& cfg = sim.config();
  // llmperf's counting: its Llama tokenizer over the returned text (tokenizers.yaml ratios).
  const double per_llama = serving::TokenizerTable::ratio("llama", cfg.model.tokenizer, Origin{"model", 0, 0}, "tokenizer");
  std::vector<double> itl_lc, tpot_lc;
  int64_t out_tokens_lc = 0, cached_in = 0;
  const auto& reqs = sim.requests();
  std::vector<double> ttft, e2e, tpot, itl, queue, max_gap;
  int64_t out_tokens = 0, in_tokens = 0, preemptions = 0;
  int64_t later_prompt = 0, reused = 0, later_turns = 0, later_hits = 0;
  std::string csv =
      "id,conversation,turn,replica,arrival_s,input_tokens,history_tokens,cached_tokens,output_tokens,"
      "queue_ms,ttft_ms,e2e_ms,tpot_ms,itl_ms,max_gap_ms,preemptions\n";
  for (const Request& q : reqs) {
    if (q.state != serving::ReqState::Done || q.rejected || q.failed) continue;
    const double t = (q.first_token_ns - q.arrival_ns) / 1e6;
    const double e = (q.last_token_ns - q.arrival_ns) / 1e6;
    // TPOT: mean gap between tokens after the first. ITL (llmperf): e2e / output tokens, TTFT included.
    const double tp = q.output_tokens > 1 ? (q.last_token_ns - q.first_token_ns) / 1e6 / (q.output_tokens - 1) : 0.0;
    const double il = e / q.output_tokens;
    const double qd = (q.first_scheduled_ns - q.arrival_ns) / 1e6;
    ttft.push_back(t);
    e2e.push_back(e);
    if (q.output_tokens > 1) tpot.push_back(tp);
    itl.push_back(il);
    queue.push_back(qd);
    max_gap.push_back(q.max_gap_ns / 1e6);
    out_tokens += q.output_tokens;
    in_tokens += q.prompt_len();
    cached_in += q.cached_tokens;
    const int64_t lc = llmperf_counted_tokens(q.output_tokens, per_llama);
    out_tokens_lc += lc;
    itl_lc.push_back(e / static_cast<double>(std::max<int64_t>(1, lc)));
    if (lc > 1) tpot_lc.push_back((q.last_token_ns - q.first_token_ns) / 1e6 / static_cast<double>(lc - 1));
    preemptions += q.preemptions;
    if (q.turn > 0) {
      ++later_turns;
      later_prompt += q.history_tokens;
      reused += q.cached_tokens;
      later_hits += q.cached_tokens > 0;
    }
    // A single-token request has no gap between tokens: its TPOT is undefined, so it is left
    // out of the TPOT percentiles and its tpot_ms cell is empty (not 0).
    if (requests_csv)
      csv += fmt::format("{},{},{},{},{:.9f},{},{},{},{},{:.6f},{:.6f},{:.6f},{},{:.6f},{:.6f},{}\n", q.id,
                         q.conversation, q.turn, q.replica, q.arrival_ns / 1e9, q.input_tokens, q.history_tokens,
                         q.cached_tokens, q.output_tokens, qd, t, e, q.output_tokens > 1 ? fmt::format("{:.6f}", tp) : std::string(), il,
                         q.max_gap_ns / 1e6, q.preemptions);
  }
  const double span_s = std::max<int64_t>(1, sim.last_delivery_ns() - std::max<int64_t>(0, sim.first_arrival_ns())) / 1e9;
  const auto& gaps = sim.gaps();
  Json gap = Json::object();
  gap["count"] = gaps.count();
  if (gaps.count()) {
    gap["mean"] = gaps.mean() / 1e6;
    gap["p50"] = gaps.percentile(50) / 1e6;
    gap["p90"] = gaps.percentile(90) / 1e6;
    gap["p95"] = gaps.percentile(95) / 1e6;
    gap["p99"] = gaps.percentile(99) / 1e6;
    gap["max"] = gaps.max() / 1e6;
  }

  double busy = 0, batch_int = 0, kv_int = 0, kv_max = 0;
  int64_t iters = 0, pre_it = 0, dec_it = 0, mix_it = 0, max_batch = 0, swaps = 0;
  double swap_bytes = 0;
  const double end = static_cast<double>(std::max<int64_t>(1, sim.end_ns()));
  Json per_replica = Json::array();
  for (size_t i = 0; i < sim.replica_stats().size(); ++i) {
    const auto& s = sim.replica_stats()[i];
    busy += static_cast<double>(s.busy_ns);
    batch_int += s.batch_time_integral;
    kv_int += s.kv_time_integral;
    kv_max = std::max(kv_max, s.kv_max);
    iters += s.iterations;
    pre_it += s.prefill_iterations;
    dec_it += s.decode_iterations;
    mix_it += s.mixed_iterations;
    max_batch = std::max(max_batch, s.max_batch);
    swaps += sim.replicas()[i]->preemptions;
    swap_bytes += sim.replicas()[i]->swap_bytes;
    if (sim.replica_stats().size() <= 16)
      per_replica.push_back(Json{{"replica", i}, {"iterations", s.iterations}, {"utilization", s.busy_ns / end},
                                 {"mean_batch", s.busy_ns ? s.batch_time_integral / s.busy_ns : 0.0},
                                 {"kv_occupancy_mean", s.kv_time_integral / end}, {"kv_occupancy_max", s.kv_max},
                                 {"preemptions", sim.replicas()[i]->preemptions}});
  }
  const double nrep = static_cast<double>(cfg.replicas);
  const auto& mem = sim.memory();

  const int64_t served = sim.completed() - sim.rejected() - sim.failed();  // completed with an answer
  Json m = Json::object();
  m["workload"] = workload_description;
  m["deployment"] = Json{{"hardware", cfg.hardware.name}, {"model", cfg.model.name}, {"replicas", cfg.replicas},
                         {"tensor_parallel", cfg.tensor_parallel}, {"pipeline_parallel", cfg.pipeline_parallel},
                         {"topology", cfg.topology_name.empty() ? std::string("none (nodes x gpus_per_node)") : cfg.topology_name},
                         {"tp_allreduce", sim.on_fabric() ? "flows on the topology, every iteration" : cfg.tensor_parallel > 1 || cfg.pipeline_parallel > 1 ? "analytic ring over the interconnect" : "none (tp 1)"},
                         {"cost_tables", cfg.tables_dir.empty() ? std::string("none (roofline)") : relative_to_root(cfg.tables_dir)},
                         {"d2h", cfg.last_mile.d2h_source}};
  m["requests"] = Json{{"completed", served}, {"rejected_too_long", sim.rejected()},
                       {"announced", cfg.workload->total_requests()},
                       {"truncated_by_max_sim_time", sim.truncated()}};
  if (sim.faults_enabled()) {
    // Under failures: what the failures cost the requests, and how long replicas were out.
    int64_t in_flight = cfg.workload->total_requests() - sim.completed();
    double out_mean = 0;
    for (int64_t o : sim.outages_ns()) out_mean += static_cast<double>(o);
    if (!sim.outages_ns().empty()) out_mean /= static_cast<double>(sim.outages_ns().size());
    const double rep_time = static_cast<double>(sim.end_ns()) * cfg.replicas;
    m["requests"]["failed"] = sim.failed();
    m["requests"]["failed_reason"] = sim.failed() ? "no healthy replica within the failover timeout" : "";
    m["requests"]["in_flight_at_end"] = in_flight;
    m["requests"]["retried"] = sim.retried();
    m["requests"]["re_prefilled"] = sim.reprefilled();
    m["faults"] = Json{{"replica_failures", sim.replica_failures()},
                       {"availability", rep_time > 0 ? 1 - static_cast<double>(sim.replica_down_ns()) / rep_time : 1.0},
                       {"time_to_recover_s_mean", out_mean / 1e9},
                       {"outages_completed", sim.outages_ns().size()}};
  }
  Json lat = Json::object();
  lat["ttft"] = summarize(ttft);
  lat["e2e"] = summarize(e2e);
  lat["tpot"] = summarize(tpot);
  lat["itl_llmperf"] = summarize(itl);
  lat["itl_llmperf_counted_tokens"] = summarize(itl_lc);  // per output token as llmperf counts them (Llama tokenizer)
  lat["tpot_llmperf_counted_tokens"] = summarize(tpot_lc);
  lat["queueing_delay"] = summarize(queue);
  lat["inter_token_gap"] = gap;
  lat["max_gap_per_request"] = summarize(max_gap);
  m["latency_ms"] = lat;
  m["throughput"] = Json{{"output_tokens_per_s", out_tokens / span_s}, {"input_tokens_per_s", in_tokens / span_s},
                         {"requests_per_s", (served) / span_s}, {"span_s", span_s},
                         {"output_tokens", out_tokens}, {"input_tokens", in_tokens},
                         {"output_tokens_llmperf_counted", out_tokens_lc},
                         {"output_tokens_per_s_llmperf_counted", out_tokens_lc / span_s},
                         {"llmperf_tokens_per_model_token", 1 / per_llama}};
  m["memory_per_gpu"] = Json{{"capacity_bytes", mem.capacity_per_gpu}, {"weights_bytes", mem.weights_per_gpu},
                             {"activation_bytes", mem.activation_per_gpu}, {"kv_cache_bytes", mem.kv_per_gpu}};
  m["kv_cache"] = Json{{"block_size", cfg.block_size}, {"blocks_per_replica", mem.blocks_per_replica},
                       {"virtual_engines_per_replica", cfg.pipeline_parallel}, {"blocks_per_engine", mem.blocks_per_engine},
                       {"tokens_per_replica", mem.kv_tokens_per_replica},
                       {"bytes_per_token", cfg.model.kv_bytes_per_token()},
                       {"occupancy_mean", kv_int / end / static_cast<double>(sim.replicas().size())}, {"occupancy_max", kv_max},
                       {"preemptions", preemptions}, {"swap_bytes", swap_bytes},
                       {"later_turns", later_turns}, {"later_turn_hits", later_hits},
                       {"reuse_hit_rate", later_turns ? static_cast<double>(later_hits) / later_turns : 0.0},
                       {"reused_history_fraction", later_prompt ? static_cast<double>(reused) / later_prompt : 0.0}};
  m["batching"] = Json{{"iterations", iters}, {"prefill_iterations", pre_it}, {"decode_iterations", dec_it},
                       {"mixed_iterations", mix_it}, {"mean_batch", busy > 0 ? batch_int / busy : 0.0},
                       {"max_batch", max_batch}, {"utilization", busy / end / nrep}};
  if (cfg.prefill_slicing.policy != serving::PrefillSlicing::None) {
    int64_t sliced = 0, slices = 0;
    for (const auto& st : sim.replica_stats()) sliced += st.sliced_prefills, slices += st.prefill_slices;
    const char* pol = cfg.prefill_slicing.policy == serving::PrefillSlicing::Uniform ? "uniform" : "terapipe";
    m["prefill_slicing"] = Json{{"policy", pol}, {"sliced_prefills", sliced},
                                {"slices_mean", sliced ? static_cast<double>(slices) / static_cast<double>(sliced) : 0.0}};
  }
  // Beside the busy fraction, what the iterations achieve while busy: model FLOPs utilisation
  // (2 FLOPs per non-embedding parameter per computed token, attention left out, over the
  // datasheet peak of the replica's GPUs) and the HBM bandwidth of the weight reads (each
  // iteration reads its GPU's weights once; KV-cache reads not counted, so a lower bound).
  const double gpus_per_replica = cfg.tensor_parallel * cfg.pipeline_parallel;
  const double nonembed = cfg.model.parameters() - static_cast<double>(cfg.model.vocab) * cfg.model.hidden;
  const double model_flops = 2 * nonembed * static_cast<double>(in_tokens - cached_in + out_tokens);
  const double mfu = busy > 0 ? model_flops / (busy / 1e9 * gpus_per_replica * cfg.hardware.peak_bf16_flops) : 0.0;
  const double weight_Bps = busy > 0 ? static_cast<double>(iters) * mem.weights_per_gpu / (busy / 1e9) : 0.0;
  m["batching"]["mfu"] = mfu;
  m["batching"]["hbm_weight_read_Bps_per_gpu"] = weight_Bps;
  if (!per_replica.empty()) m["replicas"] = per_replica;
  if (sim.trace_enabled()) {
    const int64_t traced_requests = std::min<int64_t>(cfg.trace_max_requests, served);
    m["trace"] = Json{{"iterations_traced", sim.traced_iterations()}, {"iterations", iters},
                      {"requests_traced", traced_requests}, {"requests", served},
                      {"to_trace_all", "outputs.trace_max_iterations and outputs.trace_max_requests"}};
  }
  m["simulated_s"] = sim.end_ns() / 1e9;
  m["events"] = sim.events();
  if (scope.empty()) rec.metrics()["serving"] = m;
  else rec.metrics()["workloads"][scope] = m;

  if (requests_csv) rec.file(file_prefix + "requests.csv", csv);
  if (timeseries_csv && !sim.samples().empty()) {
    std::string ts = "t_s,running,waiting,swapped,kv_occupancy,busy_fraction\n";
    for (const auto& s : sim.samples())
      ts += fmt::format("{:.6f},{},{},{},{:.6f},{:.6f}\n", s.t_ns / 1e9, s.running, s.waiting, s.swapped, s.kv_occupancy,
                        s.busy_fraction);
    rec.file(file_prefix + "timeseries.csv", ts);
  }

  auto pct = [](const Json& s, const char* k) { return s.contains(k) ? s[k].get<double>() : 0.0; };
  // "1 × h100 (tp 4)" read as one GPU: say replicas and GPUs apart.
  const int gpus_per_rep = cfg.tensor_parallel * cfg.pipeline_parallel;
  summary(fmt::format("{} on {} replica{} × {} {} GPU{} (tp {}, pp {}) = {} GPU{}; {}", cfg.model.name, cfg.replicas,
                          cfg.replicas == 1 ? "" : "s", gpus_per_rep, cfg.hardware.name, gpus_per_rep == 1 ? "" : "s",
                          cfg.tensor_parallel, cfg.pipeline_parallel, cfg.replicas * gpus_per_rep,
                          cfg.replicas * gpus_per_rep == 1 ? "" : "s", workload_description));
  summary(fmt::format("requests {} completed{}{}; {:.1f} s simulated", served,
                          sim.rejected() ? fmt::format(", {} rejected as longer than a replica's KV cache", sim.rejected()) : "",
                          sim.truncated() ? " (stopped at max_sim_time)" : "", sim.end_ns() / 1e9));
  if (sim.faults_enabled())
    summary(fmt::format("faults: {} replica failures; {} requests failed, {} retried ({} prefilled again); replicas available {:.2f}%",
                        sim.replica_failures(), sim.failed(), sim.retried(), sim.reprefilled(),
                        100 * m["faults"]["availability"].get<double>()));
  summary(fmt::format("TTFT  ms  p50 {:8.2f}  p90 {:8.2f}  p99 {:8.2f}  mean {:8.2f}", pct(lat["ttft"], "p50"),
                          pct(lat["ttft"], "p90"), pct(lat["ttft"], "p99"), pct(lat["ttft"], "mean")));
  const size_t single_token = ttft.size() - tpot.size();
  if (tpot.empty())
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
  summary(fmt::format("  as llmperf counts (Llama tokenizer): {:.1f} output tok/s, ITL mean {:.2f} ms; busy {:.0f}% "
                          "is not MFU: the iterations ran at MFU {:.1f}%, weight reads {} per GPU",
                          out_tokens_lc / span_s, itl_lc.empty() ? 0.0 : pct(lat["itl_llmperf_counted_tokens"], "mean"),
                          100 * busy / end / nrep, 100 * mfu, format_bandwidth(weight_Bps)));
  if (cfg.tables_dir.empty())
    summary(fmt::format("costs: roofline only ({} has no measured kernel tables here; ceilings {:.0f} TFLOP/s, {}; "
                            "d2h {})",
                            cfg.hardware.name, cfg.hardware.effective_flops() / 1e12,
                            format_bandwidth(cfg.hardware.effective_bandwidth_Bps()), cfg.last_mile.d2h_source));
  summary(fmt::format("memory/GPU: weights {}, KV {} ({} tokens/replica); KV occupancy mean {:.1f}% max {:.1f}%; "
                          "preemptions {}{}",
                          format_bytes(mem.weights_per_gpu), format_bytes(mem.kv_per_gpu), mem.kv_tokens_per_replica,
                          100 * kv_int / end / static_cast<double>(sim.replicas().size()), 100 * kv_max, preemptions,
                          later_turns ? fmt::format("; KV reuse hit rate {:.0f}%", 100.0 * later_hits / later_turns) : ""));
}

}  // namespace sluice
