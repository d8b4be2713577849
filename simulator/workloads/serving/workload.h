// Serving workloads: llmperf's synthetic generator (lengths as int(gauss(mean, sd)),
// redrawn until positive), arrival processes (Poisson, gamma-bursty, closed-loop clients),
// multi-turn conversations, trace replay (CSV or JSONL), and tokenizer conversion.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/schema.h"
#include "engine/rng.h"
#include "registry/registry.h"

namespace sluice::serving {

// One turn to submit: lengths already in the served model's tokens.
struct TurnSpec {
  int32_t input_tokens = 0;
  int32_t output_tokens = 0;
  int32_t prefix_id = -1;    // the shared prefix the prompt starts with (-1: none)
  int32_t prefix_tokens = 0;  // its length, part of input_tokens
  int32_t class_id = -1;      // its request class (-1: the load has none)
};

// A request class (interactive, batch, ...): its share of the load, its priority (lower is
// served first by a deployment that orders by priority) and its service-level objectives.
struct RequestClass {
  std::string name;
  double fraction = 1;
  int priority = 0;
  int64_t ttft_ns = 0, tpot_ns = 0;  // 0: no objective
};

// The next conversation a source produces: when it starts and its turns.
struct ConversationSpec {
  int64_t arrival_ns = 0;        // first turn's arrival (open-loop and trace)
  std::vector<TurnSpec> turns;
  std::vector<int64_t> turn_arrivals_ns;  // trace only: given arrival time of each turn
};

// How requests arrive.
struct ArrivalSpec {
  enum class Kind { Poisson, Gamma, ClosedLoop, Trace } kind = Kind::ClosedLoop;
  double rate_per_s = 0;  // Poisson, Gamma
  double cv = 1;          // Gamma: coefficient of variation of inter-arrival gaps
  int clients = 1;        // ClosedLoop
  // Poisson with a rate that varies in time (0: constant): a diurnal curve
  // rate x (1 + amplitude sin(2 pi t / period)), and a step to step_rate at step_at.
  double amplitude = 0;
  int64_t period_ns = 0;
  int64_t step_at_ns = 0;
  double step_rate_per_s = 0;
  bool varies() const { return amplitude > 0 || step_at_ns > 0; }
  double rate_at(int64_t t_ns) const;  // arrivals per second at t
};

// A source of conversations; seeded per component id.
class WorkloadSource {
 public:
  virtual ~WorkloadSource() = default;
  virtual std::optional<ConversationSpec> next(int64_t now_ns) = 0;  // nullopt: exhausted
  virtual const ArrivalSpec& arrival() const = 0;
  virtual int64_t total_requests() const = 0;  // requests (turns) to complete; the run ends there
  virtual int64_t think_time_ns() = 0;  // gap between a turn's last token and the next turn (own stream)
  // What the run should be told about the requests issued so far (lengths truncated to the
  // context, ...); the study hands these to the recorder's warnings.
  virtual std::vector<std::string> warnings() const { return {}; }
  // Requests issued so far whose lengths exceeded the model's context and were truncated to it
  // (served, not rejected: `requests.truncated_to_context`, beside `rejected_too_long`).
  virtual int64_t truncated_to_context() const { return 0; }
  // The fewest prompt tokens any of its requests will compute (beyond a shared prefix, which
  // may be cached): 1 where lengths are drawn from a spread; for SLO lower bounds.
  virtual int32_t fewest_new_tokens() const { return 1; }
  // The load's request classes (empty: none); a TurnSpec's class_id indexes them.
  virtual const std::vector<RequestClass>& classes() const {
    static const std::vector<RequestClass> none;
    return none;
  }
};

// The most requests (turns) one run may have. Memory no longer grows with it: a request's
// slot is reused once it ends, its record streams to requests.csv and into bounded
// percentile summaries (deployment.max_in_flight bounds the requests held at once). The
// bound keeps request numbers within 32 bits, and requests.csv (about 100 bytes a request)
// within 100 GB.
inline constexpr int64_t kMaxRequests = 1'000'000'000;
// The most rows a trace file may have: a replayed trace is read into memory whole.
inline constexpr int64_t kMaxTraceRequests = 10'000'000;
// The longest request a trace may name, in tokens (any model's context is far below it).
inline constexpr int64_t kMaxTraceTokens = 100'000'000;

// Token-count conversion between tokenizers, from models/tokenizers.yaml.
struct TokenizerTable {
  // Tokens of `to` per token of `from` for the same text.
  static double ratio(const std::string& from, const std::string& to, const Origin& at, const std::string& path);
};

struct WorkloadBuild {
  std::unique_ptr<WorkloadSource> source;
  std::string description;
};
using WorkloadFactory = std::function<WorkloadBuild(const Params& p, const Registry& reg, uint64_t seed,
                                                    const std::string& model_tokenizer, int model_max_context)>;


// llmperf's length draw: int(gauss(mean, sd)) truncated toward zero, redrawn until positive.
int32_t llmperf_length(RngStream& rng, double mean, double sd);

}  // namespace sluice::serving
