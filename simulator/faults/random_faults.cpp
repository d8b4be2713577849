// Fault process `random`: every component of one class fails after a time to failure drawn
// from its lifetime distribution (exponential MTBF or Weibull) and comes back after a repair
// time (fixed, exponential or lognormal), again and again. Each component draws from its own
// stream, named by the process and the component, so adding a process or a component never
// changes the draws of another.
#include <fmt/format.h>

#include "faults/alternating.h"
#include "faults/distribution.h"
#include "faults/targets.h"
#include "registry/registry.h"
#include "world/world.h"

namespace sluice::faults {

namespace {

class RandomFaults final : public Alternating {
 public:
  RandomFaults(std::string name, FaultClass cls, Distribution ttf, Distribution repair, std::vector<int> targets, int64_t start_ns)
      : Alternating("fault", std::move(name), cls, ttf, repair, std::move(targets), start_ns) {}
  std::optional<std::pair<FaultClass, int>> failing(uint32_t kind, uint32_t arg) const override {
    if (kind != kOn || arg >= targets_.size()) return std::nullopt;
    return std::pair{cls_, targets_[arg]};
  }
  std::string describe() const override {
    return fmt::format("{}: {} {}s fail ({}), repair {}", name_, targets_.size(), fault_class_name(cls_), until_on_.describe(), until_off_.describe());
  }

 private:
  void apply(int target, bool on) override { world_->set_component(cls_, target, on, name_); }
};

std::vector<std::string> class_names() {
  std::vector<std::string> v;
  for (int c = 0; c < kFaultClasses; ++c) v.emplace_back(fault_class_name(static_cast<FaultClass>(c)));
  return v;
}

}  // namespace

SLUICE_REGISTER(component, random_faults) {
  Schema s;
  s.add("name", ParamType::String, "the process's name (its random streams are named by it)").def("faults");
  s.enumeration("component", class_names(), "what fails: a chip, a host (its chips), a node (server or TPU cube), a rack, a link, a switch (its links), an OCS (its circuits)");
  s.section("ttf", distribution_schema(true), "time to failure of each component");
  s.section("repair", distribution_schema(false), "time to repair");
  s.add("only", ParamType::List, "the components that fail, by name (default: every one of the class)").optional();
  s.quantity("start", UnitKind::Time, "failures begin after this time").def("0s").nonneg();
  reg.add("fault", "random", "components of one class fail and are repaired at random: exponential/Weibull lifetimes, fixed/exponential/lognormal repairs",
          std::move(s), FaultProcessFactory([](const Params& p, World& w, const std::string& name) -> std::unique_ptr<FaultProcess> {
            const FaultClass cls = *parse_fault_class(p.str("component"));
            std::vector<int> targets = fault_targets(p, w, cls);
            const std::string pname = p.given("name") ? p.str("name") : name;
            return std::make_unique<RandomFaults>(pname, cls, distribution_from_params(p.section("ttf")), distribution_from_params(p.section("repair")),
                                                  std::move(targets), p.time("start").count_ns());
          }));
}

}  // namespace sluice::faults
