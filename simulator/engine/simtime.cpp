#include "engine/simtime.h"

#include <cmath>

#include <fmt/format.h>

namespace sluice {

SimTime SimTime::from_double(double ns_value) {
  if (!std::isfinite(ns_value) || ns_value >= 9.2233720368547758e18 || ns_value < -9.2233720368547758e18)
    throw SimTimeOverflow(fmt::format("time of {} ns is outside the int64 nanosecond range (about ±292 years)", ns_value));
  return SimTime(static_cast<int64_t>(std::llround(ns_value)));
}

void SimTime::overflow(const char* op, int64_t rhs) const {
  throw SimTimeOverflow(fmt::format("SimTime overflow: {} ns {} {} leaves the int64 nanosecond range", ns_, op, rhs));
}

std::string SimTime::str() const {
  const double a = std::fabs(static_cast<double>(ns_));
  if (a >= 1e9) return fmt::format("{:.3f}s", to_seconds());
  if (a >= 1e6) return fmt::format("{:.3f}ms", to_ms());
  if (a >= 1e3) return fmt::format("{:.3f}us", to_us());
  return fmt::format("{}ns", ns_);
}

}  // namespace sluice
