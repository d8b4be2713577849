// Running a loaded scenario into a recorder, and the results header; shared by `sluice run`,
// `sluice compare` and the compare study.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "run/scenario.h"
#include "recorder/recorder.h"

namespace sluice {

// Throws std::logic_error naming the first metric whose name says it is a fraction but lies outside
// [0, 1], or a time, size or count but is negative (or NaN). run_into calls it on every run.
void check_metric_invariants(const Json& metrics);
// Simulates `sc` into `rec` and returns the header that identifies the run in metrics.json.
Json run_into(Scenario& sc, Recorder& rec, const std::function<void(double)>& progress);
// The default results directory of a run: results/<scenario>/seed<seed>-<hash8>.
std::string default_run_dir(const Scenario& sc);
// Looks a dotted path (a.b.c) up in a JSON document; null when absent.
const Json* json_path(const Json& doc, const std::string& dotted);
// Every numeric leaf of a JSON document as (dotted path, value), in document order.
void numeric_leaves(const Json& doc, const std::string& prefix, std::vector<std::pair<std::string, double>>& out);

// One variant of a comparison: a scenario file and overrides.
struct Variant {
  std::string name;
  std::string file;   // path to load
  std::vector<std::string> sets;
  std::string shown;  // the path as the user wrote it (kept in outputs, which must not depend on the checkout's location)
};

// Runs every variant and tabulates the chosen metrics (all numeric leaves if none chosen)
// side by side, with ratios to the first variant. Fills rec's metrics ("compare"), a CSV,
// and a summary table.
void compare_variants(const std::vector<Variant>& variants, std::vector<std::string> metrics, const Registry& reg,
                      Recorder& rec, const std::function<void(double)>& progress);

// Expands `key=v1,v2,...` axes over base overrides into the cartesian product of variants.
std::vector<Variant> expand_variants(const std::vector<std::string>& files, const std::vector<std::string>& base_sets,
                                     const std::vector<std::string>& vary);

}  // namespace sluice
