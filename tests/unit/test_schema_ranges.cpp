// The JSON Schema and the validator agree on every ranged key: for each int, real or quantity
// key of every registered component and study (sections included) that has a minimum, the
// schema carries the bounds JSON Schema can hold (numbers: minimum/maximum; quantities: the
// sign their pattern allows), and a value the schema's pattern refuses is refused by the
// validator too. (`rate: -5/s` validated against the shipped schema before.)
#include <doctest/doctest.h>

#include <cmath>
#include <regex>
#include <set>

#include "test_support.h"

#include "config/node.h"
#include "config/schema_json.h"
#include "config/units.h"
#include "registry/registry.h"

using namespace sluice;

namespace {

struct Ranged {
  std::string where;
  const ParamSpec* p;
};

void collect(const Schema& s, const std::string& where, std::vector<Ranged>& out, std::set<const Schema*>& seen) {
  if (!seen.insert(&s).second) return;
  for (const auto& p : s.params()) {
    if ((p.type == ParamType::Int || p.type == ParamType::Real || p.type == ParamType::Quantity) && std::isfinite(p.min))
      out.push_back({where + "." + p.name, &p});
    if ((p.type == ParamType::Section || p.type == ParamType::Ref) && p.section) collect(*p.section, where + "." + p.name, out, seen);
  }
}

// Validates `{key: value}` against a schema holding that one key.
bool validator_accepts(const ParamSpec& p, const std::string& value) {
  Schema one;
  ParamSpec& q = one.add(p.name, p.type, p.doc);
  q = p;
  try {
    parse_params(load_yaml_string(p.name + ": \"" + value + "\"\n", "t.yaml"), one, "t");
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

}  // namespace

TEST_CASE("schema and validator agree on every ranged key: numbers' bounds, quantities' sign") {
  const Registry& reg = testing::registry();
  std::vector<Ranged> keys;
  std::set<const Schema*> seen;
  for (const auto& cat : reg.categories())
    for (const auto* item : reg.in(cat)) collect(*item->schema, cat + "." + item->name, keys, seen);
  REQUIRE(keys.size() > 100);
  size_t numbers = 0, quantities = 0;
  for (const auto& [where, p] : keys) {
    CAPTURE(where);
    const auto j = scalar_json_schema(*p);
    if (p->type != ParamType::Quantity) {
      ++numbers;
      CHECK(j.at(p->min_exclusive ? "exclusiveMinimum" : "minimum").get<double>() == p->min);
      if (std::isfinite(p->max)) CHECK(j.at("maximum").get<double>() == p->max);
      continue;
    }
    if (p->unit == UnitKind::Money || p->min < 0) continue;
    ++quantities;
    const std::regex pattern(j.at("pattern").get<std::string>(), std::regex::ECMAScript);
    const std::string unit = unit_suffixes(p->unit).front();
    // A negative value: refused by both.
    CHECK_FALSE(std::regex_match("-5" + unit, pattern));
    CHECK_FALSE(validator_accepts(*p, "-5" + unit));
    // Zero: refused by both where the key must be positive, accepted by the pattern otherwise.
    const bool positive = p->min > 0 || p->min_exclusive;
    CHECK(std::regex_match("0" + unit, pattern) == !positive);
    CHECK(std::regex_match("0.00e7" + unit, pattern) == !positive);
    if (positive) CHECK_FALSE(validator_accepts(*p, "0" + unit));
    else CHECK(validator_accepts(*p, "0" + unit) == (p->min <= 0));
    // Positive values in the unit: the pattern accepts them (its other bounds are the validator's).
    CHECK(std::regex_match("1" + unit, pattern));
    CHECK(std::regex_match("+2.5e3" + unit, pattern));
    CHECK(std::regex_match(" 0.5 " + unit, pattern));
  }
  MESSAGE(numbers << " ranged numbers and " << quantities << " ranged quantities checked");
  CHECK(numbers > 50);
  CHECK(quantities > 30);
}
