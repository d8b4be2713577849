// The fault monkey (after SimGrid's simgrid-monkey): re-runs a world scenario failing one
// component at a time at a spread of instants, and reports every run that hangs (runs past
// an event budget), crashes (any error), or breaks an invariant (request conservation, flow
// rates within link capacity, time order).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "registry/registry.h"

namespace sluice {

struct MonkeyOptions {
  int instants = 3;               // failure times per component, spread evenly over the baseline run
  int per_class = 4;              // components tried per class (evenly spaced), 0: all
  std::vector<std::string> classes;  // empty: every class the cluster has
  double repair_after_s = 0;      // > 0: the component comes back this long after failing
  double event_factor = 20;       // a run hangs past this many times the baseline's events (+ 100000)
};

struct MonkeyRun {
  std::string component;  // CLASS:NAME
  double at_s = 0;
  std::string outcome;    // ok, hang, crash, invariant, stall
  std::string message;
};

struct MonkeyReport {
  double baseline_s = 0;
  uint64_t baseline_events = 0;
  int runs = 0, hangs = 0, crashes = 0, invariants = 0;
  int stalls = 0;  // a workload waits forever for a failure never repaired (see --repair-after): reported, not a defect
  std::vector<MonkeyRun> all;
};

// Runs the monkey on `file` (a world scenario) with `sets`; `progress` gets each finished run.
MonkeyReport run_monkey(const std::string& file, const std::vector<std::string>& sets, const Registry& reg, const MonkeyOptions& o,
                        const std::function<void(const MonkeyRun&, int done, int total)>& progress = {});

}  // namespace sluice
