// Sorting a run's figures for their percentiles (summarize()): an LSD radix sort on the bit
// patterns of non-negative doubles, the same sequence std::sort gives them, in about a fifth
// of its instructions on the 10,000-value vectors of a serving run (each latency metric is
// sorted once per run; on Vidur's scenario the sorts were 8% of the whole process).
//
// Why it is the same sequence: a non-negative double's bits, read as an unsigned integer, order
// as its value does (IEEE 754 puts the exponent above the mantissa, both biased), and two equal
// values have equal bits (+0.0 is the only zero without a sign bit). Anything else (a negative
// value, -0.0, a NaN) or a short vector goes to std::sort.
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

namespace sluice {

inline void sort_values(std::vector<double>& v) {
  const size_t n = v.size();
  if (n < 512) {  // (below this std::sort is as cheap)
    std::sort(v.begin(), v.end());
    return;
  }
  constexpr uint64_t kPositiveNaN = 0x7FF0000000000000ull;  // +inf; above it, a NaN
  std::vector<uint64_t> a(n), b(n);
  std::array<std::array<uint32_t, 256>, 8> count{};
  for (size_t i = 0; i < n; ++i) {
    const uint64_t k = std::bit_cast<uint64_t>(v[i]);
    if (k > kPositiveNaN) {  // a sign bit (negative, -0.0) or a NaN
      std::sort(v.begin(), v.end());
      return;
    }
    a[i] = k;
    for (int d = 0; d < 8; ++d) ++count[static_cast<size_t>(d)][(k >> (8 * d)) & 0xFF];
  }
  for (int d = 0; d < 8; ++d) {
    auto& c = count[static_cast<size_t>(d)];
    const uint64_t first = (a[0] >> (8 * d)) & 0xFF;
    if (c[first] == n) continue;  // every key has this digit: the pass would move nothing
    uint32_t at = 0;
    for (auto& x : c) {
      const uint32_t k = x;
      x = at;
      at += k;
    }
    for (size_t i = 0; i < n; ++i) b[c[(a[i] >> (8 * d)) & 0xFF]++] = a[i];
    a.swap(b);
  }
  std::memcpy(v.data(), a.data(), n * sizeof(double));
}

}  // namespace sluice
