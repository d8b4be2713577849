// Fault process `random`: every component of one class fails after a time to failure drawn
// from its lifetime distribution (exponential MTBF or Weibull) and comes back after a repair
// time (fixed, exponential or lognormal), again and again. Each component draws from its own
// stream, named by the process and the component, so adding a process or a component never
// changes the draws of another.
#include <fmt/format.h>

#include "faults/distribution.h"
#include "faults/targets.h"
#include "registry/registry.h"
#include "world/world.h"

namespace sluice::faults {

namespace {

class RandomFaults final : public FaultProcess, public EventHandler {
 public:
  RandomFaults(std::string name, FaultClass cls, Distribution ttf, Distribution repair, std::vector<int> targets, int64_t start_ns)
      : name_(std::move(name)), cls_(cls), ttf_(ttf), repair_(repair), targets_(std::move(targets)), start_ns_(start_ns) {}

  void start(World& w) override {
    world_ = &w;
    const auto& comps = w.components(cls_);
    rng_.reserve(targets_.size());
    for (int t : targets_) rng_.emplace_back(w.engine().seed(), fmt::format("fault/{}/{}", name_, comps[static_cast<size_t>(t)].name));
    for (size_t i = 0; i < targets_.size(); ++i) schedule(i, start_ns_, ttf_);
  }
  std::string describe() const override {
    return fmt::format("{}: {} {}s fail ({}), repair {}", name_, targets_.size(), fault_class_name(cls_), ttf_.describe(), repair_.describe());
  }
  void on_event(Engine&, uint32_t kind, uint32_t arg) override {
    const bool fail = kind == kFail;
    world_->set_component(cls_, targets_[arg], fail, name_);
    schedule(arg, world_->engine().now().count_ns(), fail ? repair_ : ttf_);
  }

 private:
  enum : uint32_t { kFail = 1, kRepair = 2 };
  void schedule(size_t i, int64_t from_ns, const Distribution& d) {
    const double s = d.draw(rng_[i]);
    // Draws beyond ~290 years never happen within a run: not scheduled at all.
    if (!(s < 9e9)) return;
    const int64_t at = from_ns + std::max<int64_t>(1, static_cast<int64_t>(s * 1e9));
    world_->engine().schedule_at(SimTime::ns(at), Priority::Fault, this, &d == &ttf_ ? kFail : kRepair, static_cast<uint32_t>(i));
  }
  std::string name_;
  FaultClass cls_;
  Distribution ttf_, repair_;
  std::vector<int> targets_;
  int64_t start_ns_;
  World* world_ = nullptr;
  std::vector<RngStream> rng_;
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
