// Scenario: a YAML file, plus command-line overrides, validated into a study ready to run.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/node.h"
#include "config/schema.h"
#include "recorder/recorder.h"
#include "registry/registry.h"

namespace sluice {

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
};

struct StudyContext {
  const Params& params;      // the scenario's validated top level
  const Registry& registry;
  uint64_t seed;
  std::string name;
};
using StudyFactory = std::function<std::unique_ptr<Study>(const StudyContext&)>;

// Keys every study has: name, description, source, seed, study.
Schema common_study_schema();

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
};

// Applies `--set a.b.c=value` overrides to a tree (value parsed as YAML).
void apply_override(Node& root, const std::string& assignment);

// Loads, overrides, validates and builds. Throws ConfigError on any bad input.
Scenario load_scenario(const std::string& file, const std::vector<std::string>& overrides, const Registry& reg);
// The same from a parsed tree (a sweep point: the file's tree without its `sweep:` block).
Scenario load_scenario_tree(Node root, const std::string& file, const std::vector<std::string>& overrides, const Registry& reg);
// The same from YAML text; `label` names it in errors (used by the fuzz target and tests).
Scenario load_scenario_text(const std::string& text, const std::string& label, const std::vector<std::string>& overrides,
                            const Registry& reg);

// The resolved tree of validated params (defaults filled in, references expanded).
Node resolved_tree(const Params& p);
Json node_to_json(const Node& n);

}  // namespace sluice
