// Hardware components (cost sources) and benchmarks register here.
#include "registry/registry.h"

namespace sluice {
void register_hardware_components(Registry&) {}
}  // namespace sluice
