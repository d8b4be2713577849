#include "workloads/serving/workload.h"

#include "config/binding.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/names.h"
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

double ArrivalSpec::rate_at(int64_t t_ns) const {
  if (step_at_ns > 0 && t_ns >= step_at_ns) return step_rate_per_s;
  if (amplitude <= 0) return rate_per_s;
  return rate_per_s * (1 + amplitude * std::sin(2 * M_PI * static_cast<double>(t_ns) / static_cast<double>(period_ns)));
}

namespace {

// The arrival processes' keys, each bound to its ArrivalSpec field: registration declares
// them on the schemas it registers, and parse_arrival fills from the same declarations.
struct ArrivalKeys {
  Binding<ArrivalSpec> poisson, gamma, closed_loop;
};
ArrivalKeys bind_arrival_keys(Schema& pois, Schema& gam, Schema& cl) {
  ArrivalKeys k{Binding<ArrivalSpec>(pois), Binding<ArrivalSpec>(gam), Binding<ArrivalSpec>(cl)};
  k.poisson.quantity("rate", UnitKind::Rate, &ArrivalSpec::rate_per_s, "mean arrivals per second of conversations, e.g. 20/s").positive();
  k.poisson.real("amplitude", &ArrivalSpec::amplitude,
                 "a diurnal curve: the rate is rate x (1 + amplitude sin(2 pi t / period)) (0: constant)")
      .def("0")
      .range(0, 1);
  k.poisson.time_ns("period", &ArrivalSpec::period_ns, "the diurnal curve's period").def("24h").positive();
  k.poisson.time_ns("step_at", &ArrivalSpec::step_at_ns, "a step in load: from this time on the rate is step_rate (0s: none)")
      .def("0s")
      .nonneg();
  k.poisson.quantity("step_rate", UnitKind::Rate, &ArrivalSpec::step_rate_per_s, "the rate after step_at").def("1/s").positive();
  k.gamma.quantity("rate", UnitKind::Rate, &ArrivalSpec::rate_per_s, "mean arrivals per second, e.g. 20/s").positive();
  k.gamma.real("cv", &ArrivalSpec::cv, "coefficient of variation of the gaps (>1 is bursty)").def("2").positive();
  k.closed_loop.integer("clients", &ArrivalSpec::clients, "concurrent clients, each sending its next request when the last completes")
      .def("10")
      .range(1, 1e7);
  return k;
}
const ArrivalKeys& arrival_keys() {
  static Schema pois, gam, cl;
  static const ArrivalKeys k = bind_arrival_keys(pois, gam, cl);
  return k;
}

ArrivalSpec parse_arrival(const Params& wp) {
  const Params& p = wp.section("arrival");
  const std::string& k = wp.str("arrival");
  const ArrivalKeys& keys = arrival_keys();
  ArrivalSpec a;
  if (k == "poisson") {
    a.kind = ArrivalSpec::Kind::Poisson;
    keys.poisson.fill(p, a);
  } else if (k == "gamma") {
    a.kind = ArrivalSpec::Kind::Gamma;
    keys.gamma.fill(p, a);
  } else {
    a.kind = ArrivalSpec::Kind::ClosedLoop;
    keys.closed_loop.fill(p, a);
  }
  return a;
}

// llmperf's keys, each bound to the field it fills: lengths (one binding for both length
// sections, with their own defaults), the request count and the conversation shape.
struct LengthDist {
  double mean = 0, sd = 0;
};
// A prompt prefix shared across requests (a system prompt, a few-shot template).
struct SharedPrefix {
  int64_t tokens = 0;    // 0: none
  double fraction = 1;   // of requests whose prompt starts with one
  int64_t groups = 1;    // distinct prefixes, chosen uniformly
};
struct LlmperfConfig {
  LengthDist input, output;
  SharedPrefix prefix;
  int64_t requests = 0;
  int turns = 1;
  int64_t think_mean_ns = 0;
};
struct LlmperfKeys {
  Binding<LengthDist> input, output;
  Binding<LlmperfConfig> top, conversation;
  Binding<SharedPrefix> prefix;
};
LlmperfKeys bind_llmperf_keys(Schema& in, Schema& out, Schema& top, Schema& conv, Schema& pre) {
  LlmperfKeys k{Binding<LengthDist>(in), Binding<LengthDist>(out), Binding<LlmperfConfig>(top), Binding<LlmperfConfig>(conv),
                Binding<SharedPrefix>(pre)};
  k.prefix.integer("tokens", &SharedPrefix::tokens, "tokens of the shared prefix, before the drawn input (0: none)").def("0").range(0, 1e7);
  k.prefix.real("fraction", &SharedPrefix::fraction, "fraction of requests whose prompt starts with a shared prefix").def("1").range(0, 1);
  k.prefix.integer("groups", &SharedPrefix::groups, "distinct shared prefixes, each request's chosen uniformly").def("1").range(1, 1e6);
  auto lengths = [](Binding<LengthDist>& b, const char* mean, const char* sd) {
    b.real("mean", &LengthDist::mean, "mean length in tokens").def(mean).range(1, 1e7);
    b.real("sd", &LengthDist::sd, "standard deviation in tokens (0: fixed length)").def(sd).nonneg();
  };
  lengths(k.input, "550", "150");
  lengths(k.output, "150", "80");
  k.conversation.integer("turns", &LlmperfConfig::turns, "turns per conversation; each resends the history").def("1").range(1, 1000);
  k.conversation.time_ns("think_time", &LlmperfConfig::think_mean_ns, "mean (exponential) gap between an answer and the next turn")
      .def("0s")
      .range(0, 365 * 86400e9);
  // `top` declares requests when registration places it (between the sections and arrival).
  return k;
}
void bind_llmperf_requests(Binding<LlmperfConfig>& top) {
  top.integer("requests", &LlmperfConfig::requests, "requests (turns) to complete (only those in flight are held in memory)")
      .def("150")
      .range(1, static_cast<double>(kMaxRequests));
}
const LlmperfKeys& llmperf_keys() {
  static Schema in, out, top, conv, pre;
  static const LlmperfKeys k = [] {
    LlmperfKeys b = bind_llmperf_keys(in, out, top, conv, pre);
    bind_llmperf_requests(b.top);
    return b;
  }();
  return k;
}
LlmperfConfig llmperf_config(const Params& p) {
  const LlmperfKeys& k = llmperf_keys();
  LlmperfConfig c;
  k.input.fill(p.section("input_tokens"), c.input);
  k.output.fill(p.section("output_tokens"), c.output);
  k.top.fill(p, c);
  k.conversation.fill(p.section("conversation"), c);
  k.prefix.fill(p.section("shared_prefix"), c.prefix);
  return c;
}

// The next arrival of a Poisson process whose rate varies in time, after `t_ns`: thinning
// (Lewis and Shedler) under the largest rate the curve and the step reach.
int64_t next_varying_arrival_ns(const ArrivalSpec& a, RngStream& rng, int64_t t_ns) {
  const double top = std::max(a.rate_per_s * (1 + a.amplitude), a.step_at_ns > 0 ? a.step_rate_per_s : 0.0);
  double t = static_cast<double>(t_ns);
  for (int tries = 0; tries < 100'000'000; ++tries) {
    t += rng.exponential(1.0 / top) * 1e9;
    if (!(t < 9e18)) throw std::runtime_error("an arrival beyond the simulated time range");
    if (rng.uniform() * top <= a.rate_at(static_cast<int64_t>(t))) return static_cast<int64_t>(std::llround(t));
  }
  throw std::runtime_error("the arrival rate stays near zero: no arrival drawn");
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
  // Gaps are bounded at build time (requests / rate); a draw beyond int64 is an error, never a wrap.
  const double ns = gap_s * 1e9;
  if (!(ns < 9e18)) throw std::runtime_error(fmt::format("an arrival gap of {:.3g} s exceeds the simulated time range", gap_s));
  return static_cast<int64_t>(std::llround(ns));
}

// Refuses an open-loop arrival process whose last arrival would lie beyond what int64
// nanoseconds hold (with room for the tail of the gap distribution).
void check_arrival_horizon(const Params& wp, const ArrivalSpec& a, int64_t requests) {
  if (a.kind == ArrivalSpec::Kind::ClosedLoop || a.kind == ArrivalSpec::Kind::Trace) return;
  const double horizon_s = static_cast<double>(requests) / a.rate_per_s;
  constexpr double kMaxHorizonS = 1e9;  // about 31.7 years; int64 ns hold 292
  if (horizon_s > kMaxHorizonS)
    wp.section("arrival").fail("rate",
                               fmt::format("{} requests at this rate arrive over {:.3g} s ({:.3g} years), beyond the "
                                           "{:.0f} years sluice simulates",
                                           requests, horizon_s, horizon_s / 3.15576e7, kMaxHorizonS / 3.15576e7),
                               fmt::format("a rate of at least {:.3g}/s for {} requests", static_cast<double>(requests) / kMaxHorizonS, requests));
}

// The keys of one request class (an item of a load's `classes:` list).
const Schema& class_schema() {
  static const Schema s = [] {
    Schema c;
    c.add("name", ParamType::String, "the class's name (a metric key: letters, digits, '-', '_')");
    c.add("fraction", ParamType::Real, "its share of the requests (the classes' shares sum to 1)").range(0, 1).min_exclusive = true;
    c.add("priority", ParamType::Int, "lower is served first where the deployment orders by priority").def("0").range(0, 1000);
    c.quantity("ttft", UnitKind::Time, "its time-to-first-token objective (0s: none)").def("0s").nonneg();
    c.quantity("tpot", UnitKind::Time, "its time-per-output-token objective (0s: none)").def("0s").nonneg();
    return c;
  }();
  return s;
}

// A load's `classes:` list, each item validated against class_schema (errors name the item).
std::vector<RequestClass> parse_classes(const Params& p) {
  std::vector<RequestClass> out;
  if (!p.given("classes")) return out;
  const Node& n = p.node("classes");
  const std::string path = join_path(p.path(), "classes");
  if (!n.is_seq() || n.seq.empty())
    throw ConfigError(n.origin, path, n.brief(), "a list of request classes", "[{name: interactive, fraction: 0.3, priority: 0, ttft: 500ms}, ...]");
  double sum = 0;
  for (size_t i = 0; i < n.seq.size(); ++i) {
    const std::string ip = fmt::format("{}[{}]", path, i);
    const Params c = parse_params(n.seq[i], class_schema(), ip);
    RequestClass rc;
    rc.name = c.str("name");
    if (const std::string why = name_problem(rc.name, NameUse::MetricKey); !why.empty()) c.fail("name", why, name_rule(NameUse::MetricKey));
    for (const auto& o : out)
      if (o.name == rc.name) c.fail("name", "two classes have this name", "distinct names");
    rc.fraction = c.real("fraction");
    rc.priority = static_cast<int>(c.integer("priority"));
    rc.ttft_ns = c.time("ttft").count_ns();
    rc.tpot_ns = c.time("tpot").count_ns();
    sum += rc.fraction;
    out.push_back(rc);
  }
  if (std::abs(sum - 1.0) > 1e-9)
    throw ConfigError(n.origin, path, fmt::format("fractions summing to {}", sum), "the classes' fractions must sum to 1",
                      "shares that add up to 1");
  return out;
}

class LlmperfSource final : public WorkloadSource {
 public:
  LlmperfSource(const Params& p, const LlmperfConfig& cfg, uint64_t seed, double ratio, int max_context)
      : rng_(seed, "workload.llmperf"),
        arrival_rng_(seed, "workload.arrivals"),
        think_rng_(seed, "workload.think"),
        prefix_rng_(seed, "workload.prefix"),
        class_rng_(seed, "workload.class"),
        classes_(parse_classes(p)),
        prefix_(cfg.prefix),
        arrival_(parse_arrival(p)),
        in_mean_(cfg.input.mean),
        in_sd_(cfg.input.sd),
        out_mean_(cfg.output.mean),
        out_sd_(cfg.output.sd),
        requests_(cfg.requests),
        turns_(cfg.turns),
        think_mean_ns_(cfg.think_mean_ns),
        ratio_(ratio),
        max_context_(max_context) {
    if (in_mean_ + out_mean_ > max_context_)
      p.fail("input_tokens", fmt::format("mean input plus output tokens exceed the model's context of {}", max_context_),
             "shorter lengths or a model with a longer context");
    if (prefix_.tokens > 0 && convert(static_cast<int32_t>(prefix_.tokens)) >= max_context_)
      p.section("shared_prefix").fail("tokens", fmt::format("a prefix of {} tokens leaves no room in the model's context of {}",
                                                            prefix_.tokens, max_context_),
                                      fmt::format("fewer than {} tokens", max_context_));
    check_arrival_horizon(p, arrival_, requests_);
  }

  std::optional<ConversationSpec> next(int64_t now_ns) override {
    if (issued_ >= requests_) return std::nullopt;
    ConversationSpec c;
    if (arrival_.varies()) {
      t_ns_ = next_varying_arrival_ns(arrival_, arrival_rng_, t_ns_);
      c.arrival_ns = t_ns_;
    } else if (arrival_.kind != ArrivalSpec::Kind::ClosedLoop) {
      t_ns_ += next_gap_ns(arrival_, arrival_rng_);
      c.arrival_ns = t_ns_;
    } else {
      c.arrival_ns = now_ns;
    }
    const int turns = static_cast<int>(std::min<int64_t>(turns_, requests_ - issued_));
    // A conversation's class (its own stream: lengths and arrivals are those of the load without classes).
    int32_t cls = -1;
    if (!classes_.empty()) {
      double u = class_rng_.uniform();
      cls = static_cast<int32_t>(classes_.size()) - 1;
      for (size_t k = 0; k < classes_.size(); ++k) {
        if (u < classes_[k].fraction) {
          cls = static_cast<int32_t>(k);
          break;
        }
        u -= classes_[k].fraction;
      }
    }
    for (int i = 0; i < turns; ++i) {
      TurnSpec t;
      t.class_id = cls;
      t.input_tokens = convert(llmperf_length(rng_, in_mean_, in_sd_));
      t.output_tokens = convert(llmperf_length(rng_, out_mean_, out_sd_));
      // The first turn's prompt may start with a shared prefix (its own stream: the lengths
      // and arrivals are those of the load without it).
      if (prefix_.tokens > 0 && i == 0 && prefix_rng_.uniform() < prefix_.fraction) {
        t.prefix_id = static_cast<int32_t>(prefix_rng_.below(static_cast<uint64_t>(prefix_.groups)));
        t.prefix_tokens = convert(static_cast<int32_t>(prefix_.tokens));
        t.input_tokens += t.prefix_tokens;
      }
      // A request longer than the model's context is truncated to it (llmperf would get an
      // error), and counted: the run warns how many were.
      const TurnSpec drawn = t;
      t.input_tokens = std::min(t.input_tokens, max_context_ - 1);
      t.output_tokens = std::max(1, std::min(t.output_tokens, max_context_ - t.input_tokens));
      t.prefix_tokens = std::min(t.prefix_tokens, t.input_tokens);
      if (t.input_tokens != drawn.input_tokens || t.output_tokens != drawn.output_tokens) ++truncated_;
      c.turns.push_back(t);
    }
    issued_ += turns;
    return c;
  }
  const ArrivalSpec& arrival() const override { return arrival_; }
  int64_t total_requests() const override { return requests_; }
  int64_t think_time_ns() override {
    if (think_mean_ns_ == 0) return 0;
    // think_time is at most a year (schema); a draw from the far tail is capped at 40 years so
    // that adding it to the clock cannot leave the int64 range.
    return static_cast<int64_t>(std::llround(std::min(think_rng_.exponential(static_cast<double>(think_mean_ns_)), 1.26e18)));
  }
  int64_t truncated_to_context() const override { return truncated_; }
  const std::vector<RequestClass>& classes() const override { return classes_; }
  // Fixed lengths (sd 0) give every prompt the mean's tokens; a spread may draw down to 1. What a
  // cache may hold comes before them and is not counted: a shared prefix is added in front of the
  // drawn input (which loses its tail when the two pass the context), and a later turn's history
  // is dropped before its new input is cut.
  int32_t fewest_new_tokens() const override {
    if (in_sd_ > 0) return 1;
    const int32_t room = max_context_ - 1 - (prefix_.tokens > 0 ? convert(static_cast<int32_t>(prefix_.tokens)) : 0);
    return std::max<int32_t>(1, std::min<int32_t>(convert(static_cast<int32_t>(in_mean_)), room));
  }
  std::vector<std::string> warnings() const override {
    if (truncated_ == 0) return {};
    return {fmt::format("{} of {} requests drawn were longer than the model's context of {} tokens and were truncated "
                        "to it (they are served, not rejected)", truncated_, issued_, max_context_)};
  }

 private:
  int64_t truncated_ = 0;
  int32_t convert(int32_t tokens) const {
    return ratio_ == 1.0 ? tokens : std::max<int32_t>(1, static_cast<int32_t>(std::llround(tokens * ratio_)));
  }
  RngStream rng_, arrival_rng_, think_rng_, prefix_rng_, class_rng_;
  std::vector<RequestClass> classes_;
  SharedPrefix prefix_;
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

// Replays a trace: one row per request (arrival time, input tokens, output tokens, an
// optional conversation id, rows of one conversation being its turns in arrival order, and
// an optional shared prefix: prefix_id names it, prefix_tokens is its length within the
// prompt, the same wherever the id appears).
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
    struct Row { double t; int64_t in, out; std::string conv; size_t line; std::string prefix; int64_t prefix_tokens; };
    std::vector<Row> rows;
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(file, ec);
    constexpr std::uintmax_t kMaxTraceBytes = 2ull << 30;
    if (!ec && bytes > kMaxTraceBytes)
      p.fail("file", fmt::format("the trace is {} bytes; at most {} are read", bytes, kMaxTraceBytes), "a smaller trace");
    std::ifstream in(file, std::ios::binary);
    if (!in) p.fail("file", "the trace file cannot be opened", "a readable .csv or .jsonl file");
    std::string line;
    size_t ln = 0;
    const bool jsonl = file.size() > 6 && file.substr(file.size() - 6) == ".jsonl";
    std::vector<std::string> header;
    auto bad = [&](const std::string& what) {
      throw ConfigError(Origin{file, static_cast<int>(ln), 1}, join_path(p.path(), "file"), line.substr(0, 60), what,
                        fmt::format("rows with arrival_s (seconds >= 0), input_tokens and output_tokens (integers in "
                                    "[1, {}]), an optional conversation, and optionally prefix_id with prefix_tokens "
                                    "(a shared prompt prefix, at most input_tokens)", kMaxTraceTokens));
    };
    // Token counts are whole numbers of tokens, checked in 64 bits before they are narrowed.
    auto count = [&](const char* what, std::optional<long long> v) -> int64_t {
      if (!v) bad(fmt::format("{} is not a whole number of tokens", what));
      if (*v <= 0 || *v > kMaxTraceTokens) bad(fmt::format("{} = {} is outside [1, {}]", what, *v, kMaxTraceTokens));
      return *v;
    };
    auto json_count = [&](const nlohmann::json& j, const char* what) -> int64_t {
      const auto& v = j[what];
      if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMaxTraceTokens)) return count(what, kMaxTraceTokens + 1);
        return count(what, v.get<long long>());
      }
      if (v.is_number_float()) {
        const double d = v.get<double>();
        if (std::floor(d) != d || std::fabs(d) > 9e15) bad(fmt::format("{} = {} is not a whole number of tokens", what, v.dump()));
        return count(what, static_cast<long long>(d));
      }
      bad(fmt::format("{} is a JSON {}, not a number", what, v.type_name()));
      return 0;
    };
    while (std::getline(in, line)) {
      ++ln;
      if (ln == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
      // Tolerate CRLF files and padded cells.
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (line.empty() || line[0] == '#') continue;
      if (rows.size() >= static_cast<size_t>(kMaxTraceRequests))
        bad(fmt::format("the trace has more than {} requests, the most one run holds", kMaxTraceRequests));
      Row r{0, 0, 0, "", ln, "", 0};
      bool has_prefix_tokens = false;
      if (jsonl) {
        // A trace row is flat: nesting deeper than a few levels is refused before parsing (a
        // 100000-deep array crashed the recursive destructor and dump()).
        int depth = 0, deepest = 0;
        bool in_string = false;
        for (size_t k = 0; k < line.size(); ++k) {
          const char ch = line[k];
          if (in_string) {
            if (ch == '\\') ++k;
            else if (ch == '"') in_string = false;
          } else if (ch == '"') in_string = true;
          else if (ch == '[' || ch == '{') deepest = std::max(deepest, ++depth);
          else if (ch == ']' || ch == '}') --depth;
        }
        if (deepest > 8) bad("a JSONL row nested more than 8 levels deep");
        nlohmann::json j;
        try { j = nlohmann::json::parse(line); } catch (const std::exception& e) { bad(std::string("not JSON: ") + e.what()); }
        if (!j.is_object()) bad("a JSONL row must be a JSON object");
        if (!j.contains("arrival_s") || !j.contains("input_tokens") || !j.contains("output_tokens")) bad("missing a field");
        if (!j["arrival_s"].is_number()) bad(fmt::format("arrival_s is a JSON {}, not a number", j["arrival_s"].type_name()));
        r.t = j["arrival_s"].get<double>();
        r.in = json_count(j, "input_tokens");
        r.out = json_count(j, "output_tokens");
        if (j.contains("conversation")) {
          const auto& c = j["conversation"];
          if (!c.is_string() && !c.is_number_integer()) bad("conversation must be a string or an integer");
          r.conv = c.is_string() ? c.get<std::string>() : c.dump();
        }
        if (j.contains("prefix_id")) {
          const auto& c = j["prefix_id"];
          if (!c.is_string() && !c.is_number_integer()) bad("prefix_id must be a string or an integer");
          r.prefix = c.is_string() ? c.get<std::string>() : c.dump();
        }
        if (j.contains("prefix_tokens")) {
          has_prefix_tokens = true;
          r.prefix_tokens = json_count(j, "prefix_tokens");
        }
      } else {
        std::vector<std::string> cells;
        std::stringstream ss(line);
        std::string cell;
        while (std::getline(ss, cell, ',')) {
          const auto b = cell.find_first_not_of(" \t\r"), e = cell.find_last_not_of(" \t\r");
          cells.push_back(b == std::string::npos ? std::string() : cell.substr(b, e - b + 1));
        }
        if (!header.empty() && !line.empty() && line.back() == ',') cells.emplace_back();  // a row's empty last cell (getline drops it)
        if (header.empty()) {
          header = cells;
          continue;
        }
        auto col = [&](const std::string& name) -> int {
          for (size_t i = 0; i < header.size(); ++i) if (header[i] == name) return static_cast<int>(i);
          return -1;
        };
        const int ct = col("arrival_s"), ci = col("input_tokens"), co = col("output_tokens"), cc = col("conversation"),
                  cp = col("prefix_id"), cpt = col("prefix_tokens");
        if (ct < 0 || ci < 0 || co < 0) { ln = 1; bad("the CSV header lacks arrival_s, input_tokens or output_tokens"); }
        if (cells.size() < header.size()) bad("too few columns");
        auto t = parse_real(cells[ct]);
        if (!t) bad("arrival_s is not a number");
        r.t = *t;
        r.in = count("input_tokens", parse_int(cells[ci]));
        r.out = count("output_tokens", parse_int(cells[co]));
        if (cc >= 0) r.conv = cells[cc];
        if (cp >= 0) r.prefix = cells[cp];
        if (cpt >= 0 && !cells[cpt].empty()) {
          has_prefix_tokens = true;
          r.prefix_tokens = count("prefix_tokens", parse_int(cells[cpt]));
        }
      }
      if (r.prefix.empty() != !has_prefix_tokens) bad("prefix_id and prefix_tokens come together: both or neither");
      if (r.prefix_tokens > r.in) bad(fmt::format("prefix_tokens = {} exceeds input_tokens = {}: the prefix is part of the prompt", r.prefix_tokens, r.in));
      if (!r.prefix.empty()) {
        const auto [it, fresh] = prefix_len_.emplace(r.prefix, std::make_pair(r.prefix_tokens, ln));
        if (!fresh && it->second.first != r.prefix_tokens)
          bad(fmt::format("prefix {} has {} tokens here and {} on line {}: one prefix, one length", r.prefix, r.prefix_tokens,
                          it->second.first, it->second.second));
      }
      if (!std::isfinite(r.t) || r.t < 0) bad("arrival_s must be a time in seconds >= 0");
      if (!(r.t * scale * 1e9 < 9e18))
        bad(fmt::format("arrival_s = {} (x time_scale {}) lies beyond the 292 years int64 nanoseconds hold", r.t, scale));
      rows.push_back(r);
    }
    if (rows.empty()) p.fail("file", "the trace has no requests", "a file with at least one row");
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.t < b.t; });
    // Group rows into conversations (in order of first appearance); prefixes get dense ids in
    // order of first appearance.
    std::unordered_map<std::string, size_t> index;
    std::unordered_map<std::string, int32_t> prefix_ids;
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
      // Longer than the model's context: truncated to it, and counted (a warning says how many).
      const int64_t in_tok = std::max<int64_t>(1, std::llround(static_cast<double>(r.in) * ratio));
      const int64_t out_tok = std::max<int64_t>(1, std::llround(static_cast<double>(r.out) * ratio));
      TurnSpec ts;
      ts.input_tokens = static_cast<int32_t>(std::min<int64_t>(in_tok, max_context - 1));
      ts.output_tokens = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(out_tok, max_context - ts.input_tokens)));
      if (ts.input_tokens != in_tok || ts.output_tokens != out_tok) ++truncated_;
      fewest_ = std::min<int32_t>(fewest_, std::max<int32_t>(1, ts.input_tokens - static_cast<int32_t>(std::llround(static_cast<double>(r.prefix_tokens) * ratio))));
      if (!r.prefix.empty()) {
        if (!convs_[ci].turns.empty()) {
          ln = r.line;
          line = "";
          bad(fmt::format("a shared prefix on a later turn of conversation {}: a later turn's prompt starts with the "
                          "conversation so far, so only a first turn may name one", r.conv));
        }
        const auto [it, fresh] = prefix_ids.emplace(r.prefix, static_cast<int32_t>(prefix_ids.size()));
        ts.prefix_id = it->second;
        ts.prefix_tokens = static_cast<int32_t>(std::min<int64_t>(std::llround(static_cast<double>(r.prefix_tokens) * ratio), ts.input_tokens));
      }
      convs_[ci].turns.push_back(ts);
      convs_[ci].turn_arrivals_ns.push_back(static_cast<int64_t>(std::llround(r.t * scale * 1e9)));
    }
    max_context_ = max_context;
    total_ = static_cast<int64_t>(rows.size());
  }
  std::optional<ConversationSpec> next(int64_t) override {
    if (pos_ >= convs_.size()) return std::nullopt;
    return convs_[pos_++];
  }
  const ArrivalSpec& arrival() const override { return arrival_; }
  int64_t total_requests() const override { return total_; }
  int64_t think_time_ns() override { return 0; }
  int64_t truncated_to_context() const override { return truncated_; }
  int32_t fewest_new_tokens() const override { return fewest_; }
  std::vector<std::string> warnings() const override {
    if (truncated_ == 0) return {};
    return {fmt::format("{} of {} trace requests were longer than the model's context of {} tokens and were truncated "
                        "to it (they are served, not rejected)", truncated_, total_, max_context_)};
  }

 private:
  std::unordered_map<std::string, std::pair<int64_t, size_t>> prefix_len_;  // while reading: a prefix's length and first line
  int32_t fewest_ = std::numeric_limits<int32_t>::max();
  int64_t truncated_ = 0;
  int max_context_ = 0;
  ArrivalSpec arrival_;
  std::vector<ConversationSpec> convs_;
  size_t pos_ = 0;
  int64_t total_ = 0;
};

}  // namespace

SLUICE_REGISTER(component, serving_loads) {
  auto in = std::make_shared<Schema>(), out = std::make_shared<Schema>(), conv = std::make_shared<Schema>(),
       pre = std::make_shared<Schema>();
  Schema s;
  LlmperfKeys keys = bind_llmperf_keys(*in, *out, s, *conv, *pre);
  s.section("input_tokens", in, "prompt length, drawn as int(gauss(mean, sd)) redrawn until positive");
  s.section("output_tokens", out, "output length, drawn the same way");
  bind_llmperf_requests(keys.top);
  s.component("arrival", &reg, "arrival", "closed_loop", "arrival process: {kind: closed_loop|poisson|gamma, ...}");
  s.section("conversation", conv, "multi-turn conversations");
  s.add("classes", ParamType::Any,
        "request classes, each {name, fraction, priority, ttft, tpot}: a conversation's class is drawn by fraction; "
        "metrics report each class's SLO attainment and goodput")
      .optional();
  s.section("shared_prefix", pre, "a prompt prefix shared across requests (a system prompt, a few-shot template): its KV "
                                  "blocks are shared where deployment.prefix_caching is on");
  s.add("tokenizer", ParamType::String, "tokenizer the lengths are counted in (llmperf: llama); converted to the model's").def("llama");
  reg.add("load", "llmperf", "llmperf's generator: 550±150 in, 150±80 out by default; closed-loop clients", s,
          WorkloadFactory([](const Params& p, const Registry&, uint64_t seed, const std::string& model_tok, int max_ctx) {
            const double ratio = TokenizerTable::ratio(p.str("tokenizer"), model_tok, p.value("tokenizer").origin,
                                                       join_path(p.path(), "tokenizer"));
            WorkloadBuild b;
            const LlmperfConfig c = llmperf_config(p);
            b.source = std::make_unique<LlmperfSource>(p, c, seed, ratio, max_ctx);
            b.description = fmt::format("llmperf {}±{} in / {}±{} out ({} tokens)", c.input.mean, c.input.sd, c.output.mean,
                                        c.output.sd, p.str("tokenizer"));
            return b;
          }));

  Schema t;
  t.add("file", ParamType::String,
        "CSV (header arrival_s,input_tokens,output_tokens[,conversation][,prefix_id,prefix_tokens]) or JSONL with those fields; "
        "prefix_id names a shared prompt prefix (a system prompt) of prefix_tokens tokens, part of input_tokens");
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

  Schema pois, gam, cl;
  bind_arrival_keys(pois, gam, cl);
  reg.add("arrival", "poisson", "open loop, exponential gaps", pois);
  reg.add("arrival", "gamma", "open loop, gamma-distributed gaps (bursty when cv > 1)", gam);
  reg.add("arrival", "closed_loop", "closed loop: N concurrent clients (llmperf's mode)", cl);
}

}  // namespace sluice::serving
