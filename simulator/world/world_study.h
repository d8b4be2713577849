// The study that runs a world: a cluster and the workloads placed on it (`cluster:` +
// `workloads:` in a scenario), and the helpers short forms use to build one.
#pragma once
#include <memory>

#include "config/scenario.h"
#include "run/study.h"
#include "world/world.h"

namespace sluice {

// Runs a built world into the recorder.
class WorldStudy final : public Study {
 public:
  WorldStudy(std::unique_ptr<World> world, SimTime max_sim_time) : world_(std::move(world)), until_(max_sim_time) {}
  void run(RunEnv& env) override;
  World& world() { return *world_; }
  std::optional<FaultTargets> fault_targets() override;

 private:
  std::unique_ptr<World> world_;
  SimTime until_;
};

// Adds the fault processes of a validated `faults` list (if given) to the world.
void add_faults(World& world, const Params& p, const Registry& reg);

// `nodes` servers of `gpus_per_node` devices of `hw`, each on an NVSwitch crossbar at the
// device's scale-up bandwidth with PCIe to two host CPUs, joined (when nodes > 1) by one
// non-blocking switch at 400 Gb/s per device: the cluster of a scenario that names no topology.
std::shared_ptr<net::Topology> implicit_cluster(const HardwareSpec& hw, int nodes, int gpus_per_node);
// Servers of several kinds (in this order, `nodes` of each), joined by the one cluster switch.
std::shared_ptr<net::Topology> implicit_cluster(const std::vector<std::pair<const HardwareSpec*, int>>& kinds, int gpus_per_node);

}  // namespace sluice
