#include "registry/registry.h"

namespace sluice {
void register_serving_components(Registry&) {}
}  // namespace sluice
