#include "recorder/training_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/units.h"

namespace sluice {

void report_training(const training::TrainingResults& r, const training::TrainingSetup& c, Recorder& rec, const std::string& scope) {
  auto summary = [&](std::string line) { rec.summary(scope.empty() ? std::move(line) : fmt::format("[{}] {}", scope, line)); };
  Json m = Json::object();
  double mean = 0;
  for (double x : r.iteration_s) mean += x;
  if (!r.iteration_s.empty()) mean /= static_cast<double>(r.iteration_s.size());
  const double tokens_s = mean > 0 ? r.tokens_per_iteration / mean : 0;
  const double mfu = mean > 0 ? r.model_flops_per_iteration / mean / (r.devices * r.peak_flops_per_device) : 0;
  m["job"] = Json{{"model", c.model},
                  {"hardware", c.hardware},
                  {"devices", r.devices},
                  {"tp", c.tp},
                  {"pp", c.pp},
                  {"dp", c.dp},
                  {"cp", c.cp},
                  {"schedule", c.schedule},
                  {"micro_batches", c.micro_batches},
                  {"micro_batch_size", c.micro_batch_size},
                  {"sequence", c.sequence},
                  {"recompute", c.recompute},
                  {"mtp_layers", c.mtp_layers},
                  {"loss_fusion", c.loss_fusion},
                  {"dropout", c.dropout},
                  {"stage_layers", c.stage_layers},
                  {"dp_algorithm", c.dp_algorithm},
                  {"tp_algorithm", c.tp_algorithm},
                  {"virtual_stages", c.virtual_stages},
                  {"zero", c.zero},
                  {"zero3_prefetch", c.zero3_prefetch},
                  {"cost_source", c.cost_source},
                  {"backward", "2x the forward time (the forward operations' FLOPs x2 at the same measured efficiency; no backward tables), 3x recomputing but for the LM head (2x); the loss's cross-entropy its own kernels"}};
  m["iterations"] = r.iteration_s.size();
  // Each iteration's time; beyond kListedIterations (a run over simulated weeks holds millions)
  // as runs of equal times instead, [seconds, count] each in order: the same information.
  constexpr size_t kListedIterations = 1000;
  Json its = Json::array();
  if (r.iteration_s.size() <= kListedIterations) {
    for (double x : r.iteration_s) its.push_back(x);
    m["iteration_s"] = its;
  } else {
    for (size_t i = 0; i < r.iteration_s.size();) {
      size_t j = i;
      while (j < r.iteration_s.size() && r.iteration_s[j] == r.iteration_s[i]) ++j;
      its.push_back(Json::array({r.iteration_s[i], j - i}));
      i = j;
    }
    m["iteration_s_runs"] = its;
  }
  m["iteration_s_mean"] = mean;
  m["tokens_per_s"] = tokens_s;
  m["precision"] = c.precision;
  m["mfu"] = mfu;
  m["bubble_fraction"] = r.bubble_fraction;
  m["bubble_textbook"] = r.textbook_bubble;
  Json busy = Json::array();
  for (double x : r.stage_busy_fraction) busy.push_back(x);
  m["stage_busy_fraction"] = busy;
  m["per_micro_batch_ms"] = Json{{"forward", r.forward_ms}, {"backward", r.backward_ms}, {"loss", r.loss_ms}};
  m["dp_allreduce_ms"] = r.dp_allreduce_ms;
  m["embedding_grads_bytes_per_device"] = r.embedding_grads_bytes_per_device;
  m["optimizer_ms"] = r.optimizer_ms;
  m["memory_per_device"] = Json{{"weights_bytes", r.memory.weights}, {"gradients_bytes", r.memory.gradients},
                                {"optimizer_bytes", r.memory.optimizer}, {"activations_bytes", r.memory.activations},
                                {"total_bytes", r.memory.total()}, {"capacity_bytes", c.hbm_bytes}};
  m["flows"] = r.flows;
  if (c.moe) {
    // A mixture of experts: its expert parallelism, the all-to-alls' time and share of the
    // iteration, and the gradient bytes reduced over the expert-data-parallel groups.
    m["moe"] = Json{{"expert_parallel", c.ep},
                    {"routing", c.routing},
                    {"alltoall_overlap", c.alltoall_overlap},
                    {"token_dispatcher", c.token_dispatcher},
                    {"active_parameters", c.active_parameters},
                    {"alltoall_ms", r.alltoall_ms},
                    {"alltoall_share", mean > 0 ? r.alltoall_ms / 1e3 / mean : 0.0},
                    {"alltoall_bytes_per_device", r.alltoall_bytes_per_device},
                    {"expert_dp_bytes_per_device", r.expert_dp_bytes_per_device}};
  }
  if (c.cp > 1) {
    // Context parallelism: the ring attention's traffic and the time it ran past the compute.
    m["context_parallel"] = Json{{"cp", c.cp},
                                 {"comm", c.cp_comm},
                                 {"tokens_per_rank", c.sequence / c.cp},
                                 {"attention_ms_per_micro_batch", r.cp_attention_ms},
                                 {"ring_bytes_per_device", r.cp_ring_bytes_per_device},
                                 {"ring_exposed_ms", r.cp_exposed_ms},
                                 {"ring_exposed_share", mean > 0 ? r.cp_exposed_ms / 1e3 / mean : 0.0}};
  }
  if (r.faults) {
    // Goodput: the work kept over the wall time; lost work, checkpoints and recovery are what it is not.
    double rec_mean = 0;
    for (double x : r.recover_s) rec_mean += x;
    if (!r.recover_s.empty()) rec_mean /= static_cast<double>(r.recover_s.size());
    const double goodput = r.wall_s > 0 ? r.useful_s / r.wall_s : 0;
    const double availability = r.wall_s > 0 ? 1 - r.recovering_s / r.wall_s : 1;
    m["faults"] = Json{{"failures", r.failures},
                       {"restarts", r.restarts},
                       {"slices_reformed", r.reformed},
                       {"checkpoints", r.checkpoints},
                       {"useful_s", r.useful_s},
                       {"lost_s", r.lost_s},
                       {"checkpoint_s", r.checkpoint_s},
                       {"recovering_s", r.recovering_s},
                       {"wall_s", r.wall_s},
                       {"goodput", goodput},
                       {"availability", availability},
                       {"time_to_recover_s_mean", rec_mean},
                       {"failed", r.failed},
                       {"failure_reason", r.failure_reason}};
    // Interruptions by cause (the fault process that stopped the job), each with the work it
    // lost and the time to train again: what each cause cost.
    Json by = Json::object();
    for (const auto& [cause, cc] : r.by_cause)
      by[cause] = Json{{"interruptions", cc.interruptions}, {"lost_s", cc.lost_s}, {"recovering_s", cc.recovering_s},
                       {"cost_s", cc.lost_s + cc.recovering_s}};
    m["faults"]["by_cause"] = by;
    if (r.spare_servers > 0) {
      m["faults"]["spare_servers"] = r.spare_servers;
      m["faults"]["spare_swaps"] = r.spare_swaps;
      summary(fmt::format("hot spares: {} servers held, {} failed servers swapped for one", r.spare_servers, r.spare_swaps));
    }
    if (r.checkpoint_storage) {
      m["faults"]["checkpoint_bytes"] = r.checkpoint_bytes;
      m["faults"]["checkpoint_write_s_mean"] = r.checkpoints > 0 ? r.checkpoint_write_s / r.checkpoints : 0.0;
      summary(fmt::format("checkpoints to storage: {:.1f} GB each, written in {:.2f} s on average over the fabric{}", r.checkpoint_bytes / 1e9,
                          r.checkpoints > 0 ? r.checkpoint_write_s / r.checkpoints : 0.0,
                          r.checkpoints_replayed > 0 ? fmt::format(" ({} writes repeated the one before from the same state and were "
                                                                   "counted at once, not simulated)",
                                                                   r.checkpoints_replayed)
                                                     : std::string()));
    }
    summary(fmt::format("faults: {} failures, {} restarts ({} re-formed slices), {} checkpoints; goodput {:.1f}% (lost {:.1f} s, "
                        "checkpoints {:.1f} s, recovering {:.1f} s of {:.1f} s){}",
                        r.failures, r.restarts, r.reformed, r.checkpoints, 100 * goodput, r.lost_s, r.checkpoint_s, r.recovering_s,
                        r.wall_s, r.failed ? "; FAILED: " + r.failure_reason : std::string()));
    if (r.by_cause.size() > 1) {
      std::vector<std::pair<double, std::string>> costs;
      for (const auto& [cause, cc] : r.by_cause) costs.emplace_back(-(cc.lost_s + cc.recovering_s), cause);
      std::sort(costs.begin(), costs.end());
      std::string line;
      for (size_t i = 0; i < costs.size() && i < 5; ++i) {
        const auto& cc = r.by_cause.at(costs[i].second);
        line += fmt::format("{}{} {} ({:.2f} h)", i ? ", " : "", costs[i].second, cc.interruptions, -costs[i].first / 3600);
      }
      summary("interruptions by cause (time lost and recovering): " + line);
    }
  }
  if (c.cp == 1) {  // (context parallelism and token slicing are exclusive)
    Json tokens = Json::array();
    for (int l : r.slice_tokens) tokens.push_back(l);
    m["slicing"] = Json{{"policy", c.slicing_policy},
                        {"slices", r.slice_tokens.size()},
                        {"tokens", tokens},
                        {"granularity", c.slicing_granularity},
                        {"model_pass_ms", r.slice_model_ms},
                        {"unsliced_model_pass_ms", r.unsliced_model_ms},
                        {"model_speedup", r.slice_model_ms > 0 ? r.unsliced_model_ms / r.slice_model_ms : 0.0},
                        {"bubble_model", r.slice_bubble_model},
                        {"schedule_pass_ms", r.slice_schedule_ms},
                        {"best_uniform_schedule_pass_ms", r.best_uniform_schedule_ms},
                        {"best_uniform_slices", r.best_uniform_slices},
                        {"dp_candidates", r.dp_candidates},
                        {"dp_evaluated", r.dp_evaluated}};
  }
  if (scope.empty()) rec.metrics()["training"] = m;
  else rec.metrics()["workloads"][scope] = m;
  summary(fmt::format("{} training{} on {} × {} (tp {}{} × pp {} × dp {}, {} over {} micro-batches of {} × {} tokens)", c.model,
                      c.precision == "bf16" ? std::string() : fmt::format(" in {}", c.precision),
                      r.devices, c.hardware, c.tp, c.cp > 1 ? fmt::format(" × cp {}", c.cp) : std::string(), c.pp, c.dp,
                      c.schedule == "gpipe" ? std::string("GPipe")
                      : c.virtual_stages > 1                  ? fmt::format("interleaved 1F1B ({} chunks a rank)", c.virtual_stages)
                                                              : std::string("1F1B"),
                      c.micro_batches, c.micro_batch_size, c.sequence));
  if (c.cp > 1)
    summary(fmt::format("context parallelism ({}) over {} ranks ({} tokens each): key/value exchanges ran {:.1f} ms past compute an iteration "
                        "({:.1f}% of it); {} a device sends around its rings",
                        c.cp_comm, c.cp, c.sequence / c.cp, r.cp_exposed_ms, mean > 0 ? 100 * r.cp_exposed_ms / 1e3 / mean : 0.0,
                        format_bytes(r.cp_ring_bytes_per_device)));
  if (c.zero > 0) summary(fmt::format("ZeRO-{}: the optimizer state{} sharded over the {}{}", c.zero,
                                      c.zero >= 3 ? ", the gradients and the parameters" : c.zero >= 2 ? " and the gradients" : "",
                                      c.cp > 1 ? fmt::format("{} data-parallel x context-parallel ranks", c.dp * c.cp)
                                               : fmt::format("{} data-parallel replicas", c.dp),
                                      c.ep <= 1                ? ""
                                      : c.dp * c.cp == c.ep ? std::string(" (a device's experts on it alone: no other holds them)")
                                                            : fmt::format(" (a device's experts over the {} holding the same ones)", c.dp * c.cp / c.ep)));
  summary(fmt::format("iteration {:.3f} s mean over {}; {:.0f} tokens/s; MFU {:.1f}%; bubble {:.1f}% (textbook {:.1f}%); {} all-reduce {:.1f} ms",
                      mean, r.iteration_s.size(), tokens_s, 100 * mfu, 100 * r.bubble_fraction, 100 * r.textbook_bubble,
                      c.cp > 1 ? "DP x CP" : "DP", r.dp_allreduce_ms));
  if (c.ep > 1)
    summary(fmt::format("expert parallelism over {} {}: all-to-alls {:.1f} ms an iteration ({:.1f}% of it{}), {} a device dispatches and combines (its own experts' share included{})",
                        c.ep, c.cp > 1 ? "data-parallel x context-parallel ranks" : "replicas", r.alltoall_ms, mean > 0 ? 100 * r.alltoall_ms / 1e3 / mean : 0.0,
                        c.alltoall_overlap ? ", partly under the next op's compute" : "", format_bytes(r.alltoall_bytes_per_device),
                        c.token_dispatcher == "alltoall" ? "; a row per token and expert" : ""));
  if (c.slicing_policy != "none")
    summary(fmt::format("token slicing ({}): {} slices of {}..{} tokens; formula pass {:.1f} ms against {:.1f} ms unsliced ({:.2f}x)",
                        c.slicing_policy, r.slice_tokens.size(),
                        r.slice_tokens.empty() ? 0 : *std::min_element(r.slice_tokens.begin(), r.slice_tokens.end()),
                        r.slice_tokens.empty() ? 0 : *std::max_element(r.slice_tokens.begin(), r.slice_tokens.end()), r.slice_model_ms,
                        r.unsliced_model_ms, r.slice_model_ms > 0 ? r.unsliced_model_ms / r.slice_model_ms : 0.0));
  if (r.fast_forwarded > 0 || r.partials_replayed > 0)
    summary(fmt::format("{} iterations (those a failure lost and were run again included) repeated the one before exactly and were counted without "
                        "being simulated (steady-state fast-forward; --no-fast-forward simulates them and gives the same results){}{}",
                        r.fast_forwarded,
                        r.resumed > 0 ? fmt::format("; {} times a restart or an interruption found the world as the proven iteration had and counting resumed at once", r.resumed)
                                      : std::string(),
                        r.partials_replayed > 0 ? fmt::format("; {} iterations a failure cut short were counted up to it from the proven iteration's tape "
                                                              "({} instants, {} flows, {:.1f} MiB)",
                                                              r.partials_replayed, r.tape_instants, r.tape_flows, r.tape_mib)
                                                : std::string()));
  summary(fmt::format("costs: {}", c.cost_source));
  summary(fmt::format("memory/device: {} of {} (weights {}, gradients {}, optimizer {}, activations {})", format_bytes(r.memory.total()),
                      format_bytes(c.hbm_bytes), format_bytes(r.memory.weights), format_bytes(r.memory.gradients),
                      format_bytes(r.memory.optimizer), format_bytes(r.memory.activations)));
}

}  // namespace sluice
