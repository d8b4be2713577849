// `sluice bench engine`: the hold model. Each event schedules one successor at a random
// delay, so the number of pending events stays constant; reports events per second at
// 1,000 and 100,000 pending, beside a plain binary heap of function pointers as baseline.
#include <chrono>
#include <cstdio>
#include <queue>
#include <vector>

#include <fmt/format.h>

#include "engine/engine.h"
#include "registry/registry.h"

namespace sluice {

namespace {

// The delay of the next event: uniform in [1, 2000] ns, or exponential with mean 1000 ns
// (the classic hold model; its long tail spreads the heap and costs more cache misses).
enum class Delay { Uniform, Exponential };
inline int64_t draw(RngStream& r, Delay d) {
  return d == Delay::Uniform ? static_cast<int64_t>(r.below(2000)) + 1
                             : static_cast<int64_t>(r.exponential(1000.0)) + 1;
}

class HoldModel final : public EventHandler {
 public:
  HoldModel(uint64_t seed, Delay d) : rng_(seed, "bench.hold"), delay_(d) {}
  void on_event(Engine& e, uint32_t, uint32_t arg) override {
    e.schedule_in(SimTime::ns(draw(rng_, delay_)), Priority::Default, this, 0, arg);
  }
  RngStream rng_;
  Delay delay_;
};

double run_engine(size_t pending, uint64_t events, Delay d) {
  Engine engine(42);
  engine.reserve(pending + 1);
  HoldModel model(42, d);
  for (size_t i = 0; i < pending; ++i) engine.schedule_at(SimTime::ns(draw(model.rng_, d)), Priority::Default, &model, 0, 0);
  for (uint64_t i = 0; i < events / 10; ++i) engine.step();  // warm up
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < events; ++i) engine.step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(events) / s;
}

// The baseline the issue quotes: std::priority_queue (binary heap) with function pointers.
struct BaseEvent {
  int64_t t;
  uint64_t seq;
  void (*fn)(BaseEvent&);
  bool operator>(const BaseEvent& o) const { return t > o.t || (t == o.t && seq > o.seq); }
};
struct BaseSim {
  std::priority_queue<BaseEvent, std::vector<BaseEvent>, std::greater<>> q;
  RngStream rng{42, "bench.base"};
  uint64_t seq = 0;
  int64_t now = 0;
  Delay delay = Delay::Uniform;
};
BaseSim* g_base = nullptr;
void base_handler(BaseEvent&) {
  g_base->q.push(BaseEvent{g_base->now + draw(g_base->rng, g_base->delay), g_base->seq++, &base_handler});
}
double run_baseline(size_t pending, uint64_t events, Delay d) {
  BaseSim sim;
  sim.delay = d;
  g_base = &sim;
  for (size_t i = 0; i < pending; ++i) sim.q.push(BaseEvent{draw(sim.rng, d), sim.seq++, &base_handler});
  auto step = [&] {
    BaseEvent e = sim.q.top();
    sim.q.pop();
    sim.now = e.t;
    e.fn(e);
  };
  for (uint64_t i = 0; i < events / 10; ++i) step();
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < events; ++i) step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  g_base = nullptr;
  return static_cast<double>(events) / s;
}

int bench_engine(bool quick) {
  std::printf("bench engine: hold model (each event schedules one successor at a random delay)\n");
  std::printf("  %-12s %-10s %16s %22s %8s\n", "delay", "pending", "sluice events/s", "binary-heap+fnptr /s", "ratio");
  for (Delay d : {Delay::Uniform, Delay::Exponential})
    for (size_t pending : {size_t{1000}, size_t{100000}}) {
      const uint64_t n = quick ? 1'000'000 : 20'000'000;
      const double ours = run_engine(pending, n, d);
      const double base = run_baseline(pending, n, d);
      std::printf("  %-12s %-10zu %14.2f M %20.2f M %7.2fx\n", d == Delay::Uniform ? "uniform" : "exponential", pending,
                  ours / 1e6, base / 1e6, ours / base);
    }
  return 0;
}

}  // namespace

SLUICE_REGISTER(bench, engine_bench) {
  reg.add("bench", "engine", "events/s of the event queue under the hold model at 1k and 100k pending events", Schema{},
          BenchFn(bench_engine));
}

}  // namespace sluice
