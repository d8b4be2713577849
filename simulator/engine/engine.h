// The engine: a clock, an event queue and the run seed. Passed explicitly; there is no global.
#pragma once
#include <functional>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "engine/event_queue.h"
#include "engine/rng.h"
#include "engine/run_control.h"
#include "engine/simtime.h"

namespace sluice {

// Raised when an event would run in the past: a bug in a component, never silently allowed.
class TimeFault : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Watches every event as the engine delivers it (before its handler runs): a training job
// taping an iteration it may later stand for in part (workloads/training/training_tape.cpp).
class EventTap {
 public:
  virtual ~EventTap() = default;
  virtual void before_event(int64_t t_ns) = 0;
};

// A pending event as another handler may see it (Engine::next_other_event).
struct PendingEvent {
  int64_t time_ns = 0;
  Priority priority = Priority::Default;
  const EventHandler* target = nullptr;
  uint32_t kind = 0, arg = 0;
};

class Engine {
 public:
  explicit Engine(uint64_t seed) : seed_(seed) {}
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  SimTime now() const { return now_; }
  uint64_t seed() const { return seed_; }
  // The random stream of one component, derived from (run seed, component id).
  RngStream rng(std::string_view component) const { return RngStream(seed_, component); }

  // An event is (kind, arg) for its handler, and the generation it was scheduled under.
  // Kinds are below 256 (kMaxKind). A handler whose work in flight can be voided (a failure, a
  // rate change, a cancelled timer) keeps a counter, schedules with Generation{counter}, bumps
  // the counter to void what is pending, and on delivery compares event_generation() with it:
  // the engine keeps the identity, no workload packs bits of its own into a kind.
  void schedule_at(SimTime t, Priority p, EventHandler* target, uint32_t kind, uint32_t arg = 0, Generation gen = {}) {
    if (t < now_) time_fault(t);
    if (kind > kMaxKind) kind_fault(kind);
    queue_.push(t, p, target, kind | (gen.value << kKindBits), arg);
  }
  void schedule_in(SimTime delay, Priority p, EventHandler* target, uint32_t kind, uint32_t arg = 0, Generation gen = {}) {
    schedule_at(now_ + delay, p, target, kind, arg, gen);
  }
  // The generation the event being delivered was scheduled under (24 bits of it).
  Generation event_generation() const { return Generation{event_generation_}; }

  // Runs one event; false when none is left.
  bool step() {
    if (queue_.empty()) return false;
    const Event e = queue_.pop();
    if (e.time_ns() < now_.count_ns()) time_fault(SimTime::ns(e.time_ns()));
    now_ = SimTime::ns(e.time_ns());
    if (tap_) [[unlikely]]
      tap_->before_event(e.time_ns());
    ++processed_;
    event_generation_ = e.kind >> kKindBits;
    e.target->on_event(*this, e.kind & kMaxKind, e.arg);
    return true;
  }
  // Runs until the queue drains, stop() is called, or the next event is after `until`.
  // Every 4096 events the run's budgets and interrupt are checked (RunStopped on either).
  void run(SimTime until = SimTime::max()) {
    stopped_ = false;
    until_ = until.count_ns();
    struct Horizon {  // back to none however run() ends (a budget or a fault throws)
      int64_t& h;
      ~Horizon() { h = SimTime::max().count_ns(); }
    } horizon{until_};
    auto& control = RunControl::get();
    // The budget counts every event processed, those a handler did inline included.
    uint64_t checked = processed_;
    while (!stopped_ && !queue_.empty() && queue_.top().time_ns() <= until.count_ns()) {
      step();
      if (processed_ - checked >= 4096) {
        control.check(processed_ - checked);
        checked = processed_;
      }
    }
    control.check(processed_ - checked);
    // Cut at the horizon with work still due after it: the run simulated up to the horizon.
    if (!stopped_ && !queue_.empty() && until_ > now_.count_ns()) now_ = SimTime::ns(until_);
  }
  // True when the run goes on and no event is due at or before `t_ns`: what a handler does
  // at now() with nothing else due at this instant is what a zero-delay event would have
  // done when popped (a stopped run pops nothing more).
  bool nothing_due_by(int64_t t_ns) const { return !stopped_ && (queue_.empty() || queue_.top().time_ns() > t_ns); }
  // A handler did inline the work of an event it would otherwise have scheduled for now()
  // (see nothing_due_by): counted as processed, so event counts do not depend on it.
  void count_inline_event() { ++processed_; }
  // A handler stood for `n` events it did not schedule (a training job's repeated iterations,
  // see workloads/training): counted as processed, so event counts do not depend on it.
  void count_inline_events(uint64_t n) { processed_ += n; }
  // The earliest pending event another handler than `self` will receive (INT64_MAX: none). A
  // handler alone in the world until then can know what happens before it.
  // Void events (EventHandler::is_void) are not counted: they will do nothing.
  int64_t next_event_excluding(const EventHandler* self) const { return queue_.earliest_excluding(self, kKindBits); }
  // The first pending event in the run's order that another handler than `self` will
  // receive and that is not void, if any: what acts next in the world besides `self`.
  std::optional<PendingEvent> next_other_event(const EventHandler* self) const {
    const Event* e = queue_.first_excluding(self, kKindBits);
    if (!e) return std::nullopt;
    return PendingEvent{e->time_ns(), static_cast<Priority>((e->order() >> 56) & 0xFF), e->target, e->kind & kMaxKind, e->arg};
  }
  // At most one tap (nullptr: none).
  void set_tap(EventTap* tap) { tap_ = tap; }
  EventTap* tap() const { return tap_; }
  // A handler that received a void event (one superseded before it came due: a flow's
  // completion after its rate changed, a job's step from before a failure) says so: it is
  // not counted as processed. The events a run reports are the ones that did something, so
  // they do not depend on how many superseded timers a shortcut never created.
  void discount_void_event() { --processed_; }
  // The horizon of the run in progress (SimTime::max() when none): no event after it runs.
  int64_t horizon_ns() const { return until_; }
  // Fast-forward: a handler that knows what it alone would do up to `t_ns` (nothing else is
  // due by then, and the run's horizon is not passed) may advance the clock there and do it
  // inline, counting each event it stands for. can_advance_to says whether it may.
  bool can_advance_to(int64_t t_ns) const { return t_ns <= until_ && t_ns >= now_.count_ns() && nothing_due_by(t_ns); }
  void advance_to(int64_t t_ns) {
    if (!can_advance_to(t_ns)) throw std::logic_error("internal: the clock was advanced past a due event or the run's horizon");
    now_ = SimTime::ns(t_ns);
  }
  void stop() { stopped_ = true; }
  size_t pending() const { return queue_.size(); }
  uint64_t events_processed() const { return processed_; }
  void reserve(size_t n) { queue_.reserve(n); }

 private:
  [[noreturn]] void time_fault(SimTime t) const;
  [[noreturn]] static void kind_fault(uint32_t kind);
  EventQueue queue_;
  uint32_t event_generation_ = 0;
  SimTime now_ = SimTime::zero();
  uint64_t seed_;
  uint64_t processed_ = 0;
  bool stopped_ = false;
  EventTap* tap_ = nullptr;
  int64_t until_ = SimTime::max().count_ns();  // the horizon of the run in progress
};

}  // namespace sluice
