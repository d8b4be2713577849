// Formats the pod-scheduling study's results (workloads/cluster/pod_study.cpp).
#pragma once
#include "recorder/recorder.h"
#include "recorder/pod_results.h"

namespace sluice {

// Metrics "pod", availability, "jobs", "variants" (each with its per-class figures) and
// "geometries" (the world-measured iteration time per job class and slice geometry);
// variants.csv, classes.csv, geometries.csv; a summary line per variant and per job class.
void report_pod_scheduling(const cluster::PodResults& results, Recorder& rec);

}  // namespace sluice
