// Speculative decoding (deployment.speculative): each decode step of a sequence first runs a
// drafter that proposes k tokens one after another, then the target model scores the last
// token and the k drafts in one step (verification, SeqWork::drafts); the drafts are accepted
// up to the first the target rejects, and the target's own token at that position is kept as
// well, so a step yields 1 + accepted tokens (1 to k + 1).
//
// Drafters:
//   draft  a smaller model of the same vocabulary (e.g. Llama-3.2-1B for Llama-3-70B), with its
//          own weights and KV cache on the same devices, k decode passes of the batch
//   mtp    multi-token prediction (DeepSeek-V3): a module of one more decoder layer of the
//          target's shape that shares its embedding and LM head, run k times
//   eagle  EAGLE-style: one dense decoder layer of the target's width on the target's hidden
//          states, sharing its embedding and LM head, run k times
// Acceptance: a per-position rate (constant, or a curve: the chance draft j is accepted once
// those before it were), or the distribution of accepted drafts per step itself. Draws come
// from the run's seed, one per sequence and step, in batch order.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "config/schema.h"
#include "engine/rng.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"

namespace sluice::serving {

struct SpeculativeConfig {
  enum class Method { None, Draft, Mtp, Eagle } method = Method::None;
  int tokens = 0;                    // k drafts proposed per step
  std::vector<double> curve;         // k entries: P(draft j accepted | drafts before it accepted)
  std::vector<double> distribution;  // k + 1 entries: P(exactly j drafts accepted); empty: from curve
  ModelSpec draft;                   // the draft model (method draft); the head's shape is derived otherwise
  bool on() const { return method != Method::None; }
};

const char* method_name(SpeculativeConfig::Method m);

// The drafter, the acceptance draws and the counters of one deployment.
class Speculator {
 public:
  // `target` and `opt` are the deployment's model and cost options (tables, parallelism).
  Speculator(const SpeculativeConfig& c, const HardwareSpec& hw, const ModelSpec& target, const CostOptions& opt, uint64_t seed);
  int k() const { return k_; }
  const SpeculativeConfig& config() const { return cfg_; }
  // Drafts accepted at a step of request `serial` whose `position`-th token the step makes, in
  // [0, k]: a function of (seed, serial, position) alone, so the same request meets the same
  // acceptances whatever else the deployment runs (common random numbers across a sweep).
  int draw(uint32_t serial, int32_t position) const;
  // P(exactly j drafts accepted), j = 0..k, and the mean tokens one step yields (1 + E[accepted]).
  const std::vector<double>& distribution() const { return dist_; }
  double expected_tokens_per_step() const;
  // The drafter's time over a batch of sequences at these contexts: k passes, pass j at
  // context + j (a draft model's decode; a head's one layer with the LM head).
  // The batch's prompt chunks (and first tokens) the target computes ride the first pass: a
  // draft model prefills them too, a head runs its layer over them.
  double draft_ns(std::span<const int> contexts, std::span<const SeqWork> chunks = {}) const;
  // The drafter's model: the draft model, or the head as a one-layer model of the target's shape.
  const ModelSpec& drafter() const { return drafter_; }
  // The gain of speculation at `batch` sequences decoding at `context`: the tokens a plain
  // decode step makes per second against those a speculative step makes (mean tokens per step
  // over draft + verification), from the cost models alone (no queueing).
  double gain_at(const CostModel& target, int batch, int context) const;
  // The smallest batch at which speculation stops paying off (gain below 1), up to `most`
  // sequences; 0 when it pays off up to there.
  int break_even_batch(const CostModel& target, int context, int most) const;

  // Counters of the run.
  int64_t steps = 0, proposed = 0, accepted = 0, tokens = 0;
  double draft_ns_total = 0;

 private:
  SpeculativeConfig cfg_;
  int k_ = 0;
  ModelSpec drafter_;
  CostModel cost_;
  std::vector<double> dist_, cdf_;
  uint64_t key_;  // the acceptance draws' stream, from the seed
  mutable std::vector<SeqWork> work_;  // the drafter's passes, reused
};

// deployment.speculative's keys, and the config they give for a deployment of `target` under
// tensor parallelism tp and pipeline parallelism pp, every check at its key (a draft model
// larger than its target or of another vocabulary, an acceptance that is not a probability, a
// distribution of the wrong length, speculation over pipeline stages).
std::shared_ptr<Schema> speculative_schema();
SpeculativeConfig speculative_from_params(const Params& s, const ModelSpec& target, int tp, int pp);

// The one-layer model a head drafts with (mtp: the target's layer, experts included; eagle: a
// dense layer of the target's width).
ModelSpec speculative_head(const ModelSpec& target, SpeculativeConfig::Method m);
// The drafter's model: the draft model, or the head, in the target's number formats.
ModelSpec speculative_drafter(const SpeculativeConfig& c, const ModelSpec& target);
// What the drafter holds per device under tensor parallelism tp (0 when speculation is off):
// its weights (a head shares the target's embedding and LM head, so only its layer counts),
// and its KV cache per token of a sequence (beside the target's, block for block).
double speculative_weight_bytes_per_gpu(const SpeculativeConfig& c, const ModelSpec& target, int tp);
double speculative_kv_bytes_per_token_per_gpu(const SpeculativeConfig& c, const ModelSpec& target, int tp);

}  // namespace sluice::serving
