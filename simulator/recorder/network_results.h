// Plain results of the network studies (network/studies.cpp; pod-scheduling is recorder/pod_results.h): what each study measured, with no
// network types in them, so the recorder (recorder/network_report.h) can format them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice::net {

// All-to-all on one slice shape, regular against twisted torus (twisted-torus).
struct TwistRow {
  std::string shape;
  double regular_ms = 0;
  double twisted_ms = 0;
  double gain = 0;  // regular time / twisted time
  std::optional<double> published_gain;
  double regular_bisection_Bps = 0;
  double twisted_bisection_Bps = 0;
  int regular_diameter = 0;
  int twisted_diameter = 0;
};

// The all-to-all settings of twisted-torus, and one row per shape.
struct TwistResults {
  double bytes_per_device = 0;
  long long paths_per_pair = 0;
  std::string regular_routing;
  int64_t flow_quantum_ns = 0;
  std::vector<TwistRow> rows;
};

}  // namespace sluice::net
