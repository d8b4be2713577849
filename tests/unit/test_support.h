// Shared helpers of the unit tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "registry/registry.h"
#include "run/runner.h"
#include "run/scenario.h"

namespace sluice::testing {

// Every built-in component, registered once for the whole test run.
inline const Registry& registry() { return builtin_registry(); }

// Loads a scenario from YAML text (with overrides), runs it, and returns its metrics.
inline Json run_text(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  Scenario sc = load_scenario_text(yaml, "t.yaml", sets, registry());
  Recorder rec;
  run_into(sc, rec, {});
  return rec.metrics();
}

// A whole file's bytes.
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace sluice::testing
