// Plain results of the network studies (studies.cpp): what each study measured, with no
// network types in them, so the recorder (recorder/network_report.h) can format them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice::net {

// One fabric/policy variant of pod-scheduling, run over the shared job stream.
struct PodVariantResult {
  bool ocs = true;
  std::string placement;  // placement policy name
  double utilization = 0;
  double healthy_fraction = 0;
  double fragmentation = 0;
  double stranded_fraction = 0;
  std::vector<double> queue_delay_s;  // per started job
  long jobs = 0, started = 0, completed = 0, never_ran = 0, rejected = 0, interruptions = 0;
  long host_failures = 0;
  std::vector<double> probe_availability;  // one per probe shape, in PodResults::probe_names order
};

// The pod, its failure process and job stream, and one result per variant.
struct PodResults {
  std::array<int, 3> cubes{};
  int chips_per_cube = 0;
  int hosts_per_cube = 0;
  double host_mtbf_s = 0;  // 0: no failures
  double host_repair_s = 0;
  size_t jobs = 0;
  std::vector<std::string> probe_names;
  std::vector<PodVariantResult> variants;
};

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
