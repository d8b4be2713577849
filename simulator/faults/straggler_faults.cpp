// Fault process `straggler`: components of one class (a chip, or every chip of a host, node or
// rack) turn slow instead of failing: each computes `slowdown` times slower after a time drawn
// from its onset distribution, for a spell drawn from its duration distribution, again and
// again. A slow device slows every group it computes in: its stage of a training job takes its
// factor, and the data-parallel collectives make every replica wait for that stage. Each
// component draws from its own stream, named by the process and the component.
#include <fmt/format.h>

#include "faults/alternating.h"
#include "faults/distribution.h"
#include "faults/targets.h"
#include "registry/registry.h"
#include "world/world.h"

namespace sluice::faults {

namespace {

class Stragglers final : public Alternating {
 public:
  Stragglers(std::string name, FaultClass cls, double factor, Distribution onset, Distribution spell, std::vector<int> targets, int64_t start_ns)
      : Alternating("straggler", std::move(name), cls, onset, spell, std::move(targets), start_ns), factor_(factor) {}
  bool can_fail() const override { return false; }
  std::string describe() const override {
    return fmt::format("{}: {} {}s {}x slower ({}), for {}", name_, targets_.size(), fault_class_name(cls_), factor_, until_on_.describe(),
                       until_off_.describe());
  }

 private:
  void apply(int target, bool on) override {
    world_->set_slowdown(world_->components(cls_)[static_cast<size_t>(target)].devices, on ? factor_ : 1.0);
  }
  double factor_;
};

}  // namespace

SLUICE_REGISTER(component, straggler_faults) {
  Schema s;
  s.add("name", ParamType::String, "the process's name (its random streams are named by it)").def("stragglers");
  s.enumeration("component", {"chip", "host", "node", "rack"}, "what turns slow: a chip, or every chip of a host, a node (server) or a rack");
  s.add("slowdown", ParamType::Real, "how many times longer the slow devices' computations take (1.5: a third less throughput)")
      .range(1.0001, 1000);
  s.section("onset", distribution_schema(true), "time from full speed to the next slow spell of each component");
  s.section("duration", distribution_schema(false), "how long a slow spell lasts (fixed 100000d: for good)");
  s.add("only", ParamType::List, "the components that turn slow, by name (default: every one of the class)").optional();
  s.quantity("start", UnitKind::Time, "spells begin after this time").def("0s").nonneg();
  reg.add("fault", "straggler",
          "components of one class turn slow for spells instead of failing (a straggler slows every group it computes in): "
          "exponential/Weibull/fixed onsets, fixed/exponential/lognormal durations",
          std::move(s), FaultProcessFactory([](const Params& p, World& w, const std::string& name) -> std::unique_ptr<FaultProcess> {
            const FaultClass cls = *parse_fault_class(p.str("component"));
            std::vector<int> targets = fault_targets(p, w, cls);
            const std::string pname = p.given("name") ? p.str("name") : name;
            return std::make_unique<Stragglers>(pname, cls, p.real("slowdown"), distribution_from_params(p.section("onset")),
                                                distribution_from_params(p.section("duration")), std::move(targets), p.time("start").count_ns());
          }));
}

}  // namespace sluice::faults
