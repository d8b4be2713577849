// Plain results of the availability study (network/availability.cpp), with no simulation
// types in them, so the recorder (recorder/availability_report.h) can format them.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice::net {

// One slice size on one fabric at one host availability, over the seeds.
struct AvailabilityRow {
  double availability = 0;
  int chips = 0;
  int cubes = 0;
  std::string shape;  // in chips, e.g. 8x8x16
  bool ocs = true;
  double formable_mean = 0, formable_ci95 = 0;  // fraction of wall time the slice can be formed
  double goodput_mean = 0, goodput_ci95 = 0;    // useful work / wall time of a job that needs it
  std::optional<double> formula;                // OCS: P(Bin(cubes in pod, A^hosts) >= cubes)
  // The job's wall time split (means over seeds, fractions of wall time; they sum to 1 with goodput).
  double lost_fraction = 0, restart_fraction = 0, checkpoint_fraction = 0, waiting_fraction = 0;
  double interruptions = 0;  // mean failures that hit the job per run
};

// One host availability: its derived MTBF and what the runs measured of the pod.
struct AvailabilityLevel {
  double availability = 0;
  double mtbf_s = 0;
  double cube_healthy_probability = 0;  // A^hosts_per_cube
  double healthy_cube_fraction = 0;     // measured: healthy cube-time / cube-time, mean over seeds
  double host_failures = 0;             // mean per run
};

struct AvailabilityResults {
  std::array<int, 3> cubes{};
  int chips_per_cube = 0;
  int hosts_per_cube = 0;
  std::string lifetime, repair;  // the distributions, described
  double mttr_s = 0;
  int64_t horizon_ns = 0, warmup_ns = 0;
  int seeds = 0;
  double checkpoint_interval_s = 0, checkpoint_cost_s = 0, restart_s = 0;
  std::vector<AvailabilityLevel> levels;
  std::vector<AvailabilityRow> rows;  // by availability, then slice, OCS before static
};

}  // namespace sluice::net
