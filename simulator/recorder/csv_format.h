// Appending numbers to the recorder's text outputs (requests.csv, timeseries.csv, and the
// numbers of trace.json) without a format string: rows are written once per request, and the
// general float paths (to_chars' fixed precision, fmt's shortest) cost more than simulating
// a small scenario. Each prints exactly what the general path would (tests hold them to it).
//   put_int:      an integer.
//   put_fixed:    a double with `decimals` digits after the point, correctly rounded (the
//                 digits std::to_chars and fmt's {:.Nf} print).
//   put_scaled:   an integer count of small units shown in a unit 10^decimals times larger
//                 (ns as ms with 6 decimals, as s with 9), exactly: no double in between.
//   put_shortest: the shortest decimal that reads back as a double, as fmt's {} prints it.
//   put_us:       integer ns as microseconds, as put_shortest prints ns / 1e3.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>

#include <fmt/compile.h>
#include <fmt/format.h>

namespace sluice::csv {

// The writers behind put_int, put_scaled and put_fixed, into a caller's buffer with room for
// kIntRoom, kScaledRoom and kFixedRoom characters; each returns the end of what it wrote. A
// row of many numbers is written through them into room made once (no append per field).
inline constexpr size_t kIntRoom = 24, kScaledRoom = 48, kFixedRoom = 400;

// A text field as RFC 4180 writes it: quoted (quotes doubled) when it holds a comma, a quote
// or a line break, as it is otherwise (a variant's or an axis's name in a header).
inline std::string field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

inline char* write_int(char* p, int64_t v) { return std::to_chars(p, p + kIntRoom, v).ptr; }

// decimals at most 18.
inline char* write_scaled(char* p, int64_t v, int decimals) {
  int64_t unit = 1;
  for (int i = 0; i < decimals; ++i) unit *= 10;
  uint64_t a = v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  if (v < 0) *p++ = '-';
  p = std::to_chars(p, p + 21, a / static_cast<uint64_t>(unit)).ptr;
  if (decimals <= 0) return p;
  *p++ = '.';
  uint64_t frac = a % static_cast<uint64_t>(unit);
  for (int i = decimals - 1; i >= 0; --i) {
    p[i] = static_cast<char>('0' + frac % 10);
    frac /= 10;
  }
  return p + decimals;
}

// put_fixed's fast path: the integer nearest v·10^decimals (ties to even, as to_chars rounds
// the exact binary value), from the rounded product and its exact error (an fma), then
// write_scaled's exact digits. Out of its range (|v|·10^decimals ≥ 2^51, or not finite) it
// falls back to std::to_chars, whose fixed-precision path costs ~500 instructions a number.
inline char* write_fixed(char* p, double v, int decimals) {
  static constexpr double kPow10[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
  if (decimals >= 0 && decimals <= 9) {
    const double pw = kPow10[decimals];
    const double r = v * pw;
    if (std::fabs(r) < 2251799813685248.0) {  // 2^51: r's ulp is at most 1/4, so r - k is exact
      const double err = std::fma(v, pw, -r);   // v·pw = r + err exactly
      double k = std::nearbyint(r);             // ties to even (the default rounding mode)
      const double d = r - k;
      if (d == 0.5 && err > 0) k += 1;
      else if (d == -0.5 && err < 0) k -= 1;
      const auto n = static_cast<int64_t>(k);
      if (n == 0 && std::signbit(v)) *p++ = '-';  // to_chars keeps the sign of a negative that rounds to 0
      return write_scaled(p, n, decimals);
    }
  }
  const auto r = std::to_chars(p, p + kFixedRoom, v, std::chars_format::fixed, decimals);
  if (r.ec == std::errc()) return r.ptr;
  const std::string t = std::to_string(v);  // beyond the room (|v| > 1e300): never a time or a count here
  const size_t n = t.size() < kFixedRoom ? t.size() : kFixedRoom;
  t.copy(p, n);
  return p + n;
}

inline void put_int(std::string& s, int64_t v) {
  char b[kIntRoom];
  s.append(b, write_int(b, v));
}

inline void put_scaled(std::string& s, int64_t v, int decimals) {
  char b[kScaledRoom];
  s.append(b, write_scaled(b, v, decimals));
}

inline void put_fixed(std::string& s, double v, int decimals) {
  char b[kFixedRoom];
  s.append(b, write_fixed(b, v, decimals));
}

// The shortest decimal that reads back as v, as fmt's "{}" prints it ("3", "0.25", "1e-05"),
// with integral values below 2^53 written directly (the trace's counts and sizes).
inline void put_shortest(std::string& s, double v) {
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0 && !(v == 0 && std::signbit(v))) {
    put_int(s, static_cast<int64_t>(v));
    return;
  }
  fmt::format_to(std::back_inserter(s), FMT_COMPILE("{}"), v);
}

// ns / 1e3 as put_shortest prints that double (microseconds, as trace viewers read them):
// below 10^15 ns the exact value with at most three decimals is the shortest decimal that
// reads back as the double, so it is written digit by digit.
inline void put_us(std::string& s, int64_t ns) {
  if (ns < 0 || ns >= 1'000'000'000'000'000) {
    put_shortest(s, static_cast<double>(ns) / 1e3);
    return;
  }
  put_int(s, ns / 1000);
  int frac = static_cast<int>(ns % 1000);
  if (frac == 0) return;
  char d[4] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10), static_cast<char>('0' + frac % 10)};
  size_t len = 4;
  while (d[len - 1] == '0') --len;
  s.append(d, len);
}

}  // namespace sluice::csv
