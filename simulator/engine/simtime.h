// SimTime: simulated time as a strong type over int64 nanoseconds.
#pragma once
#include <compare>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace sluice {

// Thrown when time arithmetic would leave the int64 nanosecond range (about ±292 years).
class SimTimeOverflow : public std::overflow_error {
 public:
  explicit SimTimeOverflow(const std::string& what) : std::overflow_error(what) {}
};

// A point or span of simulated time in integer nanoseconds; arithmetic is checked, never wraps.
class SimTime {
 public:
  constexpr SimTime() = default;
  static constexpr SimTime ns(int64_t v) { return SimTime(v); }
  static SimTime us(double v) { return from_double(v * 1e3); }
  static SimTime ms(double v) { return from_double(v * 1e6); }
  static SimTime seconds(double v) { return from_double(v * 1e9); }
  // Rounds a nanosecond count given as a double to the nearest integer, checking range.
  static SimTime from_double(double ns_value);
  static constexpr SimTime zero() { return SimTime(0); }
  static constexpr SimTime max() { return SimTime(std::numeric_limits<int64_t>::max()); }

  constexpr int64_t count_ns() const { return ns_; }
  constexpr double to_seconds() const { return static_cast<double>(ns_) * 1e-9; }
  constexpr double to_ms() const { return static_cast<double>(ns_) * 1e-6; }
  constexpr double to_us() const { return static_cast<double>(ns_) * 1e-3; }

  friend constexpr auto operator<=>(SimTime, SimTime) = default;

  SimTime operator+(SimTime o) const {
    int64_t r;
    if (__builtin_add_overflow(ns_, o.ns_, &r)) overflow("+", o.ns_);
    return SimTime(r);
  }
  SimTime operator-(SimTime o) const {
    int64_t r;
    if (__builtin_sub_overflow(ns_, o.ns_, &r)) overflow("-", o.ns_);
    return SimTime(r);
  }
  SimTime operator*(int64_t k) const {
    int64_t r;
    if (__builtin_mul_overflow(ns_, k, &r)) overflow("*", k);
    return SimTime(r);
  }
  SimTime& operator+=(SimTime o) { return *this = *this + o; }
  SimTime& operator-=(SimTime o) { return *this = *this - o; }

  // Human form with a unit that keeps 3 significant decimals, e.g. "1.500ms".
  std::string str() const;

 private:
  constexpr explicit SimTime(int64_t v) : ns_(v) {}
  [[noreturn]] void overflow(const char* op, int64_t rhs) const;
  int64_t ns_ = 0;
};

}  // namespace sluice
