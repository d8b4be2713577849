#include "recorder/availability_report.h"

#include <fmt/format.h>

namespace sluice {

void report_availability(const net::AvailabilityResults& r, Recorder& rec) {
  Json rows = Json::array();
  std::string csv = "availability,chips,cubes,shape,ocs,formable_mean,formable_ci95,goodput_mean,goodput_ci95,formula\n";
  for (const net::AvailabilityRow& row : r.rows) {
    Json j = {{"availability", row.availability}, {"chips", row.chips}, {"cubes", row.cubes}, {"shape", row.shape}, {"ocs", row.ocs},
              {"formable_mean", row.formable_mean}, {"formable_ci95", row.formable_ci95},
              {"goodput_mean", row.goodput_mean}, {"goodput_ci95", row.goodput_ci95},
              {"lost_fraction", row.lost_fraction}, {"restart_fraction", row.restart_fraction},
              {"checkpoint_fraction", row.checkpoint_fraction}, {"waiting_fraction", row.waiting_fraction},
              {"interruptions", row.interruptions}};
    if (row.formula) j["formula"] = *row.formula;
    rows.push_back(j);
    csv += fmt::format("{},{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{}\n", row.availability, row.chips, row.cubes, row.shape,
                       row.ocs ? "true" : "false", row.formable_mean, row.formable_ci95, row.goodput_mean, row.goodput_ci95,
                       row.formula ? fmt::format("{:.6f}", *row.formula) : std::string());
  }

  rec.summary(fmt::format("{} seeds x {:.0f} days; repair {} (MTTR {:.4g} h); lifetime {}, MTBF = A/(1-A) MTTR; checkpoint every {:.4g} s "
                          "(+{:.4g} s to write), restart {:.4g} s",
                          r.seeds, static_cast<double>(r.horizon_ns) * 1e-9 / 86400, r.repair, r.mttr_s / 3600, r.lifetime,
                          r.checkpoint_interval_s, r.checkpoint_cost_s, r.restart_s));
  for (const auto& l : r.levels)
    rec.summary(fmt::format("host A {:.1f}%: MTBF {:.4g} h, cube healthy A^{} = {:.4f} (measured {:.4f}), {:.0f} host failures per run",
                            l.availability * 100, l.mtbf_s / 3600, r.hosts_per_cube, l.cube_healthy_probability, l.healthy_cube_fraction,
                            l.host_failures));
  rec.summary(fmt::format("{:>6} {:>5} {:>9} | {:>21} {:>8} {:>17} | {:>21} {:>17}", "host A", "chips", "shape", "OCS formable ±95%",
                          "formula", "OCS goodput", "static formable", "static goodput"));
  // Rows come OCS then static for each (availability, slice): one line per pair.
  for (size_t i = 0; i + 1 < r.rows.size(); i += 2) {
    const auto& o = r.rows[i];
    const auto& s = r.rows[i + 1];
    rec.summary(fmt::format("{:>5.1f}% {:>5} {:>9} | {:>12.4f} ±{:<7.4f} {:>8.4f} {:>8.4f} ±{:<7.4f} | {:>12.4f} ±{:<7.4f} {:>8.4f} ±{:<7.4f}",
                            o.availability * 100, o.chips, o.shape, o.formable_mean, o.formable_ci95, o.formula.value_or(0), o.goodput_mean,
                            o.goodput_ci95, s.formable_mean, s.formable_ci95, s.goodput_mean, s.goodput_ci95));
  }

  Json levels = Json::array();
  for (const auto& l : r.levels)
    levels.push_back({{"availability", l.availability}, {"mtbf_h", l.mtbf_s / 3600}, {"cube_healthy_probability", l.cube_healthy_probability},
                      {"healthy_cube_fraction", l.healthy_cube_fraction}, {"host_failures_per_run", l.host_failures}});
  auto& m = rec.metrics();
  const auto& g = r.cubes;
  const int n = g[0] * g[1] * g[2];
  m["pod"] = {{"cubes", g}, {"chips", n * r.chips_per_cube}, {"hosts", n * r.hosts_per_cube}, {"hosts_per_cube", r.hosts_per_cube}};
  m["failures"] = {{"repair", r.repair}, {"mttr_h", r.mttr_s / 3600}, {"lifetime", r.lifetime}};
  m["horizon_days"] = static_cast<double>(r.horizon_ns) * 1e-9 / 86400;
  m["warmup_days"] = static_cast<double>(r.warmup_ns) * 1e-9 / 86400;
  m["seeds"] = r.seeds;
  m["job"] = {{"checkpoint_interval_s", r.checkpoint_interval_s}, {"checkpoint_cost_s", r.checkpoint_cost_s}, {"restart_s", r.restart_s}};
  m["levels"] = levels;
  m["rows"] = rows;
  rec.file("availability.csv", csv);
}

}  // namespace sluice
