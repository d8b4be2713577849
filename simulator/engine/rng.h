// Random streams derived from (seed, component id): adding a component never shifts another's draws.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

namespace sluice {

// splitmix64: a bijective mixer used to derive stream seeds.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One value folded into a running digest (fabric shapes, states compared for equality; not
// for streams): order matters, and each step is splitmix64's bijective mix.
constexpr uint64_t digest_mix(uint64_t h, uint64_t v) { return splitmix64(h ^ splitmix64(v)); }

// FNV-1a of a component id, so streams are named by strings stable across builds.
constexpr uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) { h ^= c; h *= 0x100000001b3ull; }
  return h;
}

// xoshiro256** with distributions written out here, so draws are identical on every
// platform and standard library (std:: distributions are implementation-defined).
class RngStream {
 public:
  RngStream(uint64_t seed, std::string_view component) {
    uint64_t x = splitmix64(seed) ^ fnv1a(component);
    for (auto& w : s_) { x = splitmix64(x); w = x; }
  }
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0]; s_[3] ^= s_[1]; s_[1] ^= s_[2]; s_[0] ^= s_[3];
    s_[2] ^= t; s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) by Lemire's multiply-shift with rejection.
  uint64_t below(uint64_t n) {
    __uint128_t m = static_cast<__uint128_t>(next_u64()) * n;
    uint64_t l = static_cast<uint64_t>(m);
    if (l < n) {
      const uint64_t thresh = (0 - n) % n;
      while (l < thresh) { m = static_cast<__uint128_t>(next_u64()) * n; l = static_cast<uint64_t>(m); }
    }
    return static_cast<uint64_t>(m >> 64);
  }
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  // Standard normal by Box–Muller (both values used).
  double normal() {
    if (has_spare_) { has_spare_ = false; return spare_; }
    double u1;
    do { u1 = uniform(); } while (u1 <= 0.0);
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }
  double gauss(double mean, double sd) { return mean + sd * normal(); }
  // Gamma(shape k, scale theta) by Marsaglia–Tsang.
  double gamma(double k, double theta) {
    if (k < 1.0) return gamma(k + 1.0, theta) * std::pow(uniform_open(), 1.0 / k);
    const double d = k - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x, v;
      do { x = normal(); v = 1.0 + c * x; } while (v <= 0.0);
      v = v * v * v;
      const double u = uniform_open();
      if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * theta;
      if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * theta;
    }
  }

 private:
  static constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  double uniform_open() { double u; do { u = uniform(); } while (u <= 0.0); return u; }
  uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace sluice
