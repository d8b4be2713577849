// Lists the studies read whole (slice shapes, probe lists): a list key with its default, and a
// checked [x, y, z] extent triple, each error at its element.
#pragma once
#include <array>
#include <string>

#include "config/schema.h"

namespace sluice {

// A list parameter, or its default when absent (list defaults cannot be schema defaults).
Node list_param(const Params& p, const std::string& key, const std::string& fallback);
// A shape of 3 extents in [1, 4096], errors positioned at the element.
std::array<int, 3> shape_triple(const Node& n, const std::string& path);
// "4x4x8".
std::string shape_text(const std::array<int, 3>& s);

}  // namespace sluice
