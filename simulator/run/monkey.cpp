#include "run/monkey.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/error.h"
#include "engine/engine.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "engine/stall.h"

namespace sluice {

namespace {

struct Outcome {
  std::string kind, message;
};

Outcome run_once(const std::string& file, const std::vector<std::string>& sets, const Registry& reg, uint64_t max_events, Json* metrics) {
  auto& control = RunControl::get();
  control.set_limits(max_events, 0);
  try {
    Scenario sc = load_scenario(file, sets, reg);
    Recorder rec;
    run_into(sc, rec, {});
    control.clear();
    if (metrics) *metrics = rec.metrics();
    return {"ok", ""};
  } catch (const RunStopped& e) {
    control.clear();
    if (e.why() == RunStopped::Why::Interrupted) throw;
    return {"hang", e.what()};
  } catch (const ConfigError& e) {
    control.clear();
    return {"crash", std::string("configuration error: ") + e.what()};
  } catch (const WorkloadStalled& e) {  // the scenario never repairs what failed: its property, not a defect
    control.clear();
    return {"stall", e.what()};
  } catch (const std::logic_error& e) {  // invariants, time faults
    control.clear();
    return {"invariant", e.what()};
  } catch (const std::exception& e) {
    control.clear();
    return {"crash", e.what()};
  }
}

}  // namespace

MonkeyReport run_monkey(const std::string& file, const std::vector<std::string>& sets, const Registry& reg, const MonkeyOptions& o,
                        const std::function<void(const MonkeyRun&, int, int)>& progress) {
  MonkeyReport rep;
  // The components, from the world the scenario builds: known (and refused when there are
  // none) before the baseline runs.
  Scenario sc = load_scenario(file, sets, reg);
  const auto what = sc.world->fault_targets();
  if (!what) throw ConfigError(Origin{file, 0, 0}, "", "", "the monkey runs world scenarios, and this is not one", "a scenario with cluster: and workloads:");
  std::string class_names;
  for (const auto& [cname, comps] : what->classes) class_names += (class_names.empty() ? "" : ", ") + cname;
  for (const auto& cl : o.classes)
    if (std::none_of(what->classes.begin(), what->classes.end(), [&](const auto& c) { return c.first == cl; }))
      throw ConfigError(Origin{"--classes", 0, 0}, "--classes", cl, "not a component class", class_names);
  std::vector<std::string> targets;
  for (const auto& [cname, comps] : what->classes) {
    if (!o.classes.empty() && std::find(o.classes.begin(), o.classes.end(), cname) == o.classes.end()) continue;
    if (comps.empty()) continue;
    const size_t n = comps.size(), k = o.per_class > 0 ? std::min(n, static_cast<size_t>(o.per_class)) : n;
    for (size_t i = 0; i < k; ++i) targets.push_back(cname + ":" + comps[i * n / k]);
  }
  // A monkey that fails nothing would report a clean bill after 0 runs.
  if (targets.empty())
    throw ConfigError(Origin{file, 0, 0}, "--classes", o.classes.empty() ? "" : fmt::format("{}", fmt::join(o.classes, ",")),
                      fmt::format("the cluster '{}' has no component of {} to fail", what->cluster, o.classes.empty() ? "any class" : "these classes"),
                      "classes the cluster has (see `sluice topo`)");

  // The baseline: its length spreads the failure instants, its events size the hang budget.
  Json m;
  const Outcome base = run_once(file, sets, reg, 0, &m);
  if (base.kind != "ok") throw std::runtime_error(fmt::format("the scenario fails without any injected fault: {}", base.message));
  const Json* sim = json_path(m, "world.simulated_s");
  const Json* ev = json_path(m, "world.events");
  if (!sim || !ev) throw std::runtime_error("the monkey runs world scenarios (cluster: and workloads:), and this is not one");
  rep.baseline_s = sim->get<double>();
  rep.baseline_events = ev->get<uint64_t>();
  const uint64_t budget = static_cast<uint64_t>(o.event_factor * static_cast<double>(rep.baseline_events)) + 100000;
  const int total = static_cast<int>(targets.size()) * o.instants;
  for (const auto& t : targets)
    for (int i = 0; i < o.instants; ++i) {
      const double at = rep.baseline_s * (i + 1) / (o.instants + 1);
      const int64_t at_ns = std::max<int64_t>(0, std::llround(at * 1e9));
      std::string events = fmt::format("\"{}ns {} down\"", at_ns, t);
      if (o.repair_after_s > 0) events += fmt::format(", \"{}ns {} up\"", at_ns + std::llround(o.repair_after_s * 1e9), t);
      auto s2 = sets;
      s2.push_back(fmt::format("faults=[{{kind: trace, name: monkey, events: [{}]}}]", events));
      const Outcome out = run_once(file, s2, reg, budget, nullptr);
      MonkeyRun r{t, at, out.kind, out.message};
      ++rep.runs;
      rep.hangs += out.kind == "hang";
      rep.crashes += out.kind == "crash";
      rep.invariants += out.kind == "invariant";
      rep.stalls += out.kind == "stall";
      rep.all.push_back(r);
      if (progress) progress(r, rep.runs, total);
    }
  return rep;
}

}  // namespace sluice
