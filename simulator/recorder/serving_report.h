// Formats a finished serving simulation into metrics.json sections, requests.csv,
// timeseries.csv and the human summary (llmperf's metric definitions).
#pragma once
#include <string>

#include "recorder/recorder.h"

namespace sluice::serving {
class ServingSim;
}

namespace sluice {

// `scope` empty: metrics under "serving", files requests.csv and timeseries.csv; otherwise
// metrics under workloads.<scope>, files <scope>.requests.csv ..., summary lines tagged.
void report_serving(const serving::ServingSim& sim, const std::string& workload_description, Recorder& rec,
                    bool requests_csv, bool timeseries_csv, const std::string& scope = "");

}  // namespace sluice
