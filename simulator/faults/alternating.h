// A fault process whose components alternate between two states: working and failed (random
// failures), full speed and slow (stragglers). Each stay is drawn from its state's
// distribution, again and again; each component draws from its own stream, named
// "<stream>/<process>/<component>", so adding a process or a component never changes the
// draws of another. A subclass says what entering and leaving the second state does.
#pragma once
#include <string>
#include <vector>

#include <fmt/format.h>

#include "faults/distribution.h"
#include "world/world.h"

namespace sluice::faults {

class Alternating : public FaultProcess, public EventHandler {
 public:
  Alternating(std::string stream, std::string name, FaultClass cls, Distribution until_on, Distribution until_off, std::vector<int> targets,
              int64_t start_ns)
      : stream_(std::move(stream)), name_(std::move(name)), cls_(cls), until_on_(until_on), until_off_(until_off), targets_(std::move(targets)),
        start_ns_(start_ns) {}

  void start(World& w) override {
    world_ = &w;
    const auto& comps = w.components(cls_);
    rng_.reserve(targets_.size());
    for (int t : targets_) rng_.emplace_back(w.engine().seed(), fmt::format("{}/{}/{}", stream_, name_, comps[static_cast<size_t>(t)].name));
    for (size_t i = 0; i < targets_.size(); ++i) schedule(i, start_ns_, until_on_);
  }
  void on_event(Engine&, uint32_t kind, uint32_t arg) override {
    const bool on = kind == kOn;
    apply(targets_[arg], on);
    schedule(arg, world_->engine().now().count_ns(), on ? until_off_ : until_on_);
  }

 protected:
  enum : uint32_t { kOn = 1, kOff = 2 };
  // Component `target` of the class enters (`on`) or leaves the second state.
  virtual void apply(int target, bool on) = 0;
  std::string stream_, name_;
  FaultClass cls_;
  Distribution until_on_, until_off_;
  std::vector<int> targets_;
  int64_t start_ns_;
  World* world_ = nullptr;

 private:
  void schedule(size_t i, int64_t from_ns, const Distribution& d) {
    const double s = d.draw(rng_[i]);
    // Draws beyond ~290 years never happen within a run: not scheduled at all.
    if (!(s < 9e9)) return;
    const int64_t at = from_ns + std::max<int64_t>(1, static_cast<int64_t>(s * 1e9));
    world_->engine().schedule_at(SimTime::ns(at), Priority::Fault, this, &d == &until_on_ ? kOn : kOff, static_cast<uint32_t>(i));
  }
  std::vector<RngStream> rng_;
};

}  // namespace sluice::faults
