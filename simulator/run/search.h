// `sluice search`: the cheapest deployment that meets the SLO, and the Pareto front.
//
// A scenario with a `search:` block names a space (grid and zip axes over any scenario keys,
// as a sweep's), the SLO every answer must meet (constraints such as 'tpot.p99<40ms') and the
// objectives (default: cost per million output tokens, average power, TTFT p99; all lowered).
//
// Before anything is simulated, each point is pruned when it cannot be an answer:
//   * its scenario does not validate or build: the model does not fit the devices' memory, a
//     tensor-parallel degree the server cannot hold, a pool too small for one sequence;
//   * a roofline lower bound already breaks the SLO: every decode step reads each active
//     non-embedding weight at least once at the datasheet HBM bandwidth, so no TPOT can be
//     below (active parameters - embeddings) x bytes per weight / (tp x bandwidth) (not applied
//     with speculative decoding, whose steps make several tokens); the same for TTFT: no prefill
//     is faster than reading those weights once, nor than its FLOPs at the datasheet peak;
//   * its accelerators cost more than the search's `budget:` (USD, at catalog prices).
// Objectives or a budget that need a device's power figures or price name the device that
// lacks them before anything runs.
// The rest run on all cores through the sweep machinery (their point directories make a search
// resumable); under MPI each rank runs its share first (SearchOptions::share_only), then one
// process answers with every point resumed. Of the simulated points, those meeting every constraint are feasible; the feasible
// points no other beats on every objective are the Pareto front; the cheapest is the best by the
// first objective. With none feasible, the search says which constraint excluded what.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/json.h"
#include "config/node.h"
#include "registry/registry.h"
#include "run/sweep.h"

namespace sluice {

struct SearchSpec {
  std::vector<SweepAxis> grid, zip;
  std::vector<std::string> slo;         // constraints an answer must meet
  std::vector<std::string> objectives;  // the front's axes; the first chooses the best
  double budget_usd = 0;                // the most the deployment's accelerators may cost (catalog prices); 0: none
  Origin origin, budget_origin;
};

struct SearchFile {
  Node scenario;  // the scenario without its `search:` block
  SearchSpec spec;
};
// Reads a scenario with a `search:` block; errors name the file, line and key.
SearchFile load_search_file(const std::string& file);

struct SearchOptions {
  std::string out_dir;
  int threads = 1;
  bool prune = true;  // false: simulate every point that builds (an exhaustive check of the pruning)
  std::vector<std::string> sets;
  // Under MPI: this process runs the points i with i % ranks == rank that survive pruning into
  // out_dir and returns (share_only); then one process runs the search again, every point
  // resumed from there, for the answer.
  int rank = 0, ranks = 1;
  bool share_only = false;
};

// One point's fate.
struct SearchRow {
  size_t point = 0;
  std::vector<std::pair<std::string, std::string>> values;
  uint64_t seed = 0;  // every point's the same (one load for all): derived from the base seed
  enum class Status { Invalid, Bound, Budget, Infeasible, Feasible } status = Status::Invalid;
  std::string why;       // invalid or bound: the reason; infeasible: the first constraint it breaks
  bool pareto = false;
  std::vector<double> objectives;  // feasible and infeasible: the objectives' values
};

struct SearchOutcome {
  std::vector<SearchRow> rows;
  std::vector<std::string> objective_metrics;  // resolved
  int best = -1;                               // row index of the best feasible point, -1: none
  Json json;
  std::string csv;
  std::vector<std::string> summary;
  double wall_s = 0;
};

SearchOutcome run_search(const SearchFile& file, const std::string& file_name, const Registry& reg, const SearchOptions& opt);

// The TPOT no configuration of a validated serving scenario can beat, in ms (0: no bound).
double tpot_lower_bound_ms(const Params& serving, const Registry& reg);
// The TTFT no request of a validated serving scenario can beat, in ms: its prefill reads every
// active non-embedding weight once at the datasheet HBM bandwidth, and computes 2 x those
// weights x the load's fewest prompt tokens at the datasheet peak of its precision (one token
// where prompts share prefixes or conversations resend their history, which caches may skip),
// over the prefill pool's devices where it has its own.
double ttft_lower_bound_ms(const Params& serving, const Registry& reg);
// The catalog price of a serving scenario's accelerators (every replica's devices, the prefill
// pool's at its own device's price); throws ConfigError naming a device without a price.
double deployment_capex_usd(const Params& serving, const Registry& reg);

}  // namespace sluice
