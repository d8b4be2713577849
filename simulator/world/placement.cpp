// Placement policies and the `place` section: explicit devices or servers, or a policy.
#include "world/placement.h"

#include <algorithm>
#include <array>
#include <bit>
#include <map>

#include <fmt/format.h>

#include "network/pod.h"
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
  s->add("slice", ParamType::List,
         "a TPU v4 pod slice in chips, e.g. [4, 4, 8]: any free cubes wired into its own torus with OCS, a contiguous "
         "block of free cubes on a static pod (the policy picks which)")
      .optional();
  s->add("twisted", ParamType::Bool,
         "wire an OCS slice as a twisted torus where its shape in chips allows (k×k×2k, k×2k×2k, k >= 3), as TPU v4 "
         "offers: shorter paths across (4x4x8: 6 hops instead of 8, for all-to-all), but a ring along a short dimension "
         "loses its one-hop closing link (world.slices in metrics.json says how each slice was wired)")
      .def("false");
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
  if (place.given("twisted") && !place.given("slice"))
    place.fail("twisted", "twists the wrap-around links of a TPU pod slice, and no slice is asked for", "a slice: [x, y, z], or leave it out");
  if (place.given("slice")) {
    if (dn || place.given("servers")) place.fail("slice", "give a slice, devices or servers, not several", "one of them");
    if (!world.slices().is_pod())
      place.fail("slice", fmt::format("slices are formed on a TPU v4 pod, and '{}' is not one", world.topology().name()),
                 "a cluster whose topology is tpu-v4-pod-ocs or tpu-v4-pod-static, or devices/servers");
    const Node& sn = place.node("slice");
    const int e = world.slices().cube_edge();
    const auto g = world.slices().grid();
    std::array<int, 3> cubes{};
    if (sn.seq.size() != 3) place.fail("slice", "expected 3 extents in chips", fmt::format("e.g. [{0}, {0}, {1}]", e, 2 * e));
    for (size_t i = 0; i < 3; ++i) {
      auto v = sn.seq[i].is_scalar() ? parse_int(sn.seq[i].scalar) : std::nullopt;
      if (!v || *v < e || *v % e != 0 || *v / e > std::max({g[0], g[1], g[2]}))
        throw ConfigError(sn.seq[i].origin, fmt::format("{}.slice[{}]", place.path(), i), sn.seq[i].brief(),
                          fmt::format("a slice extent is a multiple of the cube edge ({}) that fits the pod", e),
                          fmt::format("{}, {}, ... up to {}", e, 2 * e, e * std::max({g[0], g[1], g[2]})));
      cubes[i] = static_cast<int>(*v / e);
    }
    if (g[0] * g[1] * g[2] > 64)  // (a bit per cube: a larger pod, TPU v5p's 140 cubes, loads but cannot be sliced yet)
      place.fail("slice", fmt::format("the pod has {} cubes, and slices are placed on pods of at most 64 here", g[0] * g[1] * g[2]),
                 "a pod of at most 64 cubes, e.g. {catalog: tpu-v5p-pod, cubes: [4, 4, 4]}");
    uint64_t free = 0;
    std::vector<char> cube_free(static_cast<size_t>(g[0] * g[1] * g[2]), 1);
    for (int d = 0; d < world.device_count(); ++d)
      if (!world.holder(d).empty()) cube_free[static_cast<size_t>(world.group_of(d))] = 0;
    for (size_t c = 0; c < cube_free.size(); ++c)
      if (cube_free[c]) free |= uint64_t{1} << c;
    const net::PodAllocator alloc(g, world.slices().has_ocs(),
                                  place.str("policy") == "best-fit" ? net::PlacementPolicy::BestFit : net::PlacementPolicy::FirstFit);
    const net::CubeShape shape{cubes[0], cubes[1], cubes[2]};
    if (!alloc.feasible(shape))
      place.fail("slice", "this shape never fits the pod's cube grid", "a smaller slice");
    const auto mask = alloc.place(shape, free);
    if (!mask)
      place.fail("slice", fmt::format("no {} of free cubes for '{}' ({} of {} cubes free)",
                                      world.slices().has_ocs() ? "set" : "contiguous block", who, std::popcount(free), cube_free.size()),
                 "a smaller slice, or fewer other workloads on the pod");
    std::vector<int> chosen;
    for (uint64_t r = *mask; r; r &= r - 1) chosen.push_back(std::countr_zero(r));
    if (place.flag("twisted") && !world.slices().has_ocs())
      place.fail("twisted", "a static pod's slice is a block of its fixed torus: only an OCS pod wires a slice's links",
                 "false, or a tpu-v4-pod-ocs topology");
    devs = world.slices().form(chosen, cubes, place.flag("twisted"), who);
  } else if (place.given("servers")) {
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

SLUICE_REGISTER(component, placement_policies) {
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
