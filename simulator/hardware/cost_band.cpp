#include "hardware/cost_band.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "config/paths.h"
#include "hardware/cost_model.h"
#include "hardware/tables.h"

namespace sluice {

std::vector<MeasuredStep> read_model_steps(const std::string& path) {
  const costtab::Csv csv = costtab::read_csv(path);
  const int cm = csv.col("model"), ci = csv.col("implementation"), cs = csv.col("step"), cb = csv.col("batch"),
            cc = csv.col("context"), cn = csv.col("new_tokens"), ck = csv.col("slices"), ms = csv.col("ms");
  // context and slices are 0 where they do not apply (Csv::num takes positive numbers only).
  auto count = [&](size_t r, int c) {
    const std::string& t = csv.text(r, c);
    int v = -1;
    const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size() || v < 0)
      throw std::runtime_error(fmt::format("{}:{}: column {} is \"{}\", not a whole number >= 0", path, csv.lines[r], csv.header[static_cast<size_t>(c)], t));
    return v;
  };
  std::vector<MeasuredStep> out;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    MeasuredStep s{csv.text(r, cm), csv.text(r, ci), csv.text(r, cs), static_cast<int>(csv.num(r, cb)), count(r, cc), count(r, ck),
                   static_cast<long>(csv.num(r, cn)), csv.num(r, ms)};
    if (s.kind != "decode" && s.kind != "prefill" && s.kind != "sliced_prefill")
      throw std::runtime_error(fmt::format("{}:{}: step \"{}\" is not decode, prefill or sliced_prefill", path, csv.lines[r], s.kind));
    if (s.kind == "sliced_prefill" && s.slices < 1)
      throw std::runtime_error(fmt::format("{}:{}: a sliced_prefill needs slices >= 1", path, csv.lines[r]));
    out.push_back(std::move(s));
  }
  return out;
}

double predict_step_ns(const CostModel& cm, const MeasuredStep& s) {
  if (s.kind == "decode")
    return cm.iteration_ns(std::vector<SeqWork>(static_cast<size_t>(s.batch), SeqWork{1, s.context, true}));
  if (s.kind == "prefill")
    return cm.iteration_ns(std::vector<SeqWork>(static_cast<size_t>(s.batch), SeqWork{static_cast<int>(s.new_tokens), 0, true}));
  return cm.sliced_prefill(s.batch, s.new_tokens, s.slices).total_ns;
}

namespace cost_band_impl {  // (named: unity builds put several files in one unit)

CostModel step_model(const HardwareSpec& hw, const ModelSpec& m, const std::string& impl, const std::string& tables_dir,
                     std::optional<std::array<double, 2>> glue) {
  CostOptions o{1, 1, tables_dir};
  o.implementation = implementation_from_name(impl);
  o.glue_kernels = glue;
  return CostModel(hw, m, o);
}

double token_rows(const MeasuredStep& s) {
  return s.kind == "decode" ? s.batch : static_cast<double>(s.batch) * (static_cast<double>(s.new_tokens) / std::max(1, s.slices));
}

// The central `coverage` interval of the ratios, its ends rounded outward to order statistics
// (so at least `coverage` of the ratios lie inside it, never a point's share fewer).
std::pair<double, double> central(std::vector<double> r, double coverage) {
  if (r.empty()) throw std::runtime_error("no ratios to take a band from");
  std::sort(r.begin(), r.end());
  const double last = static_cast<double>(r.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor((1 - coverage) / 2 * last)), hi = static_cast<size_t>(std::ceil((1 + coverage) / 2 * last));
  return {r[lo], r[std::min(hi, r.size() - 1)]};
}

bool pytorch_profile(const std::string& impl) { return impl == "pytorch-lean" || impl == "pytorch-naive"; }

// measured / predicted of every step, each model's steps with glue fitted on the others alone
// (roofline: no tables, the shipped glue counts; nothing is fitted).
std::vector<std::vector<double>> step_ratios(const std::vector<MeasuredStep>& steps, const HardwareSpec& hw,
                                             const std::string& tables_dir, bool roofline, std::string& note) {
  std::vector<std::string> models;
  for (const auto& s : steps)
    if (std::find(models.begin(), models.end(), s.model) == models.end()) models.push_back(s.model);
  std::vector<std::vector<double>> ratios;  // one list per model
  for (const std::string& model : models) {
    ratios.emplace_back();
    const ModelSpec m = load_model(model);
    std::optional<std::array<double, 2>> glue;
    if (!roofline && models.size() > 1) {
      std::vector<MeasuredStep> others;
      for (const auto& s : steps)
        if (s.model != model) others.push_back(s);
      // Fitted on each other model alone, the counts averaged (with two models: the other's).
      std::array<double, 2> g{0, 0};
      int fitted = 0;
      try {
        for (const std::string& other : models)
          if (other != model) {
            const auto f = fit_glue_kernels(others, other, hw, tables_dir);
            g[0] += f[0], g[1] += f[1], ++fitted;
          }
        glue = std::array<double, 2>{g[0] / fitted, g[1] / fitted};
      } catch (const std::runtime_error& e) {
        // (a device without a launch floor, steps of one kind only): the shipped counts, said so
        note = fmt::format("; not left out: {}, so the shipped glue counts are used", e.what());
      }
    }
    std::map<std::string, CostModel> by_impl;
    for (const auto& s : steps) {
      if (s.model != model) continue;
      auto it = by_impl.find(s.implementation);
      if (it == by_impl.end())
        it = by_impl.emplace(s.implementation, step_model(hw, m, s.implementation, roofline ? "" : tables_dir,
                                                          pytorch_profile(s.implementation) ? glue : std::nullopt)).first;
      ratios.back().push_back(s.ms * 1e6 / predict_step_ns(it->second, s));
    }
  }
  return ratios;
}

// measured / predicted of each gemm.csv row predicted from the nearest other shape (by weight
// size, K x N, on a log scale) measured at the same rows, moved by the ratio of the rooflines.
std::vector<double> shape_ratios(const std::string& gemm_csv, const HardwareSpec& hw) {
  const costtab::Csv csv = costtab::read_csv(gemm_csv);
  const int co = csv.col("op"), cm = csv.col("M"), ck = csv.col("K"), cn = csv.col("N"), cms = csv.col("ms");
  const costtab::Ceilings c{hw.effective_flops(), hw.effective_bandwidth_Bps()};
  const double floor = hw.kernel_launch_ns;
  struct Row {
    std::string op;
    double M, K, N, ns;
  };
  std::vector<Row> rows;
  for (size_t r = 0; r < csv.rows.size(); ++r)
    rows.push_back({csv.text(r, co), csv.num(r, cm), csv.num(r, ck), csv.num(r, cn), csv.num(r, cms) * 1e6});
  auto roof = [&](const Row& r) { return costtab::roof_ns(2 * r.M * r.K * r.N, 2 * (r.M * r.K + r.K * r.N + r.M * r.N), c); };
  std::vector<double> ratios;
  for (const Row& r : rows) {
    const Row* best = nullptr;
    double dist = 0;
    for (const Row& o : rows) {
      if (o.op == r.op || o.M != r.M || (o.K == r.K && o.N == r.N)) continue;
      const double d = std::fabs(std::log((o.K * o.N) / (r.K * r.N)));
      if (!best || d < dist) best = &o, dist = d;
    }
    // As derived tables move a time: the launch floor kept, the rest by the ratio of rooflines.
    if (best) ratios.push_back(r.ns / (floor + std::max(0.0, best->ns - floor) * roof(r) / roof(*best)));
  }
  return ratios;
}

std::string reference_tables_dir() {
  static const std::string dir = default_tables_dir(load_hardware("h200"));
  return dir;
}

CostBand measured_band(const std::string& tables_dir, const HardwareSpec& tables_hw, bool roofline, double coverage) {
  std::string dir = tables_dir, note;
  const HardwareSpec* hw = &tables_hw;
  static const HardwareSpec h200 = load_hardware("h200");
  if (dir.empty() || !std::filesystem::exists(std::filesystem::path(dir) / "model_steps.csv")) {
    if (!dir.empty())
      note = fmt::format(" ({} holds no model_steps.csv: the reference folder's steps are used)", relative_to_root(dir));
    dir = reference_tables_dir();
    hw = &h200;
  }
  const auto steps = read_model_steps(dir + "/model_steps.csv");
  std::string fit_note;
  // Each model's own central interval, and the band their union: a model not measured may err
  // as either did (from one model's interval alone, 52% and 85% of the other's steps fall inside).
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& r : step_ratios(steps, *hw, dir, roofline, fit_note)) {
    const auto [l, h] = central(r, coverage);
    lo = std::min(lo, l), hi = std::max(hi, h);
  }
  CostBand b;
  b.source = roofline ? "roofline" : "measured";
  b.lo = lo, b.hi = hi, b.points = static_cast<int>(steps.size());
  b.coverage = coverage;
  b.basis = roofline ? fmt::format("the roofline alone against {} whole steps measured in {}{}", steps.size(), relative_to_root(dir), note)
                     : fmt::format("{} whole steps measured in {}, each model's predicted with glue kernels fitted on the other "
                                   "(leave one model out){}{}", steps.size(), relative_to_root(dir), note, fit_note);
  return b;
}

CostBand compute_band(const CostSource& src, const HardwareSpec& hw) {
  if (src.roofline()) return measured_band("", HardwareSpec{}, true, kBandCoverage);
  // Measured tables are the device's own: its steps were timed on it (its launch floor fits the
  // glue); derived ones were measured on the tables device.
  const HardwareSpec& tables_hw = src.derived() ? *src.tables_device : hw;
  const double part = src.derived() ? std::sqrt(kBandCoverage) : kBandCoverage;
  CostBand m = measured_band(src.tables_dir, tables_hw, false, part);
  if (!src.derived()) return m;
  const std::string gemm = src.tables_dir + "/gemm.csv";
  if (!std::filesystem::exists(gemm)) throw std::runtime_error(fmt::format("derived tables in {} hold no gemm.csv", src.tables_dir));
  const auto shape = shape_ratios(gemm, tables_hw);
  const auto [slo, shi] = central(shape, part);
  CostBand d;
  d.source = "derived";
  d.lo = m.lo * std::min(1.0, slo), d.hi = m.hi * std::max(1.0, shi);
  d.points = m.points + static_cast<int>(shape.size());
  d.basis = fmt::format("the measured steps' band ({:.3f}..{:.3f}) times the ratio-of-rooflines rule's error ({:.3f}..{:.3f}) over "
                        "{} GEMM rows of {}, each predicted from the nearest other shape on the same device (no second device "
                        "is measured: a proxy for moving tables across devices); each at {:.0f}%, together {:.0f}% if independent",
                        m.lo, m.hi, slo, shi, shape.size(), relative_to_root(gemm), 100 * part, 100 * kBandCoverage);
  return d;
}

std::mutex g_band_mutex;
std::map<std::string, CostBand>& band_cache() {
  static std::map<std::string, CostBand> cache;
  return cache;
}

thread_local CostBandScope* t_scope = nullptr;

}  // namespace cost_band_impl


std::array<double, 2> fit_glue_kernels(const std::vector<MeasuredStep>& steps, const std::string& model, const HardwareSpec& hw,
                                       const std::string& tables_dir) {
  const ModelSpec m = load_model(model);
  const double floor_ns = hw.kernel_launch_ns;
  double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0;
  std::map<std::string, CostModel> bare;
  for (const MeasuredStep& s : steps) {
    if (s.model != model || !cost_band_impl::pytorch_profile(s.implementation)) continue;
    auto it = bare.find(s.implementation);
    if (it == bare.end()) it = bare.emplace(s.implementation, cost_band_impl::step_model(hw, m, s.implementation, tables_dir, std::array<double, 2>{0, 0})).first;
    const double meas = s.ms * 1e6, w = 1 / meas;
    const double x1 = static_cast<double>(m.layers) * std::max(1, s.slices) * floor_ns * w;
    const double x2 = cost_band_impl::token_rows(s) > 1 ? x1 : 0;
    const double y = (meas - predict_step_ns(it->second, s)) * w;
    a11 += x1 * x1, a12 += x1 * x2, a22 += x2 * x2, b1 += x1 * y, b2 += x2 * y;
  }
  const double det = a11 * a22 - a12 * a12;
  if (!(det > 0))
    throw std::runtime_error(fmt::format("the steps of {} cannot fit the glue kernels (they need steps of one row and of "
                                         "several, on a device with a kernel launch floor)", model));
  return {(b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det};
}

CostBand cost_band(const CostSource& src, const HardwareSpec& hw) {
  const std::string key = fmt::format("{}|{}|{}|{}|{}", src.kind(), src.tables_dir, src.derived() ? src.tables_device->name : "",
                                      src.roofline() || src.derived() ? "" : hw.name, hw.kernel_launch_ns);
  {
    std::lock_guard<std::mutex> lock(cost_band_impl::g_band_mutex);
    if (auto it = cost_band_impl::band_cache().find(key); it != cost_band_impl::band_cache().end()) return it->second;
  }
  CostBand b = cost_band_impl::compute_band(src, hw);  // (outside the lock: it builds cost models, which never ask for a band)
  std::lock_guard<std::mutex> lock(cost_band_impl::g_band_mutex);
  return cost_band_impl::band_cache().emplace(key, std::move(b)).first->second;
}

CostBandScope::CostBandScope(BandEnd end) : end_(end), outer_(cost_band_impl::t_scope) { cost_band_impl::t_scope = this; }
CostBandScope::~CostBandScope() { cost_band_impl::t_scope = outer_; }

double band_time_scale(const CostSource& src, const HardwareSpec& hw) {
  CostBandScope* s = cost_band_impl::t_scope;
  if (!s || s->end_ == BandEnd::Nominal) return 1;
  const CostBand b = cost_band(src, hw);
  if (std::none_of(s->applied_.begin(), s->applied_.end(),
                   [&](const CostBand& a) { return a.source == b.source && a.basis == b.basis; }))
    s->applied_.push_back(b);
  return b.at(s->end_ == BandEnd::High);
}

}  // namespace sluice
