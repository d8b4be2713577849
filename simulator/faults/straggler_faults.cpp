// Fault process `straggler`: components of one class (a chip, or every chip of a host, node or
// rack) turn slow instead of failing: each computes `slowdown` times slower after a time drawn
// from its onset distribution, for a spell drawn from its duration distribution, again and
// again. A slow device slows every group it computes in: its stage of a training job takes its
// factor, and the data-parallel collectives make every replica wait for that stage. Each
// component draws from its own stream, named by the process and the component.
#include <fmt/format.h>

#include "faults/distribution.h"
#include "faults/targets.h"
#include "registry/registry.h"
#include "world/world.h"

namespace sluice::faults {

namespace {

class Stragglers final : public FaultProcess, public EventHandler {
 public:
  Stragglers(std::string name, FaultClass cls, double factor, Distribution onset, Distribution spell, std::vector<int> targets, int64_t start_ns)
      : name_(std::move(name)), cls_(cls), factor_(factor), onset_(onset), spell_(spell), targets_(std::move(targets)), start_ns_(start_ns) {}

  void start(World& w) override {
    world_ = &w;
    const auto& comps = w.components(cls_);
    rng_.reserve(targets_.size());
    for (int t : targets_) rng_.emplace_back(w.engine().seed(), fmt::format("straggler/{}/{}", name_, comps[static_cast<size_t>(t)].name));
    for (size_t i = 0; i < targets_.size(); ++i) schedule(i, start_ns_, onset_);
  }
  bool can_fail() const override { return false; }
  std::string describe() const override {
    return fmt::format("{}: {} {}s {}x slower ({}), for {}", name_, targets_.size(), fault_class_name(cls_), factor_, onset_.describe(),
                       spell_.describe());
  }
  void on_event(Engine&, uint32_t kind, uint32_t arg) override {
    const bool slow = kind == kSlow;
    world_->set_slowdown(world_->components(cls_)[static_cast<size_t>(targets_[arg])].devices, slow ? factor_ : 1.0);
    schedule(arg, world_->engine().now().count_ns(), slow ? spell_ : onset_);
  }

 private:
  enum : uint32_t { kSlow = 1, kRecover = 2 };
  void schedule(size_t i, int64_t from_ns, const Distribution& d) {
    const double s = d.draw(rng_[i]);
    if (!(s < 9e9)) return;  // beyond ~290 years: never within a run (a permanent straggler)
    const int64_t at = from_ns + std::max<int64_t>(1, static_cast<int64_t>(s * 1e9));
    world_->engine().schedule_at(SimTime::ns(at), Priority::Fault, this, &d == &onset_ ? kSlow : kRecover, static_cast<uint32_t>(i));
  }
  std::string name_;
  FaultClass cls_;
  double factor_;
  Distribution onset_, spell_;
  std::vector<int> targets_;
  int64_t start_ns_;
  World* world_ = nullptr;
  std::vector<RngStream> rng_;
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
