// The JSON Schema (draft-07) fragment of a scalar key (int, real, quantity): its type, a
// quantity's unit pattern, and the range as far as JSON Schema can hold it. `sluice schema`
// builds every scalar key from it, and a test holds it to the validator's ranges.
#pragma once
#include <nlohmann/json.hpp>

#include "config/schema.h"

namespace sluice {

// Ints and reals carry minimum (or exclusiveMinimum) and maximum. A quantity is a string with
// a unit, so its pattern holds only the sign: no '-' where the minimum is >= 0, and a nonzero
// digit where it is > 0 (or exclusive 0); its other bounds are in the description, checked by
// the validator. Money also takes a bare number, with the minimum.
nlohmann::json scalar_json_schema(const ParamSpec& p);

// The unit suffixes of a kind, from the one table the parser uses.
std::vector<std::string> unit_suffixes(UnitKind k);

}  // namespace sluice
