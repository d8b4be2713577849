#include "recorder/network_report.h"

#include <cmath>

#include <fmt/format.h>

namespace sluice {

void report_pod_scheduling(const net::PodResults& results, Recorder& rec) {
  Json rows = Json::array();
  std::string csv = "variant,utilization,healthy_fraction,fragmentation,stranded_fraction,queue_p50_h,queue_p90_h,queue_p99_h,jobs,started,completed,never_ran,rejected,interruptions";
  for (const auto& n : results.probe_names) csv += ",avail_" + n;
  csv += "\n";
  for (const net::PodVariantResult& r : results.variants) {
    const std::string name = fmt::format("{}/{}", r.ocs ? "ocs" : "static", r.placement);
    std::vector<double> hours;
    for (double d : r.queue_delay_s) hours.push_back(d / 3600.0);
    Json q = summarize(hours);
    Json avail = Json::object();
    for (size_t k = 0; k < results.probe_names.size(); ++k) avail[results.probe_names[k]] = r.probe_availability[k];
    rows.push_back({{"variant", name}, {"ocs", r.ocs}, {"placement", r.placement},
                    {"utilization", r.utilization}, {"healthy_fraction", r.healthy_fraction},
                    {"fragmentation", r.fragmentation}, {"stranded_fraction", r.stranded_fraction},
                    {"queue_delay_h", q}, {"jobs", r.jobs}, {"started", r.started}, {"completed", r.completed},
                    {"never_ran", r.never_ran}, {"rejected", r.rejected}, {"interruptions", r.interruptions},
                    {"host_failures", r.host_failures}, {"slice_availability", avail}});
    auto pq = [&](const char* k) { return q.contains(k) ? q[k].get<double>() : 0.0; };
    csv += fmt::format("{},{:.4f},{:.4f},{:.4f},{:.4f},{:.3f},{:.3f},{:.3f},{},{},{},{},{},{}", name, r.utilization, r.healthy_fraction,
                       r.fragmentation, r.stranded_fraction, pq("p50"), pq("p90"), pq("p99"), r.jobs, r.started, r.completed,
                       r.never_ran, r.rejected, r.interruptions);
    for (double a : r.probe_availability) csv += fmt::format(",{:.4f}", a);
    csv += "\n";
    std::string av;
    for (size_t k = 0; k < results.probe_names.size(); ++k) av += fmt::format(" {}:{:.3f}", results.probe_names[k], r.probe_availability[k]);
    rec.summary(fmt::format("{:<17} util {:.3f}  queue p50 {:.2f} h p99 {:.2f} h  frag {:.3f}  never ran {}  avail{}", name,
                            r.utilization, pq("p50"), pq("p99"), r.fragmentation, r.never_ran, av));
  }
  auto& m = rec.metrics();
  const auto& g = results.cubes;
  m["pod"] = {{"cubes", g}, {"chips", g[0] * g[1] * g[2] * results.chips_per_cube}, {"hosts", g[0] * g[1] * g[2] * results.hosts_per_cube}};
  if (results.host_mtbf_s > 0) {
    const double a = results.host_mtbf_s / (results.host_mtbf_s + results.host_repair_s);
    m["host_availability"] = a;
    m["cube_healthy_probability"] = std::pow(a, results.hosts_per_cube);
  }
  m["jobs"] = results.jobs;
  m["variants"] = rows;
  rec.file("variants.csv", csv);
}

void report_twisted_torus(const net::TwistResults& results, Recorder& rec) {
  Json rows = Json::array();
  std::string csv = "shape,regular_ms,twisted_ms,gain,published_gain,regular_bisection_GBps,twisted_bisection_GBps,bisection_ratio,regular_diameter,twisted_diameter\n";
  for (const net::TwistRow& r : results.rows) {
    const double bisection_ratio = r.twisted_bisection_Bps / r.regular_bisection_Bps;
    Json j = {{"shape", r.shape}, {"regular_ms", r.regular_ms}, {"twisted_ms", r.twisted_ms}, {"gain", r.gain},
              {"regular_bisection_GBps", r.regular_bisection_Bps / 1e9}, {"twisted_bisection_GBps", r.twisted_bisection_Bps / 1e9},
              {"bisection_ratio", bisection_ratio}, {"regular_diameter", r.regular_diameter}, {"twisted_diameter", r.twisted_diameter}};
    if (r.published_gain) {
      j["published_gain"] = *r.published_gain;
      j["gain_vs_published"] = r.gain / *r.published_gain;
    }
    rows.push_back(j);
    csv += fmt::format("{},{:.4f},{:.4f},{:.4f},{},{:.1f},{:.1f},{:.4f},{},{}\n", r.shape, r.regular_ms, r.twisted_ms, r.gain,
                       r.published_gain ? fmt::format("{:.2f}", *r.published_gain) : std::string(""), r.regular_bisection_Bps / 1e9,
                       r.twisted_bisection_Bps / 1e9, bisection_ratio, r.regular_diameter, r.twisted_diameter);
    rec.summary(fmt::format("{:<7} all-to-all regular {:.3f} ms, twisted {:.3f} ms: gain {:.2f}x{}  (bisection x{:.2f}, diameter {} -> {})",
                            r.shape, r.regular_ms, r.twisted_ms, r.gain,
                            r.published_gain ? fmt::format(" (published {:.2f}x)", *r.published_gain) : std::string(),
                            bisection_ratio, r.regular_diameter, r.twisted_diameter));
  }
  auto& m = rec.metrics();
  m["bytes_per_device"] = results.bytes_per_device;
  m["paths_per_pair"] = results.paths_per_pair;
  m["regular_routing"] = results.regular_routing;
  m["flow_quantum_ns"] = results.flow_quantum_ns;
  m["shapes"] = rows;
  rec.file("twisted.csv", csv);
}

}  // namespace sluice
