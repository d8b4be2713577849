// The cost model's known error, stated per cost source, and the scope a scenario is built in
// to run it at one end of that error (run/bands.h propagates it through a whole run).
//
// A band is a range of ratios measured / predicted: the true time of a step lies between
// lo x and hi x sluice's prediction with the stated coverage (0.9). Each source's band is
// computed from the reference measurements it rests on, when first asked (then cached):
//
//   measured   the whole decoder steps of model_steps.csv in the tables' folder (two models,
//              two PyTorch profiles), each predicted with the glue kernels fitted on the other
//              model alone (leave one model out); the band is the union of each model's central
//              `coverage` interval of those ratios (ends rounded outward to measured ratios). A folder without model_steps.csv takes the catalog reference
//              folder's (results/calibration/h200-torch), and says so.
//   derived    the measured band, widened at both ends by the central interval of the
//              ratio-of-rooflines rule's own error, measured by leaving each GEMM shape of
//              gemm.csv out and predicting it from the nearest other shape at the same rows.
//              That is the rule derived tables move a time by, but tested across shapes on
//              one device: no second device is measured here, so its error across devices is a
//              proxy. Each interval is taken at sqrt(coverage) and the two multiplied, so that
//              both hold together at `coverage` if they are independent.
//   roofline   the same whole steps predicted by the roofline alone (no tables): the union of
//              each model's central interval (asymmetric: the roofline is fast).
//
// Collectives and the network are not in these bands: they are the fabric's, not the kernels'.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "hardware/cost_source.h"

namespace sluice {

class CostModel;

inline constexpr double kBandCoverage = 0.9;

struct CostBand {
  std::string source;  // "measured", "derived" or "roofline"
  double lo = 1, hi = 1;  // measured / predicted, at `coverage`
  double coverage = kBandCoverage;
  int points = 0;      // the measurements it rests on
  std::string basis;   // one sentence: what it was measured on
  double at(bool high) const { return high ? hi : lo; }
};

// One whole step of a model_steps.csv: a decoder's step timed under CUDA-graph replay.
struct MeasuredStep {
  std::string model, implementation, kind;  // kind: decode, prefill, sliced_prefill
  int batch = 1, context = 0, slices = 0;
  long new_tokens = 1;
  double ms = 0;
};
// Reads a model_steps.csv (columns model, implementation, step, batch, context, new_tokens,
// slices, ms). Throws costtab::TableError naming the file and line on a bad row.
std::vector<MeasuredStep> read_model_steps(const std::string& path);
// The cost model's time of one such step, in ns (decode: `batch` sequences of one token after
// `context`; prefill: `batch` prompts of new_tokens; sliced_prefill: CostModel::sliced_prefill).
double predict_step_ns(const CostModel& cm, const MeasuredStep& s);
// The two per-layer glue-kernel counts (CostOptions::glue_kernels) fitted to `model`'s steps
// alone, both PyTorch profiles (weighted least squares on relative error), on `hw` with the
// tables in `tables_dir`. Throws std::runtime_error when the steps cannot determine them.
std::array<double, 2> fit_glue_kernels(const std::vector<MeasuredStep>& steps, const std::string& model, const HardwareSpec& hw,
                                       const std::string& tables_dir);

// The band of a resolved cost source for device `hw` (computed once per source, folder and
// device, thread-safe). Measured tables are fitted and predicted on `hw` (its launch floor);
// derived ones on the device they were measured on.
CostBand cost_band(const CostSource& src, const HardwareSpec& hw);

// Which end of the bands a scenario is built at. Each workload, where it resolves its cost
// source, takes band_time_scale() as its CostOptions::time_scale: every kernel time times the
// band's lo or hi while a scope of that end is alive on this thread (scenarios are built and
// run on one thread, so parallel sweeps and band runs do not mix).
enum class BandEnd : uint8_t { Nominal, Low, High };
class CostBandScope {
 public:
  explicit CostBandScope(BandEnd end);
  ~CostBandScope();
  CostBandScope(const CostBandScope&) = delete;
  CostBandScope& operator=(const CostBandScope&) = delete;
  // The bands applied while this scope was alive, one per distinct source, in the order met.
  const std::vector<CostBand>& applied() const { return applied_; }

 private:
  friend double band_time_scale(const CostSource& src, const HardwareSpec& hw);
  BandEnd end_;
  std::vector<CostBand> applied_;
  CostBandScope* outer_;
};
// The time scale of a workload's kernels on `hw` from `src`: 1 outside a scope, else the band's
// lo or hi (noted in the scope's applied()).
double band_time_scale(const CostSource& src, const HardwareSpec& hw);

}  // namespace sluice
