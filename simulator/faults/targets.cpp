#include "faults/targets.h"

#include <fmt/format.h>

#include "config/error.h"

namespace sluice::faults {

std::vector<int> fault_targets(const Params& p, World& w, FaultClass cls) {
  const auto& comps = w.components(cls);
  if (comps.empty()) p.fail("component", fmt::format("the cluster '{}' has no {}", w.topology().name(), p.str("component")), "a class the cluster has");
  std::vector<int> targets;
  if (p.has("only")) {
    const Node& n = p.node("only");
    if (!n.is_seq() || n.seq.empty()) p.fail("only", "expected a list of component names", fmt::format("e.g. [{}]", comps.front().name));
    for (size_t i = 0; i < n.seq.size(); ++i) {
      const int k = w.find_component(cls, n.seq[i].scalar);
      if (k < 0)
        throw ConfigError(n.seq[i].origin, fmt::format("{}.only[{}]", p.path(), i), n.seq[i].brief(), fmt::format("no {} of that name", p.str("component")),
                          fmt::format("a name such as {}{}", comps.front().name, comps.size() > 1 ? ", " + comps.back().name : ""));
      targets.push_back(k);
    }
  } else {
    for (size_t i = 0; i < comps.size(); ++i) targets.push_back(static_cast<int>(i));
  }
  return targets;
}

}  // namespace sluice::faults
