#include "config/schema_json.h"

#include <cmath>

#include <fmt/format.h>

#include "config/units.h"

namespace sluice {

namespace {

std::string regex_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (std::string("\\^$.|?*+()[]{}/").find(c) != std::string::npos) o += '\\';
    o += c;
  }
  return o;
}

// A decimal number: sign as the range allows, and a nonzero mantissa where it must be positive
// (a nonzero digit before the point, or after it), without lookahead: JSON Schema's portable
// regex subset has none.
std::string number_pattern(const ParamSpec& p) {
  const bool nonneg = p.min >= 0;
  const bool positive = p.min > 0 || (p.min == 0 && p.min_exclusive);
  const char* mantissa = positive ? R"((0*[1-9][0-9]*(\.[0-9]*)?|[0-9]*\.0*[1-9][0-9]*))" : R"(([0-9]+\.?[0-9]*|\.[0-9]+))";
  return fmt::format(R"({}{}([eE][+-]?[0-9]+)?)", nonneg ? R"(\+?)" : "[+-]?", mantissa);
}

}  // namespace

std::vector<std::string> unit_suffixes(UnitKind k) {
  const std::string text = valid_units(k);
  std::vector<std::string> out;
  const size_t from = text.find("one of ");
  if (from == std::string::npos) return out;
  const size_t to = text.find(" (e.g.", from);
  const std::string list = text.substr(from + 7, to == std::string::npos ? std::string::npos : to - from - 7);
  size_t start = 0;
  for (;;) {
    const size_t c = list.find(", ", start);
    out.push_back(list.substr(start, c == std::string::npos ? std::string::npos : c - start));
    if (c == std::string::npos) break;
    start = c + 2;
  }
  return out;
}

nlohmann::json scalar_json_schema(const ParamSpec& p) {
  using Json = nlohmann::json;
  auto bounds = [&](Json j) {
    if (std::isfinite(p.min)) j[p.min_exclusive ? "exclusiveMinimum" : "minimum"] = p.min;
    if (std::isfinite(p.max)) j["maximum"] = p.max;
    return j;
  };
  switch (p.type) {
    case ParamType::Int: return bounds(Json{{"type", "integer"}});
    case ParamType::Real: return bounds(Json{{"type", "number"}});
    case ParamType::Quantity: {
      if (p.unit == UnitKind::Money) {
        ParamSpec money = p;  // a price is never negative, whatever the key says
        if (!std::isfinite(money.min) || money.min < 0) money.min = 0;
        return Json{{"anyOf", Json::array({[&] {
                                              Json j{{"type", "number"}};
                                              j[money.min_exclusive ? "exclusiveMinimum" : "minimum"] = money.min;
                                              if (std::isfinite(money.max)) j["maximum"] = money.max;
                                              return j;
                                            }(),
                                            Json{{"type", "string"}, {"pattern", fmt::format(R"(^\s*\$?{}\s*(USD)?\s*$)", number_pattern(money))}}})}};
      }
      std::string alt;
      for (const auto& u : unit_suffixes(p.unit)) {
        if (!alt.empty()) alt += '|';
        alt += regex_escape(u);
      }
      return Json{{"type", "string"}, {"pattern", fmt::format(R"(^\s*{}\s*({})\s*$)", number_pattern(p), alt)}};
    }
    default: return Json::object();
  }
}

}  // namespace sluice
