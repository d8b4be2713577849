// The list of built-in components: each module registers its own.
#include "registry/registry.h"

namespace sluice {

void register_engine_benchmarks(Registry& reg);
void register_serving_components(Registry& reg);
void register_network_components(Registry& reg);
void register_hardware_components(Registry& reg);
void register_compare_study(Registry& reg);
void register_world_study(Registry& reg);
void register_pod_study(Registry& reg);
void register_placement_policies(Registry& reg);
void register_training_workload(Registry& reg);
void register_diffusion_workload(Registry& reg);
void register_world_bench(Registry& reg);
namespace faults {
void register_random_faults(Registry& reg);
void register_trace_faults(Registry& reg);
}  // namespace faults

void register_builtin_components(Registry& reg) {
  register_engine_benchmarks(reg);
  register_placement_policies(reg);  // before the workloads whose `place` lists the policies
  faults::register_random_faults(reg);  // before the studies whose `faults` lists them
  faults::register_trace_faults(reg);
  register_serving_components(reg);
  register_network_components(reg);
  register_hardware_components(reg);
  register_compare_study(reg);
  register_world_study(reg);
  register_pod_study(reg);
  register_training_workload(reg);
  register_diffusion_workload(reg);
  register_world_bench(reg);
}

const Registry& builtin_registry() {
  static const Registry reg = [] {
    Registry r;
    register_builtin_components(r);
    return r;
  }();
  return reg;
}

}  // namespace sluice
