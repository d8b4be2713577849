#include "recorder/diffusion_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/units.h"

namespace sluice {

void report_diffusion(const diffusion::DiffusionResults& r, const diffusion::DiffusionSetup& c, Recorder& rec, const std::string& scope) {
  auto summary = [&](std::string line) { rec.summary(scope.empty() ? std::move(line) : fmt::format("[{}] {}", scope, line)); };
  const std::string& strategy = c.strategy;
  Json m = Json::object();
  m["job"] = Json{{"model", c.model},
                  {"hardware", c.hardware},
                  {"devices", c.devices},
                  {"strategy", strategy},
                  {"parallel", Json{{"cfg", c.cfg_degree}, {"tensor", c.tensor}, {"ulysses", c.ulysses}, {"ring", c.ring},
                                    {"distrifusion", c.distrifusion}, {"pipefusion", c.pipefusion}, {"patches", c.patches},
                                    {"warmup_steps", c.warmup_steps}}},
                  {"resolution", c.resolution},
                  {"patch_tokens", c.patch_tokens},
                  {"text_tokens", c.text_tokens},
                  {"steps", c.steps},
                  {"cfg", c.cfg},
                  {"implementation", c.implementation},
                  {"cost_source", c.cost_source},
                  {"requests", c.requests},
                  {"arrival_rate_per_s", c.rate_per_s},
                  {"max_batch", c.max_batch}};
  m["completed"] = r.completed;
  m["latency_s"] = summarize(r.latency_s);
  m["queue_s"] = summarize(r.queue_s);
  const double span = r.makespan_s;
  m["makespan_s"] = span;
  m["images_per_s"] = span > 0 ? r.completed / span : 0.0;
  Json util = Json::array();
  double util_mean = 0;
  for (double b : r.device_busy_s) {
    util.push_back(span > 0 ? b / span : 0.0);
    util_mean += span > 0 ? b / span : 0.0;
  }
  if (!r.device_busy_s.empty()) util_mean /= static_cast<double>(r.device_busy_s.size());
  m["device_utilization"] = util;
  m["device_utilization_mean"] = util_mean;
  m["step_compute_ms"] = r.step_compute_ms;
  m["single_device_step_ms"] = r.single_step_ms;
  m["batch_steps"] = r.batch_steps;
  m["mean_batch"] = r.mean_batch;
  m["communication"] = Json{{"fabric_bytes", r.fabric_bytes},
                            {"bytes_per_step_per_device", r.comm_bytes_per_step_per_device},
                            {"formula_bytes_per_step_per_device", r.formula_bytes_per_step_per_device},
                            {"pipefusion_stage_io_bytes_per_step", r.pipefusion_stage_io_bytes_per_step},
                            {"flows", r.flows}};
  m["memory_per_device"] = Json{{"weights_bytes", r.memory.weights}, {"activations_bytes", r.memory.activations},
                                {"kv_buffer_bytes", r.memory.kv_buffers}, {"total_bytes", r.memory.total()},
                                {"capacity_bytes", c.hbm_bytes}};
  if (scope.empty()) rec.metrics()["diffusion"] = m;
  else rec.metrics()["workloads"][scope] = m;
  summary(fmt::format("{} at {} px ({} patch tokens), {} steps{}, on {} x {}: {} (cfg {} x tensor {} x ulysses {} x ring {} x distrifusion {} x pipefusion {}{})",
                      c.model, c.resolution, c.patch_tokens, c.steps, c.cfg ? " with CFG" : "", c.devices, c.hardware, strategy,
                      c.cfg_degree, c.tensor, c.ulysses, c.ring, c.distrifusion, c.pipefusion,
                      c.pipefusion > 1 ? fmt::format(", {} patches", c.patches) : ""));
  const Json& lat = m["latency_s"];
  summary(fmt::format("{} images: latency p50 {:.3f} s, p90 {:.3f} s, p99 {:.3f} s; {:.3f} images/s; step compute {:.2f} ms/device (one device: {:.2f} ms)",
                      r.completed, lat.value("p50", 0.0), lat.value("p90", 0.0), lat.value("p99", 0.0), span > 0 ? r.completed / span : 0.0,
                      r.step_compute_ms, r.single_step_ms));
  const bool pf = c.strategy == "pipefusion";
  summary(fmt::format("per step: {} {} (formula {}); utilization {:.1f}%; memory/device {} of {} (weights {}, activations {}, K/V buffers {})",
                      pf ? "in and out of an interior stage" : "sent per device", format_bytes(pf ? r.pipefusion_stage_io_bytes_per_step : r.comm_bytes_per_step_per_device),
                      format_bytes(r.formula_bytes_per_step_per_device), 100 * util_mean,
                      format_bytes(r.memory.total()), format_bytes(c.hbm_bytes), format_bytes(r.memory.weights),
                      format_bytes(r.memory.activations), format_bytes(r.memory.kv_buffers)));
  summary(fmt::format("costs: {}", c.cost_source));
}

}  // namespace sluice
