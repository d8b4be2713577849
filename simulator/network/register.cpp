// Network components (topologies, collectives, OCS studies) register here.
#include "registry/registry.h"

namespace sluice {
void register_network_components(Registry&) {}
}  // namespace sluice
