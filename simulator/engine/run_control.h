// RunControl: the limits a whole run (every engine it drives) stops at — an event budget, a
// wall-clock budget, and an interrupt (SIGINT/SIGTERM) — checked by Engine::run. Process-wide
// on purpose: a signal reaches the process, not one engine, and a study may build several
// engines; it holds no simulation state, so two simulations in one process stay possible.
#pragma once
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace sluice {

// Thrown by Engine::run when the run must stop before its end; the CLI reports it and leaves
// no result directory (`reason` says which limit, for the message).
class RunStopped : public std::runtime_error {
 public:
  enum class Why { EventBudget, WallBudget, Interrupted };
  RunStopped(Why why, int signal_number, const std::string& what)
      : std::runtime_error(what), why_(why), signal_(signal_number) {}
  Why why() const { return why_; }
  int signal_number() const { return signal_; }

 private:
  Why why_;
  int signal_;
};

class RunControl {
 public:
  // The process's control: limits set by the CLI, the interrupt flag set by its signal handler.
  static RunControl& get() {
    static RunControl c;
    return c;
  }
  // 0 means no limit. The wall budget counts from this call.
  void set_limits(uint64_t max_events, double max_wall_s) {
    max_events_ = max_events;
    max_wall_s_ = max_wall_s;
    start_ = std::chrono::steady_clock::now();
    events_ = 0;
  }
  void clear() { set_limits(0, 0); }
  // How runs execute, not what they simulate: with fast-forward off, components that can run
  // uneventful stretches inline (the serving replicas' steady decode) run them event by event
  // instead. Results are the same either way; off is slower and serves to check that.
  void set_fast_forward(bool on) { fast_forward_ = on; }
  bool fast_forward() const { return fast_forward_; }
  // Sets fast-forward for a scope and restores it after (tests, benchmarks).
  struct FastForward {
    bool saved;
    explicit FastForward(bool on) : saved(get().fast_forward()) { get().set_fast_forward(on); }
    ~FastForward() { get().set_fast_forward(saved); }
    FastForward(const FastForward&) = delete;
    FastForward& operator=(const FastForward&) = delete;
  };
  // Async-signal-safe: only stores the number.
  static void interrupt(int signal_number) { get().interrupt_.store(signal_number, std::memory_order_relaxed); }
  int interrupted() const { return interrupt_.load(std::memory_order_relaxed); }
  void reset_interrupt() { interrupt_.store(0); }
  // Called by engines every few thousand events with how many ran since the last call.
  void check(uint64_t events_since_last) {
    // (atomic: band runs and sweep points on several threads add to the one budget)
    const uint64_t events = events_.fetch_add(events_since_last, std::memory_order_relaxed) + events_since_last;
    if (const int s = interrupted()) throw_interrupted(s);
    if (max_events_ && events > max_events_)
      throw RunStopped(RunStopped::Why::EventBudget, 0,
                       "stopped on the event budget (--max-events " + std::to_string(max_events_) + "): " +
                           std::to_string(events) + " events simulated");
    if (max_wall_s_ > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() > max_wall_s_)
      throw RunStopped(RunStopped::Why::WallBudget, 0,
                       "stopped on the wall-clock budget (--max-wall " + std::to_string(max_wall_s_) + " s) after " +
                           std::to_string(events) + " events");
  }
  // Throws if an interrupt arrived (for phases outside an engine: building, writing).
  void check_interrupt() const {
    if (const int s = interrupted()) throw_interrupted(s);
  }
  uint64_t events() const { return events_.load(std::memory_order_relaxed); }

 private:
  [[noreturn]] static void throw_interrupted(int s) {
    throw RunStopped(RunStopped::Why::Interrupted, s,
                     std::string("interrupted by ") + (s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : s == SIGHUP ? "SIGHUP" : "a signal"));
  }
  std::atomic<int> interrupt_{0};
  uint64_t max_events_ = 0;
  bool fast_forward_ = true;
  double max_wall_s_ = 0;
  std::atomic<uint64_t> events_{0};
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace sluice
