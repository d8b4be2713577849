// Placement: which devices of the cluster a workload runs on. Explicitly (`devices: 0-15`,
// a list, or `servers: 0-1`) or by a registered policy (`policy: first-fit`, `devices: 16`).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/schema.h"
#include "registry/registry.h"

namespace sluice {

class World;

// A placement policy (category "placement"): `n` free devices of the world, in the order the
// workload will use them (consecutive ranks fill a server before the next), or an empty list.
using PlacementPolicyFn = std::function<std::vector<int>(const World& world, int n)>;

// The `place` section of a workload.
std::shared_ptr<Schema> placement_schema(const Registry& reg);
// Resolves a validated `place` section to `needed` devices and claims them for `who`; errors
// (too few devices, taken devices, a count that does not match) are ConfigErrors at `place`.
std::vector<int> place_devices(World& world, const Params& place, int needed, const std::string& who, const Registry& reg);

// Parses "0-7", "3", or a YAML list of such into indices; throws ConfigError at `at`.
std::vector<int> parse_index_list(const Node& n, const std::string& path, long limit);

}  // namespace sluice
