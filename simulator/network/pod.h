// Slice placement on a TPU v4 pod (the fabric side: which cubes a slice gets). The pod is a grid of cubes
// (4×4×4 cubes of 4×4×4 chips); a job asks for a slice of 4i×4j×4k chips, i.e. i×j×k cubes.
// With OCS any free healthy cubes can be joined into the slice's torus; without OCS the
// slice needs a contiguous i×j×k block (any orientation, wrapping round the static torus).
// The job stream that uses it lives in workloads/cluster/pod_stream.h.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>


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
  std::array<int, 3> grid() const { return grid_; }
  // A contiguous block's extent per dimension, in cubes (wrapping round the cube torus):
  // the cubes it spans along x, y and z. For an OCS set of cubes this is only the spread.
  std::array<int, 3> extents(uint64_t mask) const;
  // The block of `dims` cubes (x, y, z, in that orientation) whose lowest corner is cube 0.
  uint64_t block_at_origin(std::array<int, 3> dims) const;

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

}  // namespace sluice::net
