#include "run/bands.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "hardware/cost_band.h"
#include "recorder/glossary.h"
#include "run/runner.h"
#include "run/scenario.h"

namespace sluice {

namespace bands_impl {  // (named: unity builds put several files in one unit)

struct Leaf {
  std::string path;     // concrete: a.b.0.c
  std::string generic;  // as the glossary spells it: a.b[].c
  double value;
};

void walk(const Json& d, const std::string& path, const std::string& generic, std::vector<Leaf>& out) {
  if (d.is_number()) {
    out.push_back({path, generic, d.get<double>()});
  } else if (d.is_object()) {
    for (auto it = d.begin(); it != d.end(); ++it)
      walk(it.value(), path.empty() ? it.key() : path + "." + it.key(), generic.empty() ? it.key() : generic + "." + it.key(), out);
  } else if (d.is_array() && d.size() <= 64) {
    for (size_t i = 0; i < d.size(); ++i) walk(d[i], fmt::format("{}.{}", path, i), generic + "[]", out);
  }
}

std::string generic_of(const std::string& path) {
  std::string g;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!key.empty() && key.find_first_not_of("0123456789") == std::string::npos) g += "[]";
    else g += (g.empty() ? "" : ".") + key;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return g;
}

const char* unit_of(const std::string& generic) {
  const MetricDef* d = find_metric(generic);
  return d ? d->unit : "";
}

bool banded_generic(const std::string& generic) {
  if (generic.ends_with(".count")) return false;  // a summary's count, whatever its figures' unit
  const std::string u = unit_of(generic);
  if (u == "ms" || u == "s" || u == "ns" || u == "tokens/s" || u == "req/s" || u == "images/s") return true;
  const auto last = generic.substr(generic.rfind('.') == std::string::npos ? 0 : generic.rfind('.') + 1);
  return last == "mfu";
}

// A compare study's table cell (compare.table.K.values.I) is banded as the metric its row names.
bool banded_leaf(const Leaf& x, const Json& nominal) {
  if (x.generic == "compare.table[].values[]") {
    const size_t k = std::stoul(x.path.substr(14, x.path.find('.', 14) - 14));
    const Json* row = json_path(nominal, fmt::format("compare.table.{}.metric", k));
    return row && row->is_string() && banded_generic(generic_of(row->get<std::string>()));
  }
  return banded_generic(x.generic);
}

// A latency percentile or mean (not a max, a min or a spread: one request's luck, not the regime).
bool latency_like(const std::string& path) {
  const std::string last = path.substr(path.rfind('.') + 1);
  if (last != "p50" && last != "p90" && last != "p95" && last != "p99" && last != "mean") return false;
  for (const char* k : {"ttft", "tpot", "e2e", "queueing_delay"})
    if (path.find(k) != std::string::npos) return true;
  return false;
}

// Two-sided 90% Student t quantile (0.95) for `df` degrees of freedom.
double t90(int df) {
  static constexpr double t[] = {6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
                                 1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
                                 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697};
  if (df < 1) return 0;
  if (df <= 30) return t[df - 1];
  return 1.645 + 1.6 / df;
}

// One re-run of the scenario: its `metrics` object, and the bands applied (at a cost end).
struct Rerun {
  Json metrics;
  std::vector<CostBand> applied;
};

Rerun rerun(const BandRequest& req, BandEnd end, uint64_t seed, const Registry& reg) {
  std::vector<std::string> sets = req.sets;
  sets.push_back(fmt::format("seed={}", seed));
  CostBandScope scope(end);
  Scenario sc = load_scenario(req.file, sets, reg);
  Recorder rec;
  run_into(sc, rec, {});
  return Rerun{std::move(rec.metrics()), scope.applied()};
}

std::string fmt_num(double v) {
  const double a = std::fabs(v);
  if (a >= 1000) return fmt::format("{:.0f}", v);
  if (a >= 100) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
}

}  // namespace bands_impl

bool banded_metric(const std::string& path) { return bands_impl::banded_generic(bands_impl::generic_of(path)); }

Json error_bands(const BandRequest& req, const Json& nominal, const Registry& reg, std::vector<std::string>& warnings) {
  using namespace bands_impl;
  const int jobs = 2 + req.replications;
  std::vector<Rerun> runs(static_cast<size_t>(jobs));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(jobs));
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int i; (i = next.fetch_add(1)) < jobs;) {
      try {
        const BandEnd end = i == 0 ? BandEnd::Low : i == 1 ? BandEnd::High : BandEnd::Nominal;
        runs[static_cast<size_t>(i)] = rerun(req, end, i < 2 ? req.seed : req.seed + static_cast<uint64_t>(i - 1), reg);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    }
  };
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int nt = std::max(1, std::min(jobs, req.threads > 0 ? req.threads : hw));
  std::vector<std::thread> pool;
  for (int t = 1; t < nt; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);

  std::vector<Leaf> leaves;
  walk(nominal, "", "", leaves);
  std::vector<std::map<std::string, double>> values(runs.size());
  for (size_t r = 0; r < runs.size(); ++r) {
    std::vector<Leaf> l;
    walk(runs[r].metrics, "", "", l);
    for (auto& x : l) values[r].emplace(std::move(x.path), x.value);
  }
  // The widest band applied sets the elasticity's denominator.
  double span = 0;
  Json sources = Json::array();
  for (const CostBand& b : runs[0].applied) {
    span = std::max(span, std::log(b.hi / b.lo));
    sources.push_back(Json{{"source", b.source}, {"lo", b.lo}, {"hi", b.hi}, {"coverage", b.coverage}, {"points", b.points}, {"basis", b.basis}});
  }
  Json entries = Json::array();
  std::string worst;
  double worst_e = 0, worst_lo = 0, worst_hi = 0;
  for (const Leaf& x : leaves) {
    if (!banded_leaf(x, nominal) || !std::isfinite(x.value)) continue;
    const double v = x.value;
    // The cost part: the figure at the two ends (the nominal value need not lie between them: the
    // roofline's band lies wholly above 1).
    double at_lo = v, at_hi = v;
    auto got = [&](size_t r) -> const double* {
      auto it = values[r].find(x.path);
      return it != values[r].end() && std::isfinite(it->second) ? &it->second : nullptr;
    };
    const double* a = got(0);
    const double* b = got(1);
    if (!a || !b) continue;  // a figure one end does not report has no band (never half of one)
    at_lo = *a, at_hi = *b;
    const double clo = std::min(at_lo, at_hi), chi = std::max(at_lo, at_hi);
    std::vector<double> s{v};
    for (size_t r = 2; r < runs.size(); ++r)
      if (const double* y = got(r)) s.push_back(*y);
    double h = 0;
    if (s.size() >= 2) {
      double mean = 0, ss = 0;
      for (double y : s) mean += y;
      mean /= static_cast<double>(s.size());
      for (double y : s) ss += (y - mean) * (y - mean);
      const double sd = std::sqrt(ss / static_cast<double>(s.size() - 1));
      h = t90(static_cast<int>(s.size()) - 1) * sd * std::sqrt(1 + 1.0 / static_cast<double>(s.size()));
    }
    // Combined: the cost interval's half-width and the seeds' added in quadrature about its centre.
    const double centre = (clo + chi) / 2, half = std::hypot((chi - clo) / 2, h);
    double lo = std::max(0.0, centre - half), hi = centre + half;
    if (x.generic.ends_with("mfu")) hi = std::min(hi, 1.0);
    entries.push_back(Json{{"metric", x.path}, {"value", v}, {"lo", lo}, {"hi", hi}, {"cost_lo", clo}, {"cost_hi", chi},
                           {"seed_lo", std::max(0.0, v - h)}, {"seed_hi", v + h}});
    if (span > 0 && latency_like(x.path) && at_lo > 0 && at_hi > 0 && v > 0) {
      const double e = std::log(at_hi / at_lo) / span;
      if (e > worst_e) worst_e = e, worst = x.path, worst_lo = at_lo, worst_hi = at_hi;
    }
  }
  Json seeds = Json::array();
  for (int k = 1; k <= req.replications; ++k) seeds.push_back(req.seed + static_cast<uint64_t>(k));
  Json out{{"coverage", kBandCoverage}, {"replications", req.replications}, {"seeds", seeds}, {"cost_sources", sources},
           {"metrics", entries}};
  if (!worst.empty()) {
    out["most_sensitive"] = Json{{"metric", worst}, {"elasticity", worst_e}};
    if (worst_e > kSensitiveElasticity)
      warnings.push_back(fmt::format(
          "near saturation: {} moves {:.1f}x as fast as the step costs ({} at the cost band's low end, {} at its high end); "
          "queueing makes latency most sensitive to the cost model here, so its error band is wide, and a small error in step "
          "times is a large one in this figure",
          worst, worst_e, fmt_num(worst_lo), fmt_num(worst_hi)));
  }
  return out;
}

const Json* find_band(const Json& bands, const std::string& metric) {
  const auto m = bands.find("metrics");
  if (m == bands.end() || !m->is_array()) return nullptr;
  for (const Json& e : *m)
    if (e.value("metric", "") == metric) return &e;
  return nullptr;
}

std::vector<std::string> band_summary_lines(const Json& bands) {
  using namespace bands_impl;
  static const char* const kMain[] = {"latency_ms.ttft.p50", "latency_ms.ttft.p99", "latency_ms.tpot.p50", "latency_ms.tpot.p99",
                                      "latency_ms.e2e.p99", "throughput.output_tokens_per_s", "throughput.requests_per_s",
                                      "iteration_s_mean", "tokens_per_s", "latency_s.p50", "latency_s.max", "mfu"};
  std::vector<std::string> out;
  std::string src;
  for (const Json& s : bands.value("cost_sources", Json::array()))
    src += fmt::format("{}{} {:.3f}-{:.3f}", src.empty() ? "" : ", ", s.value("source", ""), s.value("lo", 1.0), s.value("hi", 1.0));
  out.push_back(fmt::format("error bands ({:.0f}%): step costs x {} (the cost model's measured error), {} other seeds",
                            100 * bands.value("coverage", kBandCoverage), src.empty() ? "none" : src, bands.value("replications", 0)));
  size_t shown = 0;
  for (const Json& e : bands.value("metrics", Json::array())) {
    const std::string m = e.value("metric", "");
    bool main = false;
    for (const char* k : kMain) main = main || m.ends_with(k);
    if (!main || m.starts_with("world.") || shown >= 12) continue;
    ++shown;
    out.push_back(fmt::format("  {:<42} {:>9} {:<8} [{}, {}]", m, fmt_num(e.value("value", 0.0)), unit_of(generic_of(m)),
                              fmt_num(e.value("lo", 0.0)), fmt_num(e.value("hi", 0.0))));
  }
  if (const auto it = bands.find("most_sensitive"); it != bands.end())
    out.push_back(fmt::format("  most sensitive to step costs: {} (elasticity {:.2f})", it->value("metric", ""), it->value("elasticity", 0.0)));
  return out;
}

}  // namespace sluice
