// Formats the results of the network studies into metrics.json sections, their CSV
// tables and the human summary lines.
#pragma once
#include "recorder/network_results.h"
#include "recorder/recorder.h"

namespace sluice {

// twisted-torus: metrics of the all-to-all settings and "shapes", twisted.csv, a line per shape.
void report_twisted_torus(const net::TwistResults& results, Recorder& rec);

}  // namespace sluice
