#include "config/shapes.h"

#include <fmt/format.h>

#include "config/error.h"
#include "config/node.h"
#include "config/units.h"

namespace sluice {

Node list_param(const Params& p, const std::string& key, const std::string& fallback) {
  if (p.has(key)) return p.node(key);
  return load_yaml_string(fallback, "(default)");
}

std::array<int, 3> shape_triple(const Node& n, const std::string& path) {
  if (!n.is_seq() || n.seq.size() != 3)
    throw ConfigError(n.origin, path, n.brief(), "expected a shape of 3 extents", "a list such as [4, 4, 8]");
  std::array<int, 3> out{};
  for (size_t i = 0; i < 3; ++i) {
    auto v = n.seq[i].is_scalar() ? parse_int(n.seq[i].scalar) : std::nullopt;
    if (!v || *v < 1 || *v > 4096)
      throw ConfigError(n.seq[i].origin, fmt::format("{}[{}]", path, i), n.seq[i].brief(), "not a valid extent", "an integer in [1, 4096]");
    out[i] = static_cast<int>(*v);
  }
  return out;
}

std::string shape_text(const std::array<int, 3>& s) { return fmt::format("{}x{}x{}", s[0], s[1], s[2]); }

}  // namespace sluice
