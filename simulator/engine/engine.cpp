#include "engine/engine.h"

#include <fmt/format.h>

namespace sluice {

void Engine::time_fault(SimTime t) const {
  throw TimeFault(fmt::format("time fault: an event at {} ns is earlier than now ({} ns)", t.count_ns(), now_.count_ns()));
}

void Engine::kind_fault(uint32_t kind) {
  throw std::logic_error(fmt::format("internal: event kind {} is above {}: a generation goes in schedule_at's Generation, not in the kind",
                                     kind, kMaxKind));
}

}  // namespace sluice
