// `sluice check`: CI regression mode. A suite lists scenarios and, per metric (glob
// patterns), a tolerance and which direction is a regression; a check runs them, compares
// with stored baselines, tabulates what moved and writes JUnit XML.
#pragma once
#include <string>
#include <vector>

#include "recorder/recorder.h"
#include "registry/registry.h"

namespace sluice {

// Which direction of change is a regression.
enum class Worse { Higher, Lower, Either };

// A tolerance for every metric whose path matches `pattern` ('*' matches any run of characters).
struct Tolerance {
  std::string pattern;
  double relative = 0;  // of |baseline|
  double absolute = 0;
  Worse worse = Worse::Either;
  // Also within the baseline's error band (the scenario's `bands:`, stored by --update): a value
  // inside it is no regression, whatever the tolerance says; outside it, the tolerance decides.
  bool band = false;
};

// A published figure an entry reproduces (a validation suite): the metric that stands for it,
// the published value and the relative tolerance, what was published and where. A known gap
// (with its reason) is reported beside the others but does not fail the check. A note says how
// the entry runs what its source leaves open (a choice, and why), shown after the verdict (and
// after a known gap's reason) on the validation page.
struct Published {
  std::string metric, figure, source, known_gap, note;
  double value = 0, tolerance = 0;
};

// One scenario of a suite: a file (resolved relative to the suite file), overrides, tolerances
// tried before the suite's. An entry with published figures is checked against them, not
// against a stored baseline.
struct CheckEntry {
  std::string name, file, shown;
  std::vector<std::string> sets;
  std::vector<Tolerance> tolerances;
  std::vector<Published> published;
};

struct Suite {
  std::string file, name, description;
  std::string baselines;  // directory of <entry>.json files
  // `bands: N`: entries with published figures are also run at both ends of their cost model's
  // error band and at N other seeds, and each figure is reported against sluice's 90% band.
  int published_bands = -1;
  std::vector<Tolerance> tolerances;
  std::vector<CheckEntry> entries;
};

// Loads and validates a suite file; errors name file:line:col. Every scenario is validated too.
Suite load_suite(const std::string& file, const Registry& reg, const std::vector<std::string>& extra_sets = {});

// The verdict on one metric.
struct MetricCheck {
  std::string entry, metric, verdict;  // verdict: ok, improved, regression, missing, new
  double baseline = 0, now = 0;
  std::string tolerance;               // "5% or 0.1, higher is worse"
  // A metric the tolerances check that the baseline lacks ("new") fails too: a trimmed or
  // stale baseline would otherwise check less than it seems to (re-baseline with --update).
  bool failed() const { return verdict == "regression" || verdict == "missing" || verdict == "new"; }
};

// The verdict on one published figure: pass, FAIL, known gap, or missing (the run has no such metric).
struct ValidationCheck {
  std::string entry;
  Published figure;
  double now = 0, error = 0;  // error: (now - published) / published
  std::string verdict;
  bool banded = false;             // sluice's 90% band of the metric is known (the suite's `bands:`)
  double band_lo = 0, band_hi = 0;
  bool inside_band() const { return banded && figure.value >= band_lo && figure.value <= band_hi; }
  bool failed() const { return verdict == "FAIL" || verdict == "missing"; }
};

struct CheckReport {
  std::vector<ValidationCheck> validation;  // every published figure, in entry order
  std::vector<MetricCheck> checks;   // every checked metric, in entry then metric order
  std::vector<std::string> notes;    // per entry: baseline missing, scenario changed since baseline ...
  std::vector<std::string> failed_entries;  // entries without a baseline
  std::vector<double> entry_seconds;
  double seconds = 0;
  int regressions() const;
  std::string table() const;        // what moved, readable
  std::string junit(const Suite& s) const;
  // The validation table as Markdown (figure, source, published, sluice, error, tolerance,
  // verdict), deterministic: no timings, so a generated page can be held current by a test.
  std::string validation_markdown(const Suite& s) const;
};

// Runs every entry (on `threads` threads) and compares with the baselines; with `update`,
// writes the baselines instead (atomically, one file per entry) and reports nothing failed.
CheckReport run_check(const Suite& suite, const Registry& reg, int threads, bool update);

// Does `path` match the glob `pattern` ('*' any run of characters)?
bool glob_match(const std::string& pattern, const std::string& path);

}  // namespace sluice
