// `sluice cost`: the predicted time of one iteration (a decode step or a prefill) of a model on
// a device, broken down by operation and by source, so anyone can check the cost model against
// a measurement of their own; `--leave-one-out` prints the tables' interpolation error.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <utility>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "config/error.h"
#include "hardware/cost_model.h"
#include "hardware/cost_source.h"
#include "hardware/dit.h"
#include "hardware/tables.h"

namespace sluice::cli {

namespace {

struct CostArgs {
  std::string hardware = "h200", model = "llama2-7b", tables, lengths, implementation = "pytorch-lean";
  int batch = 1, tp = 1, pp = 1, slices = 0, drafts = 0;
  long context = -1, prefill = 0, tokens = 0;
  bool json = false, loo = false, fused = false;
  bool expert_parallel = false, eplb = false, dp_attention = false;
  int redundant_experts = 0;
  std::string dispatch = "allreduce", precision = "bf16", kv_cache_dtype = "auto";
};

const Origin kCommandLine{"command line", 0, 0};
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// --tables through the one cost-source policy (hardware/cost_source.h): empty is auto.
CostSource resolve_tables(const CostArgs& a, const HardwareSpec& hw) {
  return resolve_cost_source(a.tables.empty() ? "auto" : a.tables, hw, "--tables");
}

int run_loo(const CostArgs& a) {
  const HardwareSpec hw = load_hardware(a.hardware, kCommandLine);
  const std::string dir = resolve_tables(a, hw).tables_dir;
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
      batch.push_back(SeqWork{1, static_cast<int>(*v), true, static_cast<int16_t>(a.drafts)});
    }
    if (batch.empty()) throw ConfigError(kCommandLine, "--lengths", a.lengths, "no lengths", "e.g. 100,2000,8000");
    return batch;
  }
  if (a.prefill > 0) {
    const long ctx = a.context < 0 ? 0 : a.context;
    batch.assign(static_cast<size_t>(a.batch), SeqWork{static_cast<int>(a.prefill), static_cast<int>(ctx), true});
  } else {
    const long ctx = a.context < 0 ? 2048 : a.context;
    batch.assign(static_cast<size_t>(a.batch), SeqWork{1, static_cast<int>(ctx), true, static_cast<int16_t>(a.drafts)});
  }
  return batch;
}

// One DiT denoising step over `tokens` patch tokens (per image, --batch images).
int run_dit(const CostArgs& a, const HardwareSpec& hw, const CostOptions& opt, const CostSource& source) {
  const DitSpec d = load_dit(a.model, kCommandLine);
  if (a.tokens <= 0)
    throw ConfigError(kCommandLine, "--tokens", "0", fmt::format("{} is a diffusion transformer: a step needs its patch tokens", d.name),
                      "--tokens P, e.g. 1024 (512 px for DiT-XL/2) or 4096 (1024 px for Flux.1)");
  const CostModel cm(hw, d.as_model(), opt);
  const IterationCost it = dit_step(cm, d, a.tokens, a.batch);
  const double launch_ns = it.kernels * cm.kernel_ns();
  if (a.json) {
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (const auto& o : it.ops)
      ops.push_back({{"op", o.op}, {"ns", o.ns}, {"kernels", o.kernels}, {"source", o.source}, {"flops", o.flops},
                     {"bytes", o.bytes}});
    std::cout << nlohmann::ordered_json{{"hardware", hw.name},
                                        {"model", d.name},
                                        {"mode", "dit_step"},
                                        {"implementation", implementation_name(cm.implementation())},
                                        {"patch_tokens", a.tokens},
                                        {"text_tokens", d.text_tokens},
                                        {"batch", a.batch},
                                        {"tables_dir", opt.tables_dir},
                                        {"cost_source", source.describe(hw)},
                                        {"total_ns", it.total_ns},
                                        {"kernels", it.kernels},
                                        {"launch_floor_share", it.total_ns > 0 ? launch_ns / it.total_ns : 0.0},
                                        {"parameters", d.parameters()},
                                        {"ops", ops}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format("{} on {}: one denoising step of {} x {} patch tokens{}; {} blocks{}\n", d.name, hw.name, a.batch,
                           a.tokens, d.text_tokens ? fmt::format(" and {} text tokens", d.text_tokens) : "", d.layers,
                           d.single_layers ? fmt::format(" double-stream + {} single-stream", d.single_layers) : "");
  std::cout << fmt::format("costs: {}\n", source.describe(hw));
  std::cout << fmt::format("implementation: {}; {:.0f} kernels, {:.1f}% of the step at the {:.2f} us launch floor\n",
                           implementation_name(cm.implementation()), it.kernels, 100 * launch_ns / it.total_ns,
                           cm.kernel_ns() / 1e3);
  std::cout << fmt::format("step: {:.4f} ms  ({:.2f} B parameters)\n\n", it.total_ns / 1e6, d.parameters() / 1e9);
  std::cout << fmt::format("{:<34} {:>11} {:>7} {:>8}  {:<36} {:>10}\n", "operation", "time (us)", "share", "kernels",
                           "source", "GFLOP");
  for (const auto& o : it.ops)
    std::cout << fmt::format("{:<34} {:>11.2f} {:>6.1f}% {:>8.0f}  {:<36} {:>10.3f}\n", o.op, o.ns / 1e3,
                             100 * o.ns / it.total_ns, o.kernels, o.source, o.flops / 1e9);
  std::cout << fmt::format("{:<34} {:>11.2f} {:>6.1f}% {:>8.0f}\n", "total", it.total_ns / 1e3, 100.0, it.kernels);
  return 0;
}

int run_cost(const CostArgs& a) {
  if (a.loo) return run_loo(a);
  if (is_dit(a.model)) {
    const HardwareSpec hw = load_hardware(a.hardware, kCommandLine);
    CostOptions opt;
    const CostSource source = resolve_tables(a, hw);
    source.apply(opt);
    opt.fused_elementwise = a.fused;
    opt.implementation = implementation_from_name(a.implementation);
    return run_dit(a, hw, opt, source);
  }
  if (a.tokens > 0)
    throw ConfigError(kCommandLine, "--tokens", std::to_string(a.tokens), fmt::format("{} is not a diffusion transformer", a.model),
                      fmt::format("a model from models/dit/ ({})", fmt::join(catalog_names("models/dit"), ", ")));
  const HardwareSpec hw = load_hardware(a.hardware, kCommandLine);
  ModelSpec m = load_model(a.model, kCommandLine);
  CostOptions opt;
  opt.tensor_parallel = a.tp;
  opt.pipeline_parallel = a.pp;
  const CostSource source = resolve_tables(a, hw);
  source.apply(opt);
  opt.fused_elementwise = a.fused;
  if (a.expert_parallel || a.dispatch != "allreduce" || a.eplb || a.redundant_experts > 0 || a.dp_attention) {
    if (!m.moe())
      throw ConfigError(kCommandLine,
                        a.expert_parallel           ? "--expert-parallel"
                        : a.dp_attention            ? "--dp-attention"
                        : a.dispatch != "allreduce" ? "--dispatch"
                        : a.eplb                    ? "--eplb"
                                                    : "--redundant-experts",
                        "", fmt::format("{} is a dense model: it has no experts", m.name),
                        "an MoE model (deepseek-v3, mixtral-8x7b, qwen3-235b-a22b, llama4-scout)");
    if (a.dispatch != "allreduce" && a.dispatch != "alltoall")
      throw ConfigError(kCommandLine, "--dispatch", a.dispatch, "not a dispatch", "allreduce or alltoall");
  }
  opt.moe.expert_parallel = a.expert_parallel;
  opt.moe.alltoall = a.dispatch == "alltoall";
  opt.moe.eplb = a.eplb;
  opt.moe.redundant_experts = a.redundant_experts;
  opt.moe.data_parallel_attention = a.dp_attention;
  if (m.moe())
    if (const auto problem = moe_problem(m, opt.moe, a.tp, a.pp)) {
      // The problem's key, as this command spells it, and its value (anything else: --tp).
      const std::pair<const char*, std::pair<const char*, std::string>> flags[] = {
          {"dispatch", {"--dispatch", a.dispatch}},
          {"eplb", {"--eplb", a.eplb ? "true" : "false"}},
          {"redundant_experts", {"--redundant-experts", std::to_string(a.redundant_experts)}},
          {"data_parallel_attention", {"--dp-attention", "true"}},
          {"pipeline_parallel", {"--pp", std::to_string(a.pp)}}};
      std::pair<const char*, std::string> at{"--tp", std::to_string(a.tp)};
      for (const auto& [key, flag] : flags)
        if (problem->key == key) at = flag;
      throw ConfigError(kCommandLine, at.first, at.second, problem->problem, problem->valid);
    }
  {
    bool found = false;
    for (const auto& [n, p] : precision_names())
      if (n == a.precision) m.weights = p, found = true;
    if (!found) throw ConfigError(kCommandLine, "--precision", a.precision, "not a precision", "bf16, fp8, fp4 or w4a16");
    if (!hw.supports(m.weights))
      throw ConfigError(kCommandLine, "--precision", a.precision, fmt::format("{} has no {} tensor cores", hw.name, a.precision),
                        fmt::format("one it runs: {}", hw.precisions()));
    if (a.kv_cache_dtype != "auto" && a.kv_cache_dtype != "fp8")
      throw ConfigError(kCommandLine, "--kv-cache-dtype", a.kv_cache_dtype, "not a KV cache type", "auto or fp8");
    m.kv_fp8 = a.kv_cache_dtype == "fp8";
  }
  try {
    opt.implementation = implementation_from_name(a.implementation);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(kCommandLine, "--implementation", a.implementation, e.what(), "pytorch-lean, pytorch-naive or fused");
  }
  if (a.drafts > 0 && a.prefill > 0)
    throw ConfigError(kCommandLine, "--drafts", std::to_string(a.drafts), "drafts are verified by a decode step, not a prefill",
                      "--drafts K without --prefill");
  if (a.slices > 0 && a.prefill <= 0)
    throw ConfigError(kCommandLine, "--slices", std::to_string(a.slices), "slices cut a prefill", "--prefill T --slices K");
  if (a.slices > 0 && a.prefill % a.slices != 0)
    throw ConfigError(kCommandLine, "--slices", std::to_string(a.slices),
                      fmt::format("{} tokens do not cut into {} equal slices", a.prefill, a.slices),
                      "a divisor of the --prefill tokens");
  std::optional<CostModel> cm;
  try {
    cm.emplace(hw, m, opt);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(kCommandLine, "cost", fmt::format("--tp {} --pp {} --tables {}", a.tp, a.pp, opt.tables_dir),
                      e.what(), "tp dividing the heads, pp <= layers, an existing tables folder or 'none'");
  }
  auto batch = build_batch(a);
  IterationCost it;
  if (a.slices > 0) {
    it = cm->sliced_prefill(a.batch, a.prefill, a.slices);
    for (auto& q : batch) q.produces_token = false;
  } else {
    it = cm->iteration(batch);
  }
  const double launch_ns = it.kernels * cm->kernel_ns();
  long tokens = 0, rows = 0;
  for (const auto& s : batch) {
    tokens += s.new_tokens + s.drafts;  // a verification scores its drafts as tokens and rows
    rows += s.produces_token ? 1 + s.drafts : 0;
  }
  const bool is_prefill = a.lengths.empty() && a.prefill > 0;
  std::map<std::string, double> by_source;
  for (const auto& o : it.ops) by_source[o.source] += o.ns;
  // Memory one GPU needs for this batch: its weight shard, the KV cache of every sequence
  // (context + new tokens), and the transient activations of this forward pass.
  // (EPLB's redundant copies are weights too. Data-parallel attention: every device holds all
  // but the routed experts whole and the whole-head KV cache of its own sequences, dealt
  // round-robin as the step deals them: the fullest device's.)
  const int copies = a.eplb ? a.redundant_experts : 0;
  double kv_tokens = 0;
  std::vector<double> own(static_cast<size_t>(a.dp_attention ? a.tp : 1), 0.0);
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto& q = batch[i];
    own[i % own.size()] += static_cast<double>(q.context + q.new_tokens + q.drafts);
    kv_tokens += q.context + q.new_tokens + q.drafts;
  }
  const double device_kv_tokens = a.dp_attention ? *std::max_element(own.begin(), own.end()) : kv_tokens;
  const double mem_weights = a.dp_attention ? m.weight_bytes_dp_attention(a.tp, copies) : m.weight_bytes_per_gpu(a.tp, a.pp, copies),
               mem_kv = device_kv_tokens * m.kv_bytes_per_token_per_gpu(a.dp_attention ? 1 : a.tp, a.pp),
               mem_act = m.activation_bytes(tokens) / a.tp, mem_total = mem_weights + mem_kv + mem_act;

  if (a.json) {
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (const auto& o : it.ops)
      ops.push_back({{"op", o.op}, {"ns", o.ns}, {"kernels", o.kernels}, {"source", o.source}, {"flops", o.flops},
                     {"bytes", o.bytes}});
    nlohmann::ordered_json src = nlohmann::ordered_json::object();
    for (const auto& [s, ns] : by_source) src[s] = ns;
    nlohmann::ordered_json seqs = nlohmann::ordered_json::array();
    for (const auto& s : batch) seqs.push_back({{"new_tokens", s.new_tokens}, {"context", s.context}});
    nlohmann::ordered_json j{{"hardware", hw.name},
                             {"model", m.name},
                             {"mode", a.slices > 0 ? "sliced_prefill" : is_prefill ? "prefill" : "decode"},
                             {"implementation", implementation_name(cm->implementation())},
                             {"slices", a.slices},
                             {"drafts", a.drafts},
                             {"tp", a.tp},
                             {"pp", a.pp},
                             {"precision", precision_name(m.weights)},
                             {"kv_cache_dtype", m.kv_fp8 ? "fp8" : "auto"},
                             {"expert_parallel", a.expert_parallel},
                             {"dispatch", a.dispatch},
                             {"eplb", a.eplb},
                             {"redundant_experts", a.redundant_experts},
                             {"dp_attention", a.dp_attention},
                             {"stage_layers", cm->stage_layers()},
                             {"tables_dir", opt.tables_dir},
                             {"tables_derived_from", opt.tables_device ? opt.tables_device->name : ""},
                             {"cost_source", source.describe(hw)},
                             {"new_tokens", tokens},
                             {"sampled_rows", rows},
                             {"total_ns", it.total_ns},
                             {"kernels", it.kernels},
                             {"kernel_launch_ns", cm->kernel_ns()},
                             {"launch_floor_share", it.total_ns > 0 ? launch_ns / it.total_ns : 0.0},
                             {"tokens_per_s", it.total_ns > 0 ? 1e9 * static_cast<double>(rows) / it.total_ns : 0.0},
                             {"ops", ops},
                             {"by_source", src},
                             {"gemm_shapes", opt.tables_dir.empty() ? std::vector<std::string>{} : cm->gemm_sources()},
                             {"memory_per_gpu", {{"weights_bytes", mem_weights}, {"kv_bytes", mem_kv},
                                                 {"activation_bytes", mem_act}, {"total_bytes", mem_total},
                                                 {"hbm_bytes", hw.hbm_bytes}, {"hbm_gib", hw.hbm_bytes / kGiB},
                                                 {"hbm_physical_bytes", hw.hbm_physical_bytes}}},
                             {"roofline_only", opt.tables_dir.empty()},
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
  else if (a.slices > 0)
    what = fmt::format("prefill of {} x {} tokens as {} slices of {} one after another (decoder layers only)", a.batch,
                       a.prefill, a.slices, a.prefill / a.slices);
  else if (is_prefill)
    what = fmt::format("prefill of {} x {} tokens after {} cached", a.batch, a.prefill, batch.front().context);
  else if (a.drafts > 0)
    what = fmt::format("speculative verification, batch {} at context {}, each sequence's token and {} drafts", a.batch,
                       batch.front().context, a.drafts);
  else what = fmt::format("decode, batch {} at context {}", a.batch, batch.front().context);
  std::cout << fmt::format("{} on {}: {}; tp {}, pp {} ({} of {} layers on the costed last stage)\n", m.name, hw.name,
                           what, a.tp, a.pp, cm->stage_layers(), m.layers);
  if (a.expert_parallel)
    std::cout << fmt::format("experts: spread whole over the {} devices ({} a device), dispatch by {}{}\n", a.tp,
                             (m.experts + a.redundant_experts) / a.tp, a.dispatch,
                             a.eplb ? fmt::format(", placed by EPLB with {} redundant copies", a.redundant_experts) : "");
  if (a.dp_attention)
    std::cout << fmt::format("attention: data-parallel over the {} devices (each runs every head, the dense and shared MLPs "
                             "and the LM head over its own sequences, dealt round-robin; the step waits for the busiest)\n",
                             a.tp);
  std::cout << fmt::format("costs: {}{}\n", source.describe(hw),
                           source.derived() ? fmt::format("; launch floors swapped, not measured on {}", hw.name) : "");
  if (opt.tables_dir.empty())
    std::cout << fmt::format("note: no measured kernel tables: every kernel is a roofline over {} ceilings ({:.0f} TFLOP/s, "
                             "{:.2f} TB/s{}), prefill attention at {:.0f}% of the FLOP ceiling at 2048 tokens\n",
                             hw.measured_gemm_flops > 0 ? "measured" : "derated datasheet", hw.effective_flops() / 1e12,
                             hw.effective_bandwidth_Bps() / 1e12,
                             hw.measured_gemm_flops > 0 ? ""
                                                        : fmt::format(": x{:.3f} and x{:.3f} of the datasheet", hw.flops_derate,
                                                                      hw.bandwidth_derate),
                             100 * hw.attention_efficiency(2048));
  std::cout << fmt::format("implementation: {}; {:.0f} kernels, {:.2f} us each at least (launch + gap): {:.1f}% of the "
                           "iteration if every kernel sat at that floor\n",
                           implementation_name(cm->implementation()), it.kernels, cm->kernel_ns() / 1e3,
                           it.total_ns > 0 ? 100 * launch_ns / it.total_ns : 0.0);
  std::cout << fmt::format("iteration: {:.4f} ms  ({} new tokens, {} sampled: {:.0f} tokens/s)\n\n", it.total_ns / 1e6,
                           tokens, rows, it.total_ns > 0 ? 1e9 * static_cast<double>(rows) / it.total_ns : 0.0);
  std::cout << fmt::format("{:<26} {:>11} {:>7} {:>8}  {:<32} {:>10} {:>10}\n", "operation", "time (us)", "share",
                           "kernels", "source", "GFLOP", "MB");
  for (const auto& o : it.ops)
    std::cout << fmt::format("{:<26} {:>11.2f} {:>6.1f}% {:>8.0f}  {:<32} {:>10.3f} {:>10.2f}\n", o.op, o.ns / 1e3,
                             100 * o.ns / it.total_ns, o.kernels, o.source, o.flops / 1e9, o.bytes / 1e6);
  std::cout << fmt::format("{:<26} {:>11.2f} {:>6.1f}% {:>8.0f}\n\nby source:\n", "total", it.total_ns / 1e3, 100.0,
                           it.kernels);
  for (const auto& [s, ns] : by_source)
    std::cout << fmt::format("  {:<32} {:>11.2f} us {:>6.1f}%\n", s, ns / 1e3, 100 * ns / it.total_ns);
  if (!opt.tables_dir.empty()) {
    std::cout << "\nGEMM shapes:\n";
    for (const auto& line : cm->gemm_sources()) std::cout << "  " << line << "\n";
  }
  std::cout << fmt::format("\nmemory per GPU: weights {:.3f} GB + KV cache {:.3f} GB ({:.0f} tokens) + activations {:.3f} GB "
                           "= {:.3f} GB ({:.2f} GiB) of {:.2f} GiB the runtime reports ({:.0f} MiB on the device)\n",
                           mem_weights / 1e9, mem_kv / 1e9, device_kv_tokens,
                           mem_act / 1e9, mem_total / 1e9, mem_total / kGiB,
                           hw.hbm_bytes / kGiB, hw.hbm_physical_bytes / (1024.0 * 1024.0));
  return 0;
}

}  // namespace

void add_cost(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("cost", "Predicted time of one iteration (decode or prefill), by operation and source");
  auto a = std::make_shared<CostArgs>();
  cmd->add_option("--hardware", a->hardware, "device from models/hardware/ (default h200)");
  cmd->add_option("--model", a->model, "model from models/llm/ or models/dit/ (default llama2-7b)");
  cmd->add_option("--tokens", a->tokens, "a DiT model (models/dit/): one denoising step over this many patch tokens per image")
      ->check(CLI::Range(1L, 100'000'000L));
  cmd->add_option("--batch", a->batch, "sequences in the batch (default 1)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--context", a->context,
                  "cached tokens per sequence: the KV length of a decode step (default 2048), or the prefix before "
                  "a prefill (default 0)")
      ->check(CLI::Range(0L, 1'000'000'000L));
  cmd->add_option("--prefill", a->prefill, "prefill this many new tokens per sequence instead of decoding")
      ->check(CLI::Range(1L, 1'000'000'000L));
  cmd->add_option("--lengths", a->lengths, "a decode batch of mixed KV lengths, e.g. 100,2000,8000 (overrides --batch)")
      ->check([](const std::string& s) { return s.empty() ? std::string("an empty list of lengths: give them, e.g. 100,2000,8000") : std::string(); });
  cmd->add_option("--drafts", a->drafts,
                  "speculative decoding: a decode step that also verifies this many proposed tokens per sequence (the "
                  "target's step alone; the drafter's is the drafter model's own decode)")
      ->check(CLI::Range(1, 16));
  cmd->add_option("--tp", a->tp, "tensor-parallel degree (default 1)")->check(CLI::Range(1, 1024));
  cmd->add_option("--pp", a->pp, "pipeline-parallel degree; the last stage is costed (default 1)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--tables", a->tables,
                  "auto (default: the device's measured tables, else derived from its derive_tables_from, else the "
                  "roofline), 'derived', 'none' for the roofline alone, or a folder of measured CSV tables");
  cmd->add_flag("--json", a->json, "machine-readable output");
  cmd->add_option("--precision", a->precision,
                  "the decoder layers' weights and GEMMs: bf16 (default), fp8, fp4 or w4a16 (weight-only INT4)");
  cmd->add_option("--kv-cache-dtype", a->kv_cache_dtype, "auto (the model's dtype; default) or fp8");
  cmd->add_flag("--expert-parallel", a->expert_parallel,
                "an MoE model's experts spread whole over the --tp devices (expert parallelism), not each split over them");
  cmd->add_flag("--eplb", a->eplb,
                "with --expert-parallel: DeepSeek's expert-parallel load balancing (experts placed hottest first on the least "
                "loaded device; with --redundant-experts the hottest copied)");
  cmd->add_flag("--dp-attention", a->dp_attention,
                "with --expert-parallel --dispatch alltoall: data-parallel attention (SGLang's enable_dp_attention, "
                "DeepSeek's decode): each of the --tp devices attends over its own sequences with every head, the "
                "experts spread over the same devices");
  cmd->add_option("--redundant-experts", a->redundant_experts,
                  "with --eplb: copies of the hottest experts (experts + copies must divide over the --tp devices)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--dispatch", a->dispatch,
                  "with --expert-parallel: allreduce (every device holds every token; default) or alltoall (tokens sent to "
                  "their experts' devices and back, analytic over the interconnect)");
  cmd->add_option("--implementation", a->implementation,
                  "how the model is executed: pytorch-lean (default: the kernels the h200-torch tables measure), "
                  "pytorch-naive (fp32 RMSNorm by hand, rotary rebuilding its angles per call) or fused (vLLM-style "
                  "fused norm, rotary, activation and cache-write kernels)");
  cmd->add_option("--slices", a->slices,
                  "with --prefill T: T tokens as this many equal slices one after another, each after the previous "
                  "slices' cache (decoder layers only)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--fused-elementwise", a->fused, "the same as --implementation fused (kept for old scripts)");
  cmd->add_flag("--leave-one-out", a->loo,
                "instead: the tables' interpolation error, each measured row predicted from the others");
  cmd->callback([a, &ctx] { ctx.action = [a]() -> int { return run_cost(*a); }; });
}

}  // namespace sluice::cli
