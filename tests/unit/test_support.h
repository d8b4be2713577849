// Shared helpers of the unit tests.
#pragma once
#include "registry/registry.h"

namespace sluice::testing {

// Every built-in component, registered once for the whole test run.
inline const Registry& registry() { return builtin_registry(); }

}  // namespace sluice::testing
