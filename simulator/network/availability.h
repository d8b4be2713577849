// The TPU v4 availability study: hosts of a pod of cubes fail and are repaired; how often can
// a slice of n cubes be formed, with OCS (any n wholly healthy cubes) and without (a healthy
// contiguous block of the static torus, placed by PodAllocator), and what goodput does a
// job that needs it get (checkpoints, lost work, restarts). Integer ns throughout.
// Static blocks are PodAllocator's: any orientation, at any origin, wrapping round the cube
// torus's links in every dimension (a block that crosses the wrap is contiguous on the torus).
#pragma once
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "faults/distribution.h"
#include "network/pod.h"

namespace sluice::net {

// What one availability run needs.
struct AvailabilityConfig {
  std::array<int, 3> grid{4, 4, 4};
  int hosts_per_cube = 16;
  std::vector<CubeShape> slices;  // in cubes
  faults::Distribution lifetime;  // host time to failure
  faults::Distribution repair;    // host repair time
  int64_t warmup_ns = 0;          // simulated before statistics start
  int64_t horizon_ns = 0;         // measured wall time
  int64_t checkpoint_interval_ns = 3'600'000'000'000;  // useful work between checkpoints (> 0)
  int64_t checkpoint_cost_ns = 0;                      // writing one checkpoint
  int64_t restart_ns = 0;                              // every (re)start on a slice, before work resumes
};

// How a job's wall time was spent, in ns; the parts sum to the horizon.
struct SliceJobTime {
  int64_t useful_ns = 0;      // committed checkpoints plus the progress at the end of the horizon
  int64_t lost_ns = 0;        // work done since the last checkpoint when a host of the slice failed
  int64_t restart_ns = 0;     // restarting (a failure while restarting cuts it short)
  int64_t checkpoint_ns = 0;  // writing checkpoints (one cut by a failure included)
  int64_t waiting_ns = 0;     // no slice could be formed
  long interruptions = 0;     // failures of a host in the job's slice
  long starts = 0;            // placements (the first one included)
  int64_t total_ns() const { return useful_ns + lost_ns + restart_ns + checkpoint_ns + waiting_ns; }
};

// Per slice (in AvailabilityConfig::slices order), index 0 with OCS, 1 static.
struct AvailabilityRunResult {
  std::vector<std::array<int64_t, 2>> formable_ns;
  std::vector<std::array<SliceJobTime, 2>> jobs;
  double healthy_cube_s = 0;    // summed over cubes (up to 64 × 100 years: past int64 ns)
  long host_failures = 0;       // inside the measured window
};

// A host going down (up = false) or up at t_ns (test hook and fault traces).
struct HostEvent {
  int64_t t_ns = 0;
  int host = 0;
  bool up = false;
};

// One run from `seed`: every host has its own stream RngStream(seed, "availability/host/<i>"),
// starts in its stationary state (down with probability MTTR/(MTBF+MTTR)) and alternates.
AvailabilityRunResult run_availability(const AvailabilityConfig& cfg, uint64_t seed);
// One run over a given trace (every host up at 0; events sorted by time; warmup ignored).
AvailabilityRunResult run_availability_trace(const AvailabilityConfig& cfg, const std::vector<HostEvent>& trace);

// P(Bin(n_cubes, a^hosts_per_cube) >= need): the fraction of time an OCS slice of `need`
// cubes can be formed with independent hosts of availability a.
double ocs_formable_probability(int n_cubes, int hosts_per_cube, double a, int need);
// The 97.5% quantile of Student's t with `df` degrees of freedom (two-sided 95%).
double student_t975(int df);
// The mean of `v` and the half-width of its 95% confidence interval, Student t with n-1
// degrees of freedom (0 for fewer than two values).
std::pair<double, double> mean_ci95(const std::vector<double>& v);
// The slice shape TPU v4 uses for a slice of `cubes` cubes (a power of two up to 64):
// 1x1x1, 1x1x2, 1x2x2, 2x2x2, 2x2x4, 2x4x4, 4x4x4.
CubeShape tpu_v4_slice_shape(int cubes);

}  // namespace sluice::net
