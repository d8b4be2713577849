// The components a fault process acts on: those named in its `only` list (each a located
// error when the class has no component of that name), else every component of the class.
#pragma once
#include <vector>

#include "config/schema.h"
#include "world/world.h"

namespace sluice::faults {

// Fails at `component` when the cluster has none of class `cls`.
std::vector<int> fault_targets(const Params& p, World& w, FaultClass cls);

}  // namespace sluice::faults
