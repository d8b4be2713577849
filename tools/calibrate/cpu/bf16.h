// bfloat16 on the host: the same bit layout as CUDA's __nv_bfloat16 (the top 16 bits of an
// IEEE float), rounded to nearest even. The CPU references read bf16 inputs through this,
// so they see exactly the values the kernels see.
#pragma once
#include <cstdint>
#include <cstring>

namespace sluice::calib {

using bf16_bits = std::uint16_t;

// Rounds a float to bf16 (nearest, ties to even; NaN stays NaN).
inline bf16_bits float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<bf16_bits>((u >> 16) | 0x40);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_bits>((u + rounding) >> 16);
}

inline float bf16_to_float(bf16_bits b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The value a float takes once stored as bf16.
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace sluice::calib
