// The topology loader: a catalog entry (topologies/NAME.yaml), a catalog entry with overrides, or
// an inline {kind: GENERATOR, ...} becomes a checked Topology. The generators are the files in
// network/topologies/, each registering itself in category "topology".
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "network/generators.h"

namespace sluice::net {

Topology load_topology(const Node& spec, const Registry& reg, const std::string& path) {
  Node resolved;
  std::string display;
  if (spec.is_scalar()) {
    resolved = load_catalog_entry({"topologies"}, spec.scalar, spec.origin, path);
    display = spec.scalar;
  } else if (spec.is_map()) {
    if (const Node* base = spec.find("catalog")) {
      if (!base->is_scalar()) throw ConfigError(base->origin, path + ".catalog", base->brief(), "expected a catalog name", "one of: " + fmt::format("{}", fmt::join(catalog_names("topologies"), ", ")));
      resolved = load_catalog_entry({"topologies"}, base->scalar, base->origin, path + ".catalog");
      display = base->scalar;
      Node over = spec;
      for (size_t i = 0; i < over.map.size(); ++i)
        if (over.map[i].first == "catalog") {
          over.map.erase(over.map.begin() + static_cast<long>(i));
          over.key_origins.erase(over.key_origins.begin() + static_cast<long>(i));
          break;
        }
      resolved.merge(over);
    } else {
      resolved = spec;
    }
  } else {
    throw ConfigError(spec.origin, path, spec.brief(), "expected a topology name or mapping",
                      "one of: " + fmt::format("{}", fmt::join(catalog_names("topologies"), ", ")) + ", or {kind: GENERATOR, ...}");
  }
  auto parsed = reg.parse(resolved, "topology", path);
  if (parsed.params.has("name")) display = parsed.params.str("name");
  if (display.empty()) display = parsed.info->name;
  const auto& factory = reg.factory<TopologyFactory>(*parsed.info);
  try {
    Topology t = factory(parsed.params, display);
    t.check();
    return t;
  } catch (const TopologyError& e) {
    throw ConfigError(resolved.origin, path, display, fmt::format("invalid topology: {}", e.what()),
                      "a connected topology with every link between existing nodes and every switch within its radix");
  }
}

Topology load_topology_by_name(const std::string& name, const Registry& reg) {
  return load_topology(Node::scalar_node(name, Origin{"(command line)", 0, 0}), reg, "topology");
}

}  // namespace sluice::net
