// round_ns: std::llround inline, for the hot paths that turn a double nanosecond count into an
// integer one (std::llround is a library call through the PLT there).
#pragma once
#include <cstdint>

namespace sluice {

// The nearest integer, halves away from zero: the same result as std::llround for every finite
// x within int64 range. x - trunc(x) is exact (Sterbenz: trunc(x) <= x <= 2 trunc(x) for
// x >= 1), so the fraction compared with one half is the true one.
inline int64_t round_ns(double x) {
  const int64_t i = static_cast<int64_t>(x);
  const double f = x - static_cast<double>(i);
  return i + (f >= 0.5 ? 1 : 0) - (f <= -0.5 ? 1 : 0);
}

}  // namespace sluice
