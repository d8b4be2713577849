#include "workloads/serving/workload.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/units.h"

namespace sluice::serving {

int32_t llmperf_length(RngStream& rng, double mean, double sd) {
  for (int tries = 0; tries < 1'000'000; ++tries) {
    const double g = rng.gauss(mean, sd);
    const double t = std::trunc(g);  // Python's int() truncates toward zero
    if (t > 0 && t < 2e9) return static_cast<int32_t>(t);
  }
  throw std::runtime_error(fmt::format("a length of mean {} and sd {} almost never draws a positive integer", mean, sd));
}

double TokenizerTable::ratio(const std::string& from, const std::string& to, const Origin& at, const std::string& path) {
  if (from == to) return 1.0;
  const std::string file = (std::filesystem::path(catalog_root()) / "models" / "tokenizers.yaml").string();
  static const Node table = load_yaml_file(file);
  const Node* entries = table.find("tokenizers");
  auto per_llama = [&](const std::string& name) -> double {
    const Node* e = entries ? entries->find(name) : nullptr;
    if (!e || !e->find("tokens_per_llama_token")) {
      std::string valid;
      if (entries)
        for (const auto& [k, _] : entries->map) valid += (valid.empty() ? "" : ", ") + k;
      throw ConfigError(at, path, name, fmt::format("no tokenizer '{}' in models/tokenizers.yaml", name), "one of: " + valid);
    }
    return *parse_real(e->find("tokens_per_llama_token")->scalar);
  };
  return per_llama(to) / per_llama(from);
}

namespace {

ArrivalSpec parse_arrival(const Params& wp) {
  const Params& p = wp.section("arrival");
  const std::string& k = wp.str("arrival");
  ArrivalSpec a;
  if (k == "poisson") {
    a.kind = ArrivalSpec::Kind::Poisson;
    a.rate_per_s = p.real("rate");
  } else if (k == "gamma") {
    a.kind = ArrivalSpec::Kind::Gamma;
    a.rate_per_s = p.real("rate");
    a.cv = p.real("cv");
  } else {
    a.kind = ArrivalSpec::Kind::ClosedLoop;
    a.clients = static_cast<int>(p.integer("clients"));
  }
  return a;
}

// Gap to the next open-loop arrival.
int64_t next_gap_ns(const ArrivalSpec& a, RngStream& rng) {
  const double mean_s = 1.0 / a.rate_per_s;
  double gap_s = 0;
  if (a.kind == ArrivalSpec::Kind::Poisson) gap_s = rng.exponential(mean_s);
  else {
    const double shape = 1.0 / (a.cv * a.cv);  // gamma with mean mean_s and the given CV
    gap_s = rng.gamma(shape, mean_s / shape);
  }
  return static_cast<int64_t>(std::llround(gap_s * 1e9));
}

class LlmperfSource final : public WorkloadSource {
 public:
  LlmperfSource(const Params& p, uint64_t seed, double ratio, int max_context)
      : rng_(seed, "workload.llmperf"),
        arrival_rng_(seed, "workload.arrivals"),
        think_rng_(seed, "workload.think"),
        arrival_(parse_arrival(p)),
        in_mean_(p.section("input_tokens").real("mean")),
        in_sd_(p.section("input_tokens").real("sd")),
        out_mean_(p.section("output_tokens").real("mean")),
        out_sd_(p.section("output_tokens").real("sd")),
        requests_(p.integer("requests")),
        turns_(static_cast<int>(p.section("conversation").integer("turns"))),
        think_mean_ns_(p.section("conversation").time("think_time").count_ns()),
        ratio_(ratio),
        max_context_(max_context) {
    if (in_mean_ + out_mean_ > max_context_)
      p.fail("input_tokens", fmt::format("mean input plus output tokens exceed the model's context of {}", max_context_),
             "shorter lengths or a model with a longer context");
  }

  std::optional<ConversationSpec> next(int64_t now_ns) override {
    if (issued_ >= requests_) return std::nullopt;
    ConversationSpec c;
    if (arrival_.kind != ArrivalSpec::Kind::ClosedLoop) {
      t_ns_ += next_gap_ns(arrival_, arrival_rng_);
      c.arrival_ns = t_ns_;
    } else {
      c.arrival_ns = now_ns;
    }
    const int turns = static_cast<int>(std::min<int64_t>(turns_, requests_ - issued_));
    for (int i = 0; i < turns; ++i) {
      TurnSpec t;
      t.input_tokens = convert(llmperf_length(rng_, in_mean_, in_sd_));
      t.output_tokens = convert(llmperf_length(rng_, out_mean_, out_sd_));
      // A request longer than the model's context is clipped to it (llmperf would get an error).
      t.input_tokens = std::min(t.input_tokens, max_context_ - 1);
      t.output_tokens = std::max(1, std::min(t.output_tokens, max_context_ - t.input_tokens));
      c.turns.push_back(t);
    }
    issued_ += turns;
    return c;
  }
  const ArrivalSpec& arrival() const override { return arrival_; }
  int64_t total_requests() const override { return requests_; }
  int64_t think_time_ns() override {
    return think_mean_ns_ == 0 ? 0 : static_cast<int64_t>(std::llround(think_rng_.exponential(static_cast<double>(think_mean_ns_))));
  }

 private:
  int32_t convert(int32_t tokens) const {
    return ratio_ == 1.0 ? tokens : std::max<int32_t>(1, static_cast<int32_t>(std::llround(tokens * ratio_)));
  }
  RngStream rng_, arrival_rng_, think_rng_;
  ArrivalSpec arrival_;
  double in_mean_, in_sd_, out_mean_, out_sd_;
  int64_t requests_;
  int turns_;
  int64_t think_mean_ns_;
  double ratio_;
  int max_context_;
  int64_t issued_ = 0;
  int64_t t_ns_ = 0;
};

// Replays a trace: one row per request (arrival time, input tokens, output tokens and an
// optional conversation id; rows of one conversation are its turns in arrival order).
class TraceSource final : public WorkloadSource {
 public:
  TraceSource(const Params& p, double ratio, int max_context) {
    arrival_.kind = ArrivalSpec::Kind::Trace;
    const auto found = find_input_path(p.str("file"));
    if (!found)
      p.fail("file", "trace file not found (looked relative to the working directory and the sluice root)",
             "an existing .csv or .jsonl file");
    const std::string file = *found;
    const double scale = p.real("time_scale");
    struct Row { double t; int32_t in, out; std::string conv; size_t line; };
    std::vector<Row> rows;
    std::ifstream in(file);
    std::string line;
    size_t ln = 0;
    const bool jsonl = file.size() > 6 && file.substr(file.size() - 6) == ".jsonl";
    std::vector<std::string> header;
    auto bad = [&](const std::string& what) {
      throw ConfigError(Origin{file, static_cast<int>(ln), 1}, join_path(p.path(), "file"), line.substr(0, 60), what,
                        "rows with arrival_s, input_tokens, output_tokens and optional conversation");
    };
    while (std::getline(in, line)) {
      ++ln;
      // Tolerate CRLF files and padded cells.
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (line.empty() || line[0] == '#') continue;
      Row r{0, 0, 0, "", ln};
      if (jsonl) {
        nlohmann::json j;
        try { j = nlohmann::json::parse(line); } catch (const std::exception& e) { bad(std::string("not JSON: ") + e.what()); }
        if (!j.contains("arrival_s") || !j.contains("input_tokens") || !j.contains("output_tokens")) bad("missing a field");
        r.t = j["arrival_s"].get<double>();
        r.in = j["input_tokens"].get<int32_t>();
        r.out = j["output_tokens"].get<int32_t>();
        if (j.contains("conversation")) r.conv = j["conversation"].is_string() ? j["conversation"].get<std::string>() : j["conversation"].dump();
      } else {
        std::vector<std::string> cells;
        std::stringstream ss(line);
        std::string cell;
        while (std::getline(ss, cell, ',')) {
          const auto b = cell.find_first_not_of(" \t\r"), e = cell.find_last_not_of(" \t\r");
          cells.push_back(b == std::string::npos ? std::string() : cell.substr(b, e - b + 1));
        }
        if (header.empty()) {
          header = cells;
          continue;
        }
        auto col = [&](const std::string& name) -> int {
          for (size_t i = 0; i < header.size(); ++i) if (header[i] == name) return static_cast<int>(i);
          return -1;
        };
        const int ct = col("arrival_s"), ci = col("input_tokens"), co = col("output_tokens"), cc = col("conversation");
        if (ct < 0 || ci < 0 || co < 0) { ln = 1; bad("the CSV header lacks arrival_s, input_tokens or output_tokens"); }
        if (cells.size() < header.size()) bad("too few columns");
        auto t = parse_real(cells[ct]);
        auto i = parse_int(cells[ci]);
        auto o = parse_int(cells[co]);
        if (!t || !i || !o) bad("not a number");
        r.t = *t;
        r.in = static_cast<int32_t>(*i);
        r.out = static_cast<int32_t>(*o);
        if (cc >= 0) r.conv = cells[cc];
      }
      if (r.t < 0 || r.in <= 0 || r.out <= 0) bad("arrival must be >= 0 and token counts > 0");
      rows.push_back(r);
    }
    if (rows.empty()) p.fail("file", "the trace has no requests", "a file with at least one row");
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.t < b.t; });
    // Group rows into conversations (in order of first appearance).
    std::unordered_map<std::string, size_t> index;
    for (const auto& r : rows) {
      size_t ci;
      if (r.conv.empty() || !index.count(r.conv)) {
        ci = convs_.size();
        convs_.emplace_back();
        convs_.back().arrival_ns = static_cast<int64_t>(std::llround(r.t * scale * 1e9));
        if (!r.conv.empty()) index[r.conv] = ci;
      } else {
        ci = index[r.conv];
      }
      TurnSpec ts;
      ts.input_tokens = std::min<int32_t>(std::max<int32_t>(1, static_cast<int32_t>(std::llround(r.in * ratio))), max_context - 1);
      ts.output_tokens = std::max<int32_t>(1, std::min<int32_t>(static_cast<int32_t>(std::llround(r.out * ratio)), max_context - ts.input_tokens));
      convs_[ci].turns.push_back(ts);
      convs_[ci].turn_arrivals_ns.push_back(static_cast<int64_t>(std::llround(r.t * scale * 1e9)));
    }
    total_ = static_cast<int64_t>(rows.size());
  }
  std::optional<ConversationSpec> next(int64_t) override {
    if (pos_ >= convs_.size()) return std::nullopt;
    return convs_[pos_++];
  }
  const ArrivalSpec& arrival() const override { return arrival_; }
  int64_t total_requests() const override { return total_; }
  int64_t think_time_ns() override { return 0; }

 private:
  ArrivalSpec arrival_;
  std::vector<ConversationSpec> convs_;
  size_t pos_ = 0;
  int64_t total_ = 0;
};

}  // namespace

void register_workloads(Registry& reg) {
  auto lengths = [](const char* mean, const char* sd) {
    auto s = std::make_shared<Schema>();
    s->add("mean", ParamType::Real, "mean length in tokens").def(mean).range(1, 1e7);
    s->add("sd", ParamType::Real, "standard deviation in tokens (0: fixed length)").def(sd).nonneg();
    return s;
  };
  auto conv = std::make_shared<Schema>();
  conv->add("turns", ParamType::Int, "turns per conversation; each resends the history").def("1").range(1, 1000);
  conv->quantity("think_time", UnitKind::Time, "mean (exponential) gap between an answer and the next turn").def("0s").nonneg();
  Schema s;
  s.section("input_tokens", lengths("550", "150"), "prompt length, drawn as int(gauss(mean, sd)) redrawn until positive");
  s.section("output_tokens", lengths("150", "80"), "output length, drawn the same way");
  s.add("requests", ParamType::Int, "requests (turns) to complete").def("150").range(1, 1e9);
  s.component("arrival", &reg, "arrival", "closed_loop", "arrival process: {kind: closed_loop|poisson|gamma, ...}");
  s.section("conversation", conv, "multi-turn conversations");
  s.add("tokenizer", ParamType::String, "tokenizer the lengths are counted in (llmperf: llama); converted to the model's").def("llama");
  reg.add("load", "llmperf", "llmperf's generator: 550±150 in, 150±80 out by default; closed-loop clients", s,
          WorkloadFactory([](const Params& p, const Registry&, uint64_t seed, const std::string& model_tok, int max_ctx) {
            const double ratio = TokenizerTable::ratio(p.str("tokenizer"), model_tok, p.value("tokenizer").origin,
                                                       join_path(p.path(), "tokenizer"));
            WorkloadBuild b;
            b.source = std::make_unique<LlmperfSource>(p, seed, ratio, max_ctx);
            b.description = fmt::format("llmperf {}±{} in / {}±{} out ({} tokens)", p.section("input_tokens").real("mean"),
                                        p.section("input_tokens").real("sd"), p.section("output_tokens").real("mean"),
                                        p.section("output_tokens").real("sd"), p.str("tokenizer"));
            return b;
          }));

  Schema t;
  t.add("file", ParamType::String, "CSV (header arrival_s,input_tokens,output_tokens[,conversation]) or JSONL with those fields");
  t.add("time_scale", ParamType::Real, "multiply arrival times (0.5 replays twice as fast)").def("1").positive();
  t.add("tokenizer", ParamType::String, "tokenizer the trace's lengths are counted in").def("llama");
  reg.add("load", "trace", "replay of a request trace file (CSV or JSONL)", t,
          WorkloadFactory([](const Params& p, const Registry&, uint64_t, const std::string& model_tok, int max_ctx) {
            const double ratio = TokenizerTable::ratio(p.str("tokenizer"), model_tok, p.value("tokenizer").origin,
                                                       join_path(p.path(), "tokenizer"));
            WorkloadBuild b;
            b.source = std::make_unique<TraceSource>(p, ratio, max_ctx);
            b.description = "trace " + p.str("file");
            return b;
          }));

  Schema pois;
  pois.quantity("rate", UnitKind::Rate, "mean arrivals per second of conversations, e.g. 20/s").positive();
  reg.add("arrival", "poisson", "open loop, exponential gaps", pois);
  Schema gam;
  gam.quantity("rate", UnitKind::Rate, "mean arrivals per second, e.g. 20/s").positive();
  gam.add("cv", ParamType::Real, "coefficient of variation of the gaps (>1 is bursty)").def("2").positive();
  reg.add("arrival", "gamma", "open loop, gamma-distributed gaps (bursty when cv > 1)", gam);
  Schema cl;
  cl.add("clients", ParamType::Int, "concurrent clients, each sending its next request when the last completes").def("10").range(1, 1e7);
  reg.add("arrival", "closed_loop", "closed loop: N concurrent clients (llmperf's mode)", cl);
}

}  // namespace sluice::serving
