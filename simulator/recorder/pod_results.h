// Plain results of the pod-scheduling study (pod_study.cpp), formatted by
// recorder/pod_report.cpp: no simulator types in them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cluster {

// One job class in one variant: its jobs' iteration rates on the slices they got, and the stream's figures.
struct PodClassFigures {
  std::string name;
  bool training = false;          // a training job class (else an abstract job of a duration)
  double iteration_s = 0;         // mean over the jobs' starts (each start: its slice's iteration time)
  double iteration_s_min = 0, iteration_s_max = 0;
  double tokens_per_iteration = 0;
  double mfu = 0;                 // model FLOPs per iteration / (mean iteration time x chips x peak)
  long jobs = 0, started = 0, completed = 0, interruptions = 0;
  int64_t iterations_done = 0;    // goodput in iterations: whole iterations done within the horizon
  double lost_iterations = 0;     // work lost to failures (restart penalty), in iterations
  double lost_slice_h = 0;        // the same as slice time
  std::vector<double> queue_delay_s;  // per started job
};

// One fabric/policy variant, run over the shared job stream.
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
  std::vector<PodClassFigures> classes;    // one per job class, in the scenario's order
};

// One (job class, slice geometry) whose iteration time a world run measured.
struct PodGeometry {
  std::string job_class;
  std::string geometry;   // e.g. "ocs 8x8x8 torus" or "static 4x4x8 wraps z"
  std::string model;
  int tp = 1, pp = 1, dp = 1, chips = 0;
  double iteration_s = 0;
  double tokens_per_iteration = 0;
  double mfu = 0;
  double memory_bytes = 0;  // per device, the fullest pipeline rank
};

// The pod, its failure process and job stream, and one result per variant.
struct PodResults {
  std::array<int, 3> cubes{};
  int chips_per_cube = 0;
  int hosts_per_cube = 0;
  double host_mtbf_s = 0;  // 0: no failures
  double host_repair_s = 0;
  size_t jobs = 0;
  int measure_iterations = 0;
  std::string hardware;
  std::vector<std::string> probe_names;
  std::vector<PodVariantResult> variants;
  std::vector<PodGeometry> geometries;  // in the order they were first placed
};

}  // namespace sluice::cluster
