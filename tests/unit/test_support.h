// Shared helpers of the unit tests.
#pragma once
#include "registry/registry.h"

namespace sluice::testing {

// Every built-in component, registered once for the whole test run.
inline const Registry& registry() {
  static const Registry reg = [] {
    Registry r;
    register_builtin_components(r);
    return r;
  }();
  return reg;
}

}  // namespace sluice::testing
