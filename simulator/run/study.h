// What a study is to the run layer: built from a validated scenario, run once into a recorder.
// Studies that answer a question by running many worlds (compare, sweep) sit here too, above
// the world and never inside it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/schema.h"
#include "recorder/recorder.h"
#include "registry/registry.h"

namespace sluice {

// What a fault can take down in a study's cluster, for `sluice monkey`: every fault class
// (chip, host, ..., in the world's order) with its components' names, and the cluster's name.
struct FaultTargets {
  std::string cluster;
  std::vector<std::pair<std::string, std::vector<std::string>>> classes;
};

// What a study needs while it runs.
struct RunEnv {
  Recorder& recorder;
  std::function<void(double)> progress;  // fraction done in [0, 1]; may be empty
};

// A study is one kind of experiment (serving, collective, cluster...). Building it validates
// the whole scenario and builds the world; run() simulates and hands records to the recorder.
class Study {
 public:
  virtual ~Study() = default;
  virtual void run(RunEnv& env) = 0;
  // What besides the scenario's own resolved text names this run (a comparison: the hashes
  // of the scenarios it runs), folded into the run id so that changed inputs never replace
  // an earlier run's results. Empty for a study that is all in its own file.
  virtual std::string identity() const { return ""; }
  // A study that runs a cluster says what can fail in it; a study without one has nothing.
  virtual std::optional<FaultTargets> fault_targets() { return std::nullopt; }
};

struct StudyContext {
  const Params& params;      // the scenario's validated top level
  const Registry& registry;
  uint64_t seed;
  std::string name;
};
using StudyFactory = std::function<std::unique_ptr<Study>(const StudyContext&)>;

}  // namespace sluice
