// Formats a training job's results into metrics.json and the summary.
#pragma once
#include <string>

#include "recorder/recorder.h"
#include "recorder/training_results.h"

namespace sluice {

// `scope` empty: metrics under "training"; otherwise under workloads.<scope>, summary tagged.
void report_training(const training::TrainingResults& r, const training::TrainingSetup& c, Recorder& rec, const std::string& scope);

}  // namespace sluice
