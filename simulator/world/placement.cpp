// Placement policies and the `place` section: explicit devices or servers, or a policy.
#include "world/placement.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "world/world.h"

namespace sluice {

std::vector<int> parse_index_list(const Node& n, const std::string& path, long limit) {
  std::vector<int> out;
  auto item = [&](const Node& e, const std::string& p) {
    if (!e.is_scalar()) throw ConfigError(e.origin, p, e.brief(), "expected an index or a range", "e.g. 3 or 0-7");
    const std::string& s = e.scalar;
    const auto dash = s.find('-', 1);
    auto lo = parse_int(dash == std::string::npos ? s : s.substr(0, dash));
    auto hi = dash == std::string::npos ? lo : parse_int(s.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo)
      throw ConfigError(e.origin, p, s, "not an index or a range of indices", "e.g. 3 or 0-7 (first <= last)");
    if (*hi >= limit)
      throw ConfigError(e.origin, p, s, fmt::format("beyond the cluster: it has {} of them", limit), fmt::format("indices in 0-{}", limit - 1));
    for (long long i = *lo; i <= *hi; ++i) out.push_back(static_cast<int>(i));
  };
  if (n.is_seq()) {
    for (size_t i = 0; i < n.seq.size(); ++i) item(n.seq[i], fmt::format("{}[{}]", path, i));
  } else {
    item(n, path);
  }
  std::vector<int> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw ConfigError(n.origin, path, n.brief(), "lists an index twice", "each index once");
  return out;
}

std::shared_ptr<Schema> placement_schema(const Registry& reg) {
  auto s = std::make_shared<Schema>();
  s->add("devices", ParamType::Any, "device indices (0-15, [0, 8-15]) or, with a policy, how many devices").optional();
  s->add("servers", ParamType::Any, "whole servers (or TPU cubes) by index: 0-1, [2, 5]").optional();
  s->enumeration("policy", [&] {
      std::vector<std::string> v;
      for (const auto* i : reg.in("placement")) v.push_back(i->name);
      return v;
    }(), "placement policy when `devices` is a count (or absent: as many as the workload needs)").def("first-fit");
  return s;
}

std::vector<int> place_devices(World& world, const Params& place, int needed, const std::string& who, const Registry& reg) {
  std::vector<int> devs;
  const bool explicit_devices = place.given("devices") && place.node("devices").is_seq();
  const Node* dn = place.given("devices") ? &place.node("devices") : nullptr;
  auto count = dn && dn->is_scalar() && dn->scalar.find('-') == std::string::npos ? parse_int(dn->scalar) : std::nullopt;
  if (place.given("servers")) {
    if (dn) place.fail("devices", "give devices or servers, not both", "one of the two");
    std::map<int, std::vector<int>> by;
    for (int d = 0; d < world.device_count(); ++d) by[world.group_of(d)].push_back(d);
    int groups = 0;
    for (const auto& [g, _] : by) groups = std::max(groups, g + 1);
    for (int g : parse_index_list(place.node("servers"), place.path() + ".servers", groups))
      for (int d : by[g]) devs.push_back(d);
  } else if (dn && (explicit_devices || !count)) {
    devs = parse_index_list(*dn, place.path() + ".devices", world.device_count());
  } else {
    const int n = count ? static_cast<int>(*count) : needed;
    if (n != needed)
      place.fail("devices", fmt::format("the workload needs {} devices", needed), fmt::format("{} (or leave it out)", needed));
    const auto& policy = reg.factory<PlacementPolicyFn>(*reg.find("placement", place.str("policy")));
    devs = policy(world, n);
    if (devs.empty()) {
      int free = 0;
      for (int d = 0; d < world.device_count(); ++d) free += world.holder(d).empty();
      throw ConfigError(place.origin(), place.path(), "",
                        fmt::format("{} cannot place {} devices for '{}': {} of {} are free", place.str("policy"), n, who, free,
                                    world.device_count()),
                        "fewer devices, or a larger cluster");
    }
  }
  if (static_cast<int>(devs.size()) != needed)
    throw ConfigError(place.origin(), place.path(), "", fmt::format("places {} devices, but '{}' needs {}", devs.size(), who, needed),
                      fmt::format("exactly {} devices", needed));
  try {
    world.claim(devs, who);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(place.origin(), place.path(), "", e.what(), "devices no other workload holds");
  }
  return devs;
}

namespace {

// Free devices grouped by server, in server order.
std::vector<std::pair<int, std::vector<int>>> free_by_group(const World& w) {
  std::map<int, std::vector<int>> by;
  for (int d = 0; d < w.device_count(); ++d)
    if (w.holder(d).empty()) by[w.group_of(d)].push_back(d);
  std::vector<std::pair<int, std::vector<int>>> out(by.begin(), by.end());
  return out;
}

int group_size(const World& w, int g) {
  int n = 0;
  for (int d = 0; d < w.device_count(); ++d) n += w.group_of(d) == g;
  return n;
}

}  // namespace

void register_placement_policies(Registry& reg) {
  reg.add("placement", "first-fit", "the lowest-index free devices, in device order", Schema{},
          PlacementPolicyFn([](const World& w, int n) {
            std::vector<int> out;
            for (int d = 0; d < w.device_count() && static_cast<int>(out.size()) < n; ++d)
              if (w.holder(d).empty()) out.push_back(d);
            if (static_cast<int>(out.size()) < n) out.clear();
            return out;
          }));
  reg.add("placement", "best-fit",
          "whole free servers first, then the fullest server that still fits the rest, so free servers stay whole",
          Schema{}, PlacementPolicyFn([](const World& w, int n) {
            std::vector<int> out;
            auto groups = free_by_group(w);
            // Whole free servers while a whole server fits.
            for (auto& [g, devs] : groups) {
              const int size = group_size(w, g);
              if (g >= 0 && static_cast<int>(devs.size()) == size && n - static_cast<int>(out.size()) >= size) {
                out.insert(out.end(), devs.begin(), devs.end());
                devs.clear();
              }
            }
            // The rest: the server with the fewest free devices that holds it, else greedily.
            while (static_cast<int>(out.size()) < n) {
              const int want = n - static_cast<int>(out.size());
              int best = -1;
              for (size_t i = 0; i < groups.size(); ++i) {
                const int f = static_cast<int>(groups[i].second.size());
                if (f >= want && (best < 0 || f < static_cast<int>(groups[static_cast<size_t>(best)].second.size()))) best = static_cast<int>(i);
              }
              if (best < 0) {  // no single server holds the rest: the fullest-free first
                for (size_t i = 0; i < groups.size(); ++i)
                  if (!groups[i].second.empty() &&
                      (best < 0 || groups[i].second.size() > groups[static_cast<size_t>(best)].second.size()))
                    best = static_cast<int>(i);
                if (best < 0) return std::vector<int>{};
              }
              auto& devs = groups[static_cast<size_t>(best)].second;
              const int take = std::min<int>(want, static_cast<int>(devs.size()));
              out.insert(out.end(), devs.begin(), devs.begin() + take);
              devs.erase(devs.begin(), devs.begin() + take);
            }
            return out;
          }));
}

}  // namespace sluice
