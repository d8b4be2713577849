// Registry: components registered by name with their documented parameters, per category
// (study, scheduler, router, workload, arrival, cost source, topology, failure model...).
// `sluice list` prints it, and a scenario's `kind:` keys are resolved through it.
#pragma once
#include <any>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/schema.h"

namespace sluice {

struct ComponentInfo {
  std::string category;  // e.g. "scheduler"
  std::string name;      // e.g. "vllm"
  std::string summary;   // one line
  std::shared_ptr<Schema> schema;
  std::any factory;      // a std::function of the category's factory type
};

class Registry final : public ComponentCatalog {
 public:
  // Adds a component; its schema gains a required-or-defaulted 'kind' key automatically.
  void add(std::string category, std::string name, std::string summary, Schema schema, std::any factory = {});
  const ComponentInfo* find(const std::string& category, const std::string& name) const;
  std::vector<std::string> categories() const;
  std::vector<const ComponentInfo*> in(const std::string& category) const;
  std::string names(const std::string& category) const;  // "a, b, c"

  // Parses a component mapping {kind: NAME, ...params}: finds NAME in the category and
  // validates the rest against its schema. `default_kind` applies when 'kind' is absent.
  struct Parsed {
    const ComponentInfo* info;
    Params params;
  };
  Parsed parse(const Node& node, const std::string& category, const std::string& path,
               const std::string& default_kind = "") const;

  Params parse_component(const Node& node, const std::string& category, const std::string& path,
                         const std::string& default_kind, std::string& kind) const override {
    Parsed p = parse(node, category, path, default_kind);
    kind = p.info->name;
    return std::move(p.params);
  }

  template <class F>
  const F& factory(const ComponentInfo& info) const {
    const F* f = std::any_cast<F>(&info.factory);
    if (!f) throw std::logic_error("internal: component '" + info.name + "' has no factory of the expected type");
    return *f;
  }

 private:
  std::map<std::string, std::map<std::string, ComponentInfo>> by_category_;
};

// Registers every built-in component: runs every SLUICE_REGISTER block linked into the program.
void register_builtin_components(Registry& reg);
// A registry of every built-in component, built once per process (tests, fuzz targets, benchmarks).
const Registry& builtin_registry();

// Self-registration: a component registers itself in its own file,
//
//   SLUICE_REGISTER(component, vllm_scheduler) {
//     reg.add("scheduler", "vllm", "...", schema, SchedulerFactory(...));
//   }
//
// and nothing else names it: adding a component is one new file. The blocks run when a registry
// of the built-ins is made, ordered by stage and then by id (never by link order), so a schema
// may list the names of an earlier stage (a workload's `place` lists the placement policies, a
// study's `faults` the fault processes). Ids are unique across the program.
enum class RegisterStage : int {
  component = 0,  // schedulers, routers, loads, placement policies, fault processes, topologies, collectives
  workload = 1,   // workload kinds of the world (serving, training, diffusion)
  study = 2,      // studies (a scenario's `study:`)
  bench = 3,      // benchmarks (`sluice bench NAME`)
};
struct AutoRegistration {
  using Fn = void (*)(Registry&);
  AutoRegistration(RegisterStage stage, const char* id, Fn fn);
  // Runs every block into `reg`; throws std::logic_error on a repeated id.
  static void run_all(Registry& reg);
};

}  // namespace sluice

#define SLUICE_REGISTER(stage, id)                                                                              \
  static void sluice_register_##id(::sluice::Registry& reg);                                                    \
  [[maybe_unused]] static const ::sluice::AutoRegistration sluice_registration_##id(::sluice::RegisterStage::stage, \
                                                                                    #id, &sluice_register_##id); \
  static void sluice_register_##id([[maybe_unused]] ::sluice::Registry& reg)

namespace sluice {
// A benchmark of the simulator itself (`sluice bench NAME`): prints figures, returns an exit code.
using BenchFn = std::function<int(bool quick)>;
}  // namespace sluice
