// A stream of jobs on a TPU v4 pod for capacity planning (the `pod-scheduling` study, see
// pod_study.cpp). Jobs arrive, wait in a queue, get a slice from net::PodAllocator (OCS: any
// free healthy cubes; static: a contiguous block) and run; a host failure makes its cube
// unhealthy until repaired and interrupts the job on it, which restarts (anywhere it fits)
// with its work since the last checkpoint (the restart penalty) to redo.
//
// A job is either a training job of a class (its size in iterations; each placement's
// iteration time comes from `PodRunConfig::iteration_ns`, i.e. from a world run of that
// class on that slice geometry) or an abstract job of a given duration (the old form).
// Time is integer nanoseconds throughout, so fractions of the horizon cannot exceed 1.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "network/pod.h"

namespace sluice::cluster {

struct PodJob {
  int64_t arrival_ns = 0;
  net::CubeShape shape;
  int job_class = 0;         // index of its class (per-class figures)
  int64_t duration_ns = 0;   // an abstract job: its run time on any slice (when iterations == 0)
  int64_t iterations = 0;    // a training job: iterations to run, each at its placement's iteration time
};

// The iteration time (ns, > 0) of a job of class `job_class` on the cubes `mask`.
using IterationTimeFn = std::function<int64_t(int job_class, uint64_t mask)>;

struct PodRunConfig {
  std::array<int, 3> grid{4, 4, 4};
  int chips_per_cube = 64;
  int hosts_per_cube = 16;
  bool ocs = true;
  net::PlacementPolicy placement = net::PlacementPolicy::FirstFit;
  bool backfill = true;             // later jobs may start while the head waits
  int64_t reconfig_ns = 0;          // OCS reprogramming before a slice starts
  int64_t host_mtbf_ns = 0;         // 0: no failures
  int64_t host_repair_ns = 0;
  int64_t restart_penalty_ns = 0;   // work redone after an interruption (time since the last checkpoint)
  int64_t horizon_ns = 0;
  std::vector<net::CubeShape> probes;  // slice sizes whose availability is tracked
  int classes = 1;                  // job classes (PodJob::job_class < classes)
  IterationTimeFn iteration_ns;     // required when a job has iterations
};

// One job class in one run.
struct PodClassResult {
  long jobs = 0, started = 0, completed = 0, interruptions = 0;
  int64_t iterations_done = 0;          // whole iterations done within the horizon (finished jobs and progress of the rest)
  double lost_iterations = 0;           // work lost to failures: the restart penalty, in iterations of the interrupted slice
  int64_t lost_ns = 0;                  // the same as slice time (restart penalty per interruption)
  std::vector<int64_t> iteration_ns;    // one per start or restart (its placement's iteration time); empty for abstract jobs
  std::vector<int64_t> queue_delay_ns;  // per started job: first start - arrival
};

// What one run measured. The fractions are integer time sums over the horizon.
struct PodRunResult {
  double utilization = 0;            // busy cube-time / cube-time (a busy cube's chips all belong to one slice)
  double healthy_fraction = 0;       // healthy cube-time / cube-time
  double fragmentation = 0;          // time fraction the head job waited despite enough free healthy cubes
  double stranded_fraction = 0;      // mean free healthy cubes while jobs waited, over all cubes
  std::vector<int64_t> queue_delay_ns;  // per started job: first start - arrival
  long jobs = 0, started = 0, completed = 0, never_ran = 0, rejected = 0, interruptions = 0;
  long host_failures = 0;
  std::vector<double> probe_availability;  // time fraction each probe shape could be placed on an empty pod
  // The integer sums behind the fractions (checked by check_pod_invariants).
  int cubes = 0;
  int64_t horizon_ns = 0, busy_cube_ns = 0, healthy_cube_ns = 0, frag_ns = 0, stranded_cube_ns = 0;
  std::vector<int64_t> probe_ns;
  std::vector<PodClassResult> classes;
};

// Runs the stream on the pod. Throws std::logic_error when an invariant fails at the end.
PodRunResult run_pod(const PodRunConfig& cfg, const std::vector<PodJob>& jobs, uint64_t seed);

// The end-of-run invariants: utilization, healthy fraction, fragmentation, stranded fraction
// and probe availability within [0, 1]; busy, healthy and probe time within capacity; queue
// delays >= 0; per-class counts consistent. Throws std::logic_error("pod invariant violated:
// NAME: ...") naming the first that fails.
void check_pod_invariants(const PodRunResult& r);

}  // namespace sluice::cluster
