// Formats a diffusion workload's results into metrics.json and the summary.
#pragma once
#include <string>

#include "recorder/recorder.h"
#include "recorder/diffusion_results.h"

namespace sluice {

// `scope` empty: metrics under "diffusion"; otherwise under workloads.<scope>, summary tagged.
void report_diffusion(const diffusion::DiffusionResults& r, const diffusion::DiffusionSetup& c, Recorder& rec, const std::string& scope);

}  // namespace sluice
