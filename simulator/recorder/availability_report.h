// Formats the availability study's results: metrics.json entries, availability.csv and the
// summary table (one line per availability and slice size, OCS beside static).
#pragma once
#include "recorder/availability_results.h"
#include "recorder/recorder.h"

namespace sluice {

// availability: metrics "pod", "failures", "job", "levels" and "rows", availability.csv, the table.
void report_availability(const net::AvailabilityResults& results, Recorder& rec);

}  // namespace sluice
