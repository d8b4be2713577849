#include "recorder/pod_report.h"

#include <cmath>

#include <fmt/format.h>

namespace sluice {

namespace {

double pick(const Json& q, const char* k) { return q.contains(k) ? q[k].get<double>() : 0.0; }

Json hours_summary(const std::vector<double>& seconds) {
  std::vector<double> hours;
  hours.reserve(seconds.size());
  for (double d : seconds) hours.push_back(d / 3600.0);
  return summarize(hours);
}

}  // namespace

void report_pod_scheduling(const cluster::PodResults& results, Recorder& rec) {
  Json rows = Json::array();
  std::string csv = "variant,utilization,healthy_fraction,fragmentation,stranded_fraction,queue_p50_h,queue_p90_h,queue_p99_h,jobs,started,completed,never_ran,rejected,interruptions";
  for (const auto& n : results.probe_names) csv += ",avail_" + n;
  csv += "\n";
  std::string ccsv =
      "variant,class,iteration_s,iteration_s_min,iteration_s_max,iterations_per_s,tokens_per_s,mfu,jobs,started,completed,"
      "iterations_completed,lost_iterations,lost_slice_h,interruptions,queue_p50_h,queue_p99_h\n";
  for (const cluster::PodVariantResult& r : results.variants) {
    const std::string name = fmt::format("{}/{}", r.ocs ? "ocs" : "static", r.placement);
    Json q = hours_summary(r.queue_delay_s);
    Json avail = Json::object();
    for (size_t k = 0; k < results.probe_names.size(); ++k) avail[results.probe_names[k]] = r.probe_availability[k];
    Json classes = Json::array();
    std::vector<std::string> class_lines;
    for (const auto& c : r.classes) {
      Json cq = hours_summary(c.queue_delay_s);
      Json j = {{"class", c.name}, {"training", c.training}, {"jobs", c.jobs}, {"started", c.started}, {"completed", c.completed},
                {"interruptions", c.interruptions}, {"queue_delay_h", cq}};
      const double ips = c.iteration_s > 0 ? 1.0 / c.iteration_s : 0.0;
      if (c.training) {
        j["iteration_s"] = c.iteration_s;
        j["iteration_s_min"] = c.iteration_s_min;
        j["iteration_s_max"] = c.iteration_s_max;
        j["iterations_per_s"] = ips;
        j["tokens_per_s"] = c.tokens_per_iteration * ips;
        j["mfu"] = c.mfu;
        j["iterations_completed"] = c.iterations_done;
        j["lost_iterations"] = c.lost_iterations;
      }
      j["lost_slice_h"] = c.lost_slice_h;
      classes.push_back(j);
      ccsv += fmt::format("{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.4f},{},{},{},{},{:.1f},{:.3f},{},{:.3f},{:.3f}\n", name, c.name,
                          c.iteration_s, c.iteration_s_min, c.iteration_s_max, ips, c.tokens_per_iteration * ips, c.mfu, c.jobs,
                          c.started, c.completed, c.iterations_done, c.lost_iterations, c.lost_slice_h, c.interruptions,
                          pick(cq, "p50"), pick(cq, "p99"));
      if (c.training)
        class_lines.push_back(fmt::format(
            "  {:<22} iter {:.3f} s ({:.3f}-{:.3f})  {:.3f} it/s  {:.3g} tok/s  MFU {:.3f}  done {}/{}  {} it  lost {:.0f} it  queue p99 {:.2f} h",
            c.name, c.iteration_s, c.iteration_s_min, c.iteration_s_max, ips, c.tokens_per_iteration * ips, c.mfu, c.completed, c.jobs,
            c.iterations_done, c.lost_iterations, pick(cq, "p99")));
      else
        class_lines.push_back(fmt::format("  {:<22} done {}/{}  lost {:.1f} slice-h  queue p99 {:.2f} h", c.name, c.completed, c.jobs,
                                          c.lost_slice_h, pick(cq, "p99")));
    }
    rows.push_back({{"variant", name}, {"ocs", r.ocs}, {"placement", r.placement},
                    {"utilization", r.utilization}, {"healthy_fraction", r.healthy_fraction},
                    {"fragmentation", r.fragmentation}, {"stranded_fraction", r.stranded_fraction},
                    {"queue_delay_h", q}, {"jobs", r.jobs}, {"started", r.started}, {"completed", r.completed},
                    {"never_ran", r.never_ran}, {"rejected", r.rejected}, {"interruptions", r.interruptions},
                    {"host_failures", r.host_failures}, {"slice_availability", avail}, {"classes", classes}});
    csv += fmt::format("{},{:.4f},{:.4f},{:.4f},{:.4f},{:.3f},{:.3f},{:.3f},{},{},{},{},{},{}", name, r.utilization, r.healthy_fraction,
                       r.fragmentation, r.stranded_fraction, pick(q, "p50"), pick(q, "p90"), pick(q, "p99"), r.jobs, r.started, r.completed,
                       r.never_ran, r.rejected, r.interruptions);
    for (double a : r.probe_availability) csv += fmt::format(",{:.4f}", a);
    csv += "\n";
    std::string av;
    for (size_t k = 0; k < results.probe_names.size(); ++k) av += fmt::format(" {}:{:.3f}", results.probe_names[k], r.probe_availability[k]);
    rec.summary(fmt::format("{:<17} util {:.3f}  queue p50 {:.2f} h p99 {:.2f} h  frag {:.3f}  never ran {}  avail{}", name,
                            r.utilization, pick(q, "p50"), pick(q, "p99"), r.fragmentation, r.never_ran, av));
    for (const auto& l : class_lines) rec.summary(l);
  }
  Json geos = Json::array();
  std::string gcsv = "class,geometry,model,tp,pp,dp,chips,iteration_s,tokens_per_iteration,mfu,memory_GiB\n";
  for (const auto& g : results.geometries) {
    geos.push_back({{"class", g.job_class}, {"geometry", g.geometry}, {"model", g.model}, {"tp", g.tp}, {"pp", g.pp}, {"dp", g.dp},
                    {"chips", g.chips}, {"iteration_s", g.iteration_s}, {"tokens_per_iteration", g.tokens_per_iteration}, {"mfu", g.mfu},
                    {"memory_bytes", g.memory_bytes}});
    gcsv += fmt::format("{},{},{},{},{},{},{},{:.6g},{:.6g},{:.4f},{:.2f}\n", g.job_class, g.geometry, g.model, g.tp, g.pp, g.dp, g.chips,
                        g.iteration_s, g.tokens_per_iteration, g.mfu, g.memory_bytes / 1073741824.0);
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
  if (!results.geometries.empty()) {
    m["hardware"] = results.hardware;
    m["measure_iterations"] = results.measure_iterations;
    m["geometries"] = geos;
    rec.file("geometries.csv", gcsv);
  }
  rec.file("variants.csv", csv);
  rec.file("classes.csv", ccsv);
}

}  // namespace sluice
