#include "config/units.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace sluice {

namespace {
struct UnitDef {
  const char* suffix;
  double factor;
};
// Longest suffixes first is not needed: we split number and suffix, then look the suffix up exactly.
const std::vector<UnitDef>& table(UnitKind k) {
  static const std::vector<UnitDef> time{{"ns", 1},     {"us", 1e3},    {"µs", 1e3},         {"ms", 1e6},
                                         {"s", 1e9},    {"min", 60e9},  {"h", 3600e9},       {"d", 86400e9}};
  static const std::vector<UnitDef> bytes{{"B", 1},        {"KB", 1e3},  {"MB", 1e6},          {"GB", 1e9},
                                          {"TB", 1e12},    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                                          {"TiB", 1099511627776.0}};
  static const std::vector<UnitDef> bw{{"B/s", 1},      {"KB/s", 1e3},     {"MB/s", 1e6},    {"GB/s", 1e9},
                                       {"TB/s", 1e12},  {"GiB/s", 1073741824.0}, {"b/s", 0.125}, {"Kb/s", 125.0},
                                       {"Mb/s", 125e3}, {"Gb/s", 125e6},  {"Tb/s", 125e9},  {"Gbps", 125e6}};
  static const std::vector<UnitDef> flop{{"FLOP/s", 1},     {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15},
                                         {"TFLOPS", 1e12}, {"PFLOPS", 1e15}};
  static const std::vector<UnitDef> rate{{"/s", 1}, {"/min", 1.0 / 60}, {"/h", 1.0 / 3600}, {"/ms", 1e3}};
  static const std::vector<UnitDef> money{{"USD", 1}, {"", 1}};
  static const std::vector<UnitDef> power{{"W", 1}, {"kW", 1e3}, {"MW", 1e6}};
  switch (k) {
    case UnitKind::Time: return time;
    case UnitKind::Bytes: return bytes;
    case UnitKind::Bandwidth: return bw;
    case UnitKind::FlopRate: return flop;
    case UnitKind::Rate: return rate;
    case UnitKind::Money: return money;
    case UnitKind::Power: return power;
  }
  return time;
}
}  // namespace

std::pair<double, double> plausible_range(UnitKind k) {
  switch (k) {
    case UnitKind::Time: return {0, 1e300};              // bounded by int64 nanoseconds where it is used
    case UnitKind::Bytes: return {0, 1e18};              // 1 EB
    case UnitKind::Bandwidth: return {1e-3, 1e15};       // 1 PB/s
    case UnitKind::FlopRate: return {1, 1e21};           // 1 ZFLOP/s
    case UnitKind::Rate: return {1e-8, 1e9};             // one per three years to one per nanosecond
    case UnitKind::Money: return {0, 1e15};
    case UnitKind::Power: return {1e-3, 1e10};          // a milliwatt to 10 GW
  }
  return {0, 1e300};
}

const char* base_unit(UnitKind k) {
  switch (k) {
    case UnitKind::Time: return "ns";
    case UnitKind::Bytes: return "B";
    case UnitKind::Bandwidth: return "B/s";
    case UnitKind::FlopRate: return "FLOP/s";
    case UnitKind::Rate: return "/s";
    case UnitKind::Money: return "USD";
    case UnitKind::Power: return "W";
  }
  return "";
}

const char* unit_kind_name(UnitKind k) {
  switch (k) {
    case UnitKind::Time: return "time";
    case UnitKind::Bytes: return "bytes";
    case UnitKind::Bandwidth: return "bandwidth";
    case UnitKind::FlopRate: return "FLOP rate";
    case UnitKind::Rate: return "rate";
    case UnitKind::Money: return "money";
    case UnitKind::Power: return "power";
  }
  return "?";
}

std::string valid_units(UnitKind k) {
  std::string s = "a number followed by one of ";
  bool first = true;
  for (const auto& u : table(k)) {
    if (!*u.suffix) continue;
    s += first ? "" : ", ";
    s += u.suffix;
    first = false;
  }
  if (k == UnitKind::Money) s = "a number of US dollars, optionally '$25000' or '25000USD'";
  else s += fmt::format(" (e.g. '{}')", k == UnitKind::Time        ? "1.5ms"
                                        : k == UnitKind::Bytes     ? "80GiB"
                                        : k == UnitKind::Bandwidth ? "400GB/s"
                                        : k == UnitKind::FlopRate  ? "275TFLOP/s"
                                        : k == UnitKind::Power     ? "700W"
                                                                   : "20/s");
  return s;
}

std::optional<double> parse_real(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  // strtod accepts hex and "inf"; keep to plain decimal notation.
  for (char c : text)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E'))
      return std::nullopt;
  return v;
}

std::optional<long long> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  std::string t;
  for (size_t k = 0; k < text.size(); ++k) {
    const char c = text[k];
    if (c != '_') {
      t += c;
      continue;
    }
    // 1_000_000 groups digits; a '_' anywhere else (alone, leading, trailing, doubled) is not a number.
    const bool between_digits = k > 0 && k + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[k - 1])) &&
                                std::isdigit(static_cast<unsigned char>(text[k + 1]));
    if (!between_digits) return std::nullopt;
  }
  if (t.empty() || !(std::isdigit(static_cast<unsigned char>(t[0])) || t[0] == '-' || t[0] == '+')) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(t.c_str(), &end, 10);
  if (errno != 0 || end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_quantity(const std::string& raw, UnitKind kind, std::string* why) {
  std::string text;
  for (char c : raw)
    if (c != ' ') text += c;
  if (kind == UnitKind::Money && !text.empty() && text[0] == '$') text = text.substr(1);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' || text[i] == '-' ||
                             text[i] == '+' || ((text[i] == 'e' || text[i] == 'E') && i > 0 && i + 1 < text.size() &&
                                                (std::isdigit(static_cast<unsigned char>(text[i + 1])) || text[i + 1] == '-' || text[i + 1] == '+'))))
    ++i;
  const std::string num = text.substr(0, i), suffix = text.substr(i);
  auto v = parse_real(num);
  if (!v) {
    if (why) *why = fmt::format("'{}' does not start with a number", raw);
    return std::nullopt;
  }
  if (suffix.empty() && kind != UnitKind::Money) {
    if (why) *why = fmt::format("'{}' has no unit; a {} needs one", raw, unit_kind_name(kind));
    return std::nullopt;
  }
  for (const auto& u : table(kind))
    if (suffix == u.suffix) {
      const double r = *v * u.factor;
      if (!std::isfinite(r)) {
        if (why) *why = "value out of range";
        return std::nullopt;
      }
      // Beyond these no hardware or workload is meant: a typo of an exponent, refused here
      // before it overflows a count or a time downstream (1e10GB/s, 1e30TB, 1e30/s).
      const auto [lo, hi] = plausible_range(kind);
      if (r != 0 && (std::fabs(r) > hi || std::fabs(r) < lo)) {
        if (why)
          *why = fmt::format("'{}' is {} the range sluice accepts for a {} ({} to {} {})", raw,
                             std::fabs(r) > hi ? "above" : "below", unit_kind_name(kind), lo, hi, base_unit(kind));
        return std::nullopt;
      }
      return r;
    }
  if (why) *why = fmt::format("unknown {} unit '{}'", unit_kind_name(kind), suffix);
  return std::nullopt;
}

std::optional<SimTime> parse_time(const std::string& text, std::string* why) {
  auto ns = parse_quantity(text, UnitKind::Time, why);
  if (!ns) return std::nullopt;
  try {
    return SimTime::from_double(*ns);
  } catch (const SimTimeOverflow&) {
    if (why) *why = "time exceeds the int64 nanosecond range (about 292 years)";
    return std::nullopt;
  }
}

std::string format_bytes(double b) {
  const double a = std::fabs(b);
  if (a >= 1073741824.0) return fmt::format("{:.2f} GiB", b / 1073741824.0);
  if (a >= 1048576.0) return fmt::format("{:.2f} MiB", b / 1048576.0);
  if (a >= 1024.0) return fmt::format("{:.2f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}

std::string format_bandwidth(double Bps) {
  if (Bps >= 1e12) return fmt::format("{:.2f} TB/s", Bps / 1e12);
  if (Bps >= 1e9) return fmt::format("{:.2f} GB/s", Bps / 1e9);
  return fmt::format("{:.2f} MB/s", Bps / 1e6);
}

}  // namespace sluice
