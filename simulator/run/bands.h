// Error bands: each latency, throughput and time figure of a run with its 90% interval.
//
// Two parts, combined (root-sum-square of the two half-widths on each side of the value):
//   cost   the scenario run again with every kernel time at the low and at the high end of its
//          cost source's band (hardware/cost_band.h: the cost model's measured error, stated per
//          source), everything else as it was: how far the figure moves if the step costs are
//          off by as much as they are known to be. Errors of all sources are taken together
//          (a world's workloads all at their low end, then all at their high end).
//   seeds  the scenario at `replications` other seeds (seed + 1, ...): a prediction interval
//          for one more run, t-distributed from the runs' spread (the nominal run included).
// A figure whose cost part moves much faster than the step costs (elasticity above 3: a
// queue near saturation) is named in a warning: there the model is at its weakest.
//
// metrics.json holds them under `bands` (beside `metrics`): the coverage, the seeds, the cost
// sources' bands, and one entry per figure (value, lo, hi, and each part's ends).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/json.h"
#include "registry/registry.h"

namespace sluice {

struct BandRequest {
  std::string file;               // the scenario
  std::vector<std::string> sets;  // the nominal run's overrides
  uint64_t seed = 1;              // the nominal run's seed
  int replications = 4;           // other seeds
  int threads = 0;                // runs at once; 0: one per core
};

// Elasticity (d log figure / d log step cost) above which a figure is named in a warning.
inline constexpr double kSensitiveElasticity = 3;

// The `bands` object of a run whose `metrics` object (nominal costs, its own seed) is `nominal`;
// warnings about sensitive figures are appended to `warnings`.
Json error_bands(const BandRequest& req, const Json& nominal, const Registry& reg, std::vector<std::string>& warnings);

// Whether a figure carries a band, by its glossary unit (a time, or a rate per second) or name
// (MFU); `path` is a concrete dotted path inside `metrics`, array elements by index.
bool banded_metric(const std::string& path);

// A few lines for `sluice run`'s summary: the main figures with their intervals.
std::vector<std::string> band_summary_lines(const Json& bands);

// The band entry of `metric` in a `bands` object (nullptr when it has none).
const Json* find_band(const Json& bands, const std::string& metric);

}  // namespace sluice
