// Sweeps: a grid (cartesian product) and/or zip (lockstep) over any scenario keys, with
// replications whose seeds derive from the base seed and the point. Each point is its own
// load_scenario + run_into with its own Recorder, so points run on any number of threads
// (and MPI ranks) and the combined table depends only on the points, never on who ran them.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/node.h"
#include "recorder/recorder.h"
#include "registry/registry.h"

namespace sluice {

// One varied key and the values it takes (YAML scalars as written, e.g. "100/s").
struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
  Origin origin;
};

// How seeds are chosen: derived from (base seed, point values, replication), or from
// (base seed, replication) only, so every point sees the same random streams.
enum class SeedMode { Point, Common };

// What to sweep: from a scenario's `sweep:` block, then amended by the command line.
struct SweepSpec {
  std::vector<SweepAxis> grid;  // cartesian product, first axis slowest
  std::vector<SweepAxis> zip;   // taken in lockstep (equal lengths), one combined axis of the product
  int replications = 1;
  SeedMode seeds = SeedMode::Point;
  std::vector<std::string> metrics;     // columns (default: every numeric metric of the points)
  std::vector<std::string> objectives;  // "min:ttft.p99", "max:throughput.output_tokens_per_s"
  std::vector<std::string> where;       // "ttft.p99<200ms"
};

// One point of a sweep: the values of the varied keys, its replication and seed.
struct SweepPoint {
  size_t index = 0;
  size_t config = 0;  // index of its configuration (the point without replication)
  std::vector<std::pair<std::string, std::string>> values;  // varied key -> value, axis order
  int replication = 0;
  uint64_t seed = 0;
  std::vector<std::string> sets;  // overrides that make the point (base sets, values, seed)
};

// Parses a `sweep:` block (a mapping) into a spec; errors name the block's file:line:col.
// `name` is the block's key in errors (a search reads its space with it too).
SweepSpec parse_sweep_block(const Node& block, const std::string& name = "sweep");
// The form of the spec's constraints and objectives ('ttft.p99<200ms', 'min:METRIC'), checked
// before any point runs (ConfigError); the metric names are checked once points have run.
void check_sweep_spec_form(const SweepSpec& spec);
// `key=v1,v2,...` from the command line into an axis.
SweepAxis parse_axis(const std::string& text, const std::string& flag);
// Adds command-line axes: an axis whose key the block already varies replaces it.
void merge_axes(std::vector<SweepAxis>& into, const std::vector<SweepAxis>& extra);

// The most points one sweep may have: a grid beyond it is refused before any point is made.
inline constexpr int64_t kMaxSweepPoints = 100'000;
// Expands a spec into points, in a fixed order (grid axes first-slowest, then zip, then
// replication). Seeds: a varied `seed` key wins; otherwise derived as SeedMode says.
std::vector<SweepPoint> expand_sweep(const SweepSpec& spec, uint64_t base_seed, const std::vector<std::string>& base_sets);
// The seed of a point: deterministic in (base, values, replication), within the seed range.
uint64_t derive_seed(uint64_t base_seed, const std::vector<std::pair<std::string, std::string>>& values, int replication,
                     SeedMode mode);

// A sweep scenario file: its tree without the `sweep:` block, and the block's spec.
struct SweepFile {
  Node scenario;
  std::optional<SweepSpec> spec;
};
SweepFile load_sweep_file(const std::string& file);

// How a sweep runs: where, on how many threads, and this process's share (MPI rank).
struct SweepOptions {
  std::string out_dir;
  int threads = 1;
  int rank = 0, ranks = 1;  // this process runs the points i with i % ranks == rank
  bool quiet = false;
  std::function<void(size_t done, size_t total)> progress;  // called from worker threads, serialized
  std::vector<bool> skip;  // points (by index) not to run at all (a search's pruned points); empty: none
};

// What one point produced (its metrics) or that it was skipped as already finished.
struct PointResult {
  size_t index = 0;
  bool resumed = false;
  Json metrics;  // the "metrics" object of the point's metrics.json
};

// Runs this process's share of the points (skipping those whose finished directory is
// already in out_dir/points/) and returns their results, ordered by point index. Every
// point is validated before any simulates; a ConfigError from one names the point.
std::vector<PointResult> run_sweep_points(const SweepFile& file, const std::string& file_name, const std::vector<SweepPoint>& points,
                                          const Registry& reg, const SweepOptions& opt);

// The combined table of a sweep (every point's results present, ordered by index).
struct SweepTable {
  std::vector<std::string> keys;     // varied keys (columns after point, replication, seed)
  std::vector<std::string> metrics;  // metric columns
  std::string csv;
  Json json;
  std::vector<std::string> summary;  // lines for the screen: best point per objective
};
SweepTable combine_sweep(const std::string& scenario_name, const SweepSpec& spec, const std::vector<SweepPoint>& points,
                         const std::vector<PointResult>& results);

// Resolves a metric name a user typed (a full dotted path or a unique suffix such as
// ttft.p99) against the available paths; throws ConfigError with the candidates otherwise.
std::string resolve_metric(const std::string& name, const std::vector<std::string>& paths, const std::string& flag);

// A constraint on a metric ('ttft.p99<200ms'): the metric resolved against `paths` (null: the
// form alone is checked), a time unit converted to the metric's own.
struct SweepConstraint {
  std::string text, metric, op;
  double value = 0;
  bool ok(double x) const;
};
SweepConstraint parse_constraint(const std::string& text, const std::vector<std::string>* paths);
// An objective's direction ("min", "max" or "" for the metric's natural one) and metric name.
std::pair<std::string, std::string> split_objective(const std::string& o);
// Whether less of a metric is better (latencies, costs, energy), by its name.
bool is_lower_better(const std::string& metric);

// The directory of one point under a sweep's output directory.
std::string point_dir(const std::string& out_dir, size_t index);

}  // namespace sluice
