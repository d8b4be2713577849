#include "engine/engine.h"

#include <fmt/format.h>

namespace sluice {

void Engine::time_fault(SimTime t) const {
  throw TimeFault(fmt::format("time fault: an event at {} ns is earlier than now ({} ns)", t.count_ns(), now_.count_ns()));
}

}  // namespace sluice
