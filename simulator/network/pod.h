// Cluster scheduling on a TPU v4 pod for capacity planning. The pod is a grid of cubes
// (4×4×4 cubes of 4×4×4 chips); a job asks for a slice of 4i×4j×4k chips, i.e. i×j×k cubes.
// With OCS any free healthy cubes can be joined into the slice's torus; without OCS the
// slice needs a contiguous i×j×k block (any orientation, wrapping round the static torus).
// A host failure makes its cube unhealthy until repaired and interrupts the job on it.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace sluice::net {

// A slice request in cubes along x, y, z.
struct CubeShape {
  int x = 1, y = 1, z = 1;
  int cubes() const { return x * y * z; }
  auto operator<=>(const CubeShape&) const = default;
};

enum class PlacementPolicy { FirstFit, BestFit };
const char* placement_name(PlacementPolicy p);

// Finds cube sets for slices on a pod of up to 64 cubes (a bit per cube).
class PodAllocator {
 public:
  PodAllocator(std::array<int, 3> grid, bool ocs, PlacementPolicy policy);
  // A set of cubes for `shape` among `free` (free and healthy cubes), or nullopt.
  // First-fit: the lowest-index choice. Best-fit: the choice touching the most busy or
  // unhealthy cubes, which keeps free cubes together (for OCS too: racks stay whole).
  std::optional<uint64_t> place(const CubeShape& shape, uint64_t free) const;
  // Whether the shape could ever be placed on an empty, healthy pod.
  bool feasible(const CubeShape& shape) const;
  int cube_count() const { return n_; }
  bool ocs() const { return ocs_; }

 private:
  struct Candidate {
    uint64_t mask, neighbours;
  };
  const std::vector<Candidate>& blocks(const CubeShape& s) const;
  std::array<int, 3> grid_;
  int n_;
  bool ocs_;
  PlacementPolicy policy_;
  std::vector<uint64_t> nbr_;  // per cube: its 6-neighbourhood on the cube torus
  mutable std::map<CubeShape, std::vector<Candidate>> cache_;
};

// The job stream and the pod: what one scheduling run needs.
struct PodJob {
  double arrival_s = 0;
  CubeShape shape;
  double duration_s = 0;
};
struct PodRunConfig {
  std::array<int, 3> grid{4, 4, 4};
  int chips_per_cube = 64;
  int hosts_per_cube = 16;
  bool ocs = true;
  PlacementPolicy placement = PlacementPolicy::FirstFit;
  bool backfill = true;            // later jobs may start while the head waits
  double reconfig_s = 0;           // OCS reprogramming before a slice starts
  double host_mtbf_s = 0;          // 0: no failures
  double host_repair_s = 0;
  double restart_penalty_s = 0;    // work redone after an interruption
  double horizon_s = 0;
  std::vector<CubeShape> probes;   // slice sizes whose availability is tracked
};
// What one run measured.
struct PodRunResult {
  double utilization = 0;            // busy chip-time / chip-time
  double healthy_fraction = 0;       // healthy cube-time / cube-time
  double fragmentation = 0;          // time fraction the head job waited despite enough free healthy cubes
  double stranded_fraction = 0;      // mean free healthy cubes while jobs waited, over all cubes
  std::vector<double> queue_delay_s; // per started job: first start - arrival
  long jobs = 0, started = 0, completed = 0, never_ran = 0, rejected = 0, interruptions = 0;
  long host_failures = 0;
  std::vector<double> probe_availability;  // time fraction each probe shape could be placed on an empty pod
};
PodRunResult run_pod(const PodRunConfig& cfg, const std::vector<PodJob>& jobs, uint64_t seed);

}  // namespace sluice::net
