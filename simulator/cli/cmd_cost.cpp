// `sluice cost`: the predicted time of one iteration (a decode step or a prefill) of a model on
// a device, broken down by operation and by source, so anyone can check the cost model against
// a measurement of their own; `--leave-one-out` prints the tables' interpolation error.
#include <cmath>
#include <iostream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "config/error.h"
#include "hardware/cost_model.h"
#include "hardware/tables.h"

namespace sluice::cli {

namespace {

struct CostArgs {
  std::string hardware = "h200", model = "llama2-7b", tables, lengths;
  int batch = 1, tp = 1, pp = 1;
  long context = -1, prefill = 0;
  bool json = false, loo = false, fused = false;
};

const Origin kCommandLine{"command line", 0, 0};

std::string resolve_tables(const CostArgs& a, const HardwareSpec& hw) {
  if (a.tables == "none") return "";
  if (a.tables.empty()) return default_tables_dir(hw);
  return a.tables;
}

int run_loo(const CostArgs& a) {
  const HardwareSpec hw = load_hardware(a.hardware, kCommandLine);
  const std::string dir = resolve_tables(a, hw);
  if (dir.empty())
    throw ConfigError(kCommandLine, "--tables", a.tables,
                      fmt::format("no tables to check: {} has no calibration and --tables names none", hw.name),
                      "a folder of CSV tables, e.g. results/calibration/h200-torch");
  const auto stats = costtab::leave_one_out(dir, {hw.effective_flops(), hw.effective_bandwidth_Bps()});
  if (stats.empty())
    throw ConfigError(kCommandLine, "--tables", dir, "no known cost tables (gemm.csv, attention_*.csv, ...) there",
                      "a folder of CSV tables, e.g. results/calibration/h200-torch");
  if (a.json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const auto& s : stats)
      j.push_back({{"file", s.file}, {"rows", s.rows}, {"median", s.median}, {"p90", s.p90}, {"max", s.max},
                   {"worst", s.worst}});
    std::cout << nlohmann::ordered_json{{"tables_dir", dir}, {"leave_one_out", j}}.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("leave-one-out interpolation error of {} (each row predicted from the others)\n\n", dir);
  std::cout << fmt::format("{:<24} {:>5} {:>9} {:>9} {:>9}\n", "table", "rows", "median", "p90", "max");
  for (const auto& s : stats)
    std::cout << fmt::format("{:<24} {:>5} {:>8.1f}% {:>8.1f}% {:>8.1f}%\n", s.file, s.rows, 100 * s.median,
                             100 * s.p90, 100 * s.max);
  std::cout << "\nworst row per table:\n";
  for (const auto& s : stats) std::cout << fmt::format("  {:<22} {}\n", s.file, s.worst);
  return 0;
}

std::vector<SeqWork> build_batch(const CostArgs& a) {
  std::vector<SeqWork> batch;
  if (!a.lengths.empty()) {
    std::stringstream ss(a.lengths);
    std::string item;
    while (std::getline(ss, item, ',')) {
      auto v = parse_int(item);
      if (!v || *v < 0 || *v > 1'000'000'000)
        throw ConfigError(kCommandLine, "--lengths", a.lengths, fmt::format("'{}' is not a KV length", item),
                          "comma-separated non-negative integers, e.g. 100,2000,8000");
      batch.push_back(SeqWork{1, static_cast<int>(*v), true});
    }
    if (batch.empty()) throw ConfigError(kCommandLine, "--lengths", a.lengths, "no lengths", "e.g. 100,2000,8000");
    return batch;
  }
  if (a.prefill > 0) {
    const long ctx = a.context < 0 ? 0 : a.context;
    batch.assign(static_cast<size_t>(a.batch), SeqWork{static_cast<int>(a.prefill), static_cast<int>(ctx), true});
  } else {
    const long ctx = a.context < 0 ? 2048 : a.context;
    batch.assign(static_cast<size_t>(a.batch), SeqWork{1, static_cast<int>(ctx), true});
  }
  return batch;
}

int run_cost(const CostArgs& a) {
  if (a.loo) return run_loo(a);
  const HardwareSpec hw = load_hardware(a.hardware, kCommandLine);
  const ModelSpec m = load_model(a.model, kCommandLine);
  CostOptions opt;
  opt.tensor_parallel = a.tp;
  opt.pipeline_parallel = a.pp;
  opt.tables_dir = resolve_tables(a, hw);
  opt.fused_elementwise = a.fused;
  std::optional<CostModel> cm;
  try {
    cm.emplace(hw, m, opt);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(kCommandLine, "cost", fmt::format("--tp {} --pp {} --tables {}", a.tp, a.pp, opt.tables_dir),
                      e.what(), "tp dividing the heads, pp <= layers, an existing tables folder or 'none'");
  }
  const auto batch = build_batch(a);
  const IterationCost it = cm->iteration(batch);
  long tokens = 0, rows = 0;
  for (const auto& s : batch) {
    tokens += s.new_tokens;
    rows += s.produces_token;
  }
  const bool is_prefill = a.lengths.empty() && a.prefill > 0;
  std::map<std::string, double> by_source;
  for (const auto& o : it.ops) by_source[o.source] += o.ns;
  // Memory one GPU needs for this batch: its weight shard, the KV cache of every sequence
  // (context + new tokens), and the transient activations of this forward pass.
  double kv_tokens = 0;
  for (const auto& q : batch) kv_tokens += q.context + q.new_tokens;
  const int shards = a.tp * a.pp;
  const double mem_weights = m.weight_bytes() / shards, mem_kv = kv_tokens * m.kv_bytes_per_token_per_gpu(a.tp, a.pp),
               mem_act = m.activation_bytes(tokens) / a.tp, mem_total = mem_weights + mem_kv + mem_act;

  if (a.json) {
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (const auto& o : it.ops)
      ops.push_back({{"op", o.op}, {"ns", o.ns}, {"source", o.source}, {"flops", o.flops}, {"bytes", o.bytes}});
    nlohmann::ordered_json src = nlohmann::ordered_json::object();
    for (const auto& [s, ns] : by_source) src[s] = ns;
    nlohmann::ordered_json seqs = nlohmann::ordered_json::array();
    for (const auto& s : batch) seqs.push_back({{"new_tokens", s.new_tokens}, {"context", s.context}});
    nlohmann::ordered_json j{{"hardware", hw.name},
                             {"model", m.name},
                             {"mode", is_prefill ? "prefill" : "decode"},
                             {"tp", a.tp},
                             {"pp", a.pp},
                             {"stage_layers", cm->stage_layers()},
                             {"tables_dir", opt.tables_dir},
                             {"new_tokens", tokens},
                             {"sampled_rows", rows},
                             {"total_ns", it.total_ns},
                             {"tokens_per_s", it.total_ns > 0 ? 1e9 * static_cast<double>(rows) / it.total_ns : 0.0},
                             {"ops", ops},
                             {"by_source", src},
                             {"memory_per_gpu", {{"weights_bytes", mem_weights}, {"kv_bytes", mem_kv},
                                                 {"activation_bytes", mem_act}, {"total_bytes", mem_total},
                                                 {"hbm_bytes", hw.hbm_bytes}}},
                             {"batch", seqs}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  // A figure for a point the deployment cannot reach is still printed, but says so.
  for (const auto& q : batch)
    if (q.context + q.new_tokens > m.max_context) {
      std::cerr << fmt::format("sluice: warning: a sequence of {} tokens is beyond {}'s context of {} tokens; the time is "
                               "an extrapolation no deployment of this model reaches\n",
                               q.context + q.new_tokens, m.name, m.max_context);
      break;
    }
  if (mem_total > hw.hbm_bytes)
    std::cerr << fmt::format("sluice: warning: this batch needs {:.1f} GB per GPU but {} has {:.1f} GB; it does not fit\n",
                             mem_total / 1e9, hw.name, hw.hbm_bytes / 1e9);

  std::string what;
  if (!a.lengths.empty()) what = fmt::format("decode of {} sequences with KV lengths {}", batch.size(), a.lengths);
  else if (is_prefill)
    what = fmt::format("prefill of {} x {} tokens after {} cached", a.batch, a.prefill, batch.front().context);
  else what = fmt::format("decode, batch {} at context {}", a.batch, batch.front().context);
  std::cout << fmt::format("{} on {}: {}; tp {}, pp {} ({} of {} layers on the costed last stage)\n", m.name, hw.name,
                           what, a.tp, a.pp, cm->stage_layers(), m.layers);
  std::cout << fmt::format("tables: {}\n", opt.tables_dir.empty() ? "none (roofline only)" : opt.tables_dir);
  std::cout << fmt::format("iteration: {:.4f} ms  ({} new tokens, {} sampled: {:.0f} tokens/s)\n\n", it.total_ns / 1e6,
                           tokens, rows, it.total_ns > 0 ? 1e9 * static_cast<double>(rows) / it.total_ns : 0.0);
  std::cout << fmt::format("{:<26} {:>11} {:>7}  {:<32} {:>10} {:>10}\n", "operation", "time (us)", "share", "source",
                           "GFLOP", "MB");
  for (const auto& o : it.ops)
    std::cout << fmt::format("{:<26} {:>11.2f} {:>6.1f}%  {:<32} {:>10.3f} {:>10.2f}\n", o.op, o.ns / 1e3,
                             100 * o.ns / it.total_ns, o.source, o.flops / 1e9, o.bytes / 1e6);
  std::cout << fmt::format("{:<26} {:>11.2f} {:>6.1f}%\n\nby source:\n", "total", it.total_ns / 1e3, 100.0);
  for (const auto& [s, ns] : by_source)
    std::cout << fmt::format("  {:<32} {:>11.2f} us {:>6.1f}%\n", s, ns / 1e3, 100 * ns / it.total_ns);
  std::cout << fmt::format("\nmemory per GPU: weights {:.3f} GB + KV cache {:.3f} GB ({:.0f} tokens) + activations {:.3f} GB "
                           "= {:.3f} GB of {:.1f} GB\n",
                           mem_weights / 1e9, mem_kv / 1e9, kv_tokens, mem_act / 1e9, mem_total / 1e9, hw.hbm_bytes / 1e9);
  return 0;
}

}  // namespace

void add_cost(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("cost", "Predicted time of one iteration (decode or prefill), by operation and source");
  auto a = std::make_shared<CostArgs>();
  cmd->add_option("--hardware", a->hardware, "device from models/hardware/ (default h200)");
  cmd->add_option("--model", a->model, "model from models/llm/ (default llama2-7b)");
  cmd->add_option("--batch", a->batch, "sequences in the batch (default 1)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--context", a->context,
                  "cached tokens per sequence: the KV length of a decode step (default 2048), or the prefix before "
                  "a prefill (default 0)")
      ->check(CLI::Range(0L, 1'000'000'000L));
  cmd->add_option("--prefill", a->prefill, "prefill this many new tokens per sequence instead of decoding")
      ->check(CLI::Range(1L, 1'000'000'000L));
  cmd->add_option("--lengths", a->lengths, "a decode batch of mixed KV lengths, e.g. 100,2000,8000 (overrides --batch)");
  cmd->add_option("--tp", a->tp, "tensor-parallel degree (default 1)")->check(CLI::Range(1, 1024));
  cmd->add_option("--pp", a->pp, "pipeline-parallel degree; the last stage is costed (default 1)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--tables", a->tables,
                  "folder of measured CSV tables, or 'none' for the roofline alone (default "
                  "results/calibration/<hardware calibration>)");
  cmd->add_flag("--json", a->json, "machine-readable output");
  cmd->add_flag("--fused-elementwise", a->fused,
                "cost norms, rotary, SiLU·mul and residual adds as fused roofline kernels (as vLLM runs them) instead of "
                "the measured PyTorch kernels");
  cmd->add_flag("--leave-one-out", a->loo,
                "instead: the tables' interpolation error, each measured row predicted from the others");
  cmd->callback([a, &ctx] { ctx.action = [a]() -> int { return run_cost(*a); }; });
}

}  // namespace sluice::cli
