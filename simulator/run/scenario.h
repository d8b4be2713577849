// Scenario: a YAML file, plus command-line overrides, validated and built into a study ready to run.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "config/node.h"
#include "config/scenario.h"
#include "registry/registry.h"
#include "run/study.h"

namespace sluice {

struct Scenario {
  std::string file;
  std::string name;
  uint64_t seed = 0;
  std::shared_ptr<Node> root;  // after overrides
  const ComponentInfo* study = nullptr;
  std::shared_ptr<Params> params;
  Node resolved;               // every default filled in and catalog references expanded
  std::string hash;            // FNV-1a of the resolved YAML, 16 hex digits
  std::unique_ptr<Study> world;
  // The `bands:` block's replications, or -1 when the scenario asks for no error bands.
  int band_replications = -1;
};

// Loads, overrides, validates and builds. Throws ConfigError on any bad input.
Scenario load_scenario(const std::string& file, const std::vector<std::string>& overrides, const Registry& reg);
// The same from a parsed tree (a sweep point: the file's tree without its `sweep:` block).
Scenario load_scenario_tree(Node root, const std::string& file, const std::vector<std::string>& overrides, const Registry& reg);
// The same from YAML text; `label` names it in errors (used by the fuzz target and tests).
Scenario load_scenario_text(const std::string& text, const std::string& label, const std::vector<std::string>& overrides,
                            const Registry& reg);

}  // namespace sluice
