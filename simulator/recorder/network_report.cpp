#include "recorder/network_report.h"

#include <cmath>

#include <fmt/format.h>

namespace sluice {

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
