// Engine: time arithmetic and overflow, event ordering and tie-breaks, RNG stream independence.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <vector>

#include "engine/engine.h"
#include "engine/round.h"

using namespace sluice;

TEST_CASE("SimTime arithmetic is exact and overflow is detected, not wrapped") {
  CHECK((SimTime::ns(5) + SimTime::ns(7)).count_ns() == 12);
  CHECK((SimTime::us(1.5)).count_ns() == 1500);
  CHECK((SimTime::ms(2)).count_ns() == 2'000'000);
  CHECK((SimTime::seconds(3600.0 * 2000)).count_ns() == 7'200'000'000'000'000LL);
  CHECK((SimTime::ns(10) - SimTime::ns(3)).count_ns() == 7);
  CHECK((SimTime::ns(4) * 3).count_ns() == 12);
  CHECK(SimTime::ns(1) < SimTime::ns(2));
  CHECK_THROWS_AS(SimTime::max() + SimTime::ns(1), SimTimeOverflow);
  CHECK_THROWS_AS(SimTime::ns(INT64_MIN) - SimTime::ns(1), SimTimeOverflow);
  CHECK_THROWS_AS(SimTime::max() * 2, SimTimeOverflow);
  CHECK_THROWS_AS(SimTime::seconds(1e12), SimTimeOverflow);  // ~31,700 years
  CHECK_NOTHROW(SimTime::seconds(9.0e9));                     // ~285 years fits
  CHECK(SimTime::ms(1.5).str() == "1.500ms");
  CHECK(SimTime::ns(12).str() == "12ns");
}

namespace {
struct Log final : EventHandler {
  std::vector<uint32_t> seen;
  std::vector<int64_t> times;
  std::vector<uint32_t> args;
  void on_event(Engine& e, uint32_t kind, uint32_t arg) override {
    seen.push_back(kind);
    args.push_back(arg);
    times.push_back(e.now().count_ns());
  }
};
struct Chain final : EventHandler {
  int left = 0;
  void on_event(Engine& e, uint32_t, uint32_t) override {
    if (left-- > 0) e.schedule_in(SimTime::ns(10), Priority::Default, this, 0);
  }
};
struct Backwards final : EventHandler {
  void on_event(Engine& e, uint32_t, uint32_t) override { e.schedule_at(SimTime::ns(1), Priority::Default, this, 0); }
};
}  // namespace

TEST_CASE("events run in (time, priority class, insertion order)") {
  Engine e(1);
  Log log;
  e.schedule_at(SimTime::ns(20), Priority::Default, &log, 1);
  e.schedule_at(SimTime::ns(10), Priority::Stats, &log, 2);
  e.schedule_at(SimTime::ns(10), Priority::Fault, &log, 3);
  e.schedule_at(SimTime::ns(10), Priority::Default, &log, 4);
  e.schedule_at(SimTime::ns(10), Priority::Default, &log, 5);
  e.schedule_at(SimTime::ns(5), Priority::Stats, &log, 6);
  e.run();
  CHECK(log.seen == std::vector<uint32_t>{6, 3, 4, 5, 2, 1});
  CHECK(log.times == std::vector<int64_t>{5, 10, 10, 10, 10, 20});
  CHECK(e.events_processed() == 6);
}

TEST_CASE("many simultaneous events keep insertion order (heap is stable under the total order)") {
  Engine e(1);
  Log log;
  for (uint32_t i = 0; i < 1000; ++i) e.schedule_at(SimTime::ns(7), Priority::Default, &log, 0, i);
  e.run();
  REQUIRE(log.args.size() == 1000);
  for (uint32_t i = 0; i < 1000; ++i) CHECK(log.args[i] == i);
}

TEST_CASE("the queue pops in non-decreasing order under random load") {
  Engine e(3);
  Log log;
  RngStream r(3, "t");
  for (int i = 0; i < 20000; ++i) e.schedule_at(SimTime::ns(static_cast<int64_t>(r.below(5000))), Priority(r.below(8)), &log, 0);
  e.run();
  for (size_t i = 1; i < log.times.size(); ++i) REQUIRE(log.times[i - 1] <= log.times[i]);
}

TEST_CASE("time never goes backwards: scheduling in the past is a time fault") {
  Engine e(1);
  Backwards b;
  e.schedule_at(SimTime::ns(5), Priority::Default, &b, 0);
  CHECK_THROWS_AS(e.run(), TimeFault);
}

TEST_CASE("run(until) stops before later events / stop() halts") {
  Engine e(1);
  Chain c;
  c.left = 100;
  e.schedule_at(SimTime::zero(), Priority::Default, &c, 0);
  e.run(SimTime::ns(50));
  CHECK(e.now().count_ns() == 50);
  CHECK(e.pending() == 1);
  e.run();
  CHECK(e.now().count_ns() == 1000);  // 100 successors, 10 ns apart
}

TEST_CASE("RNG streams depend on (seed, component) only") {
  RngStream a1(42, "workload"), a2(42, "workload"), b(42, "router"), c(43, "workload");
  std::vector<uint64_t> x, y, z, w;
  for (int i = 0; i < 100; ++i) { x.push_back(a1.next_u64()); y.push_back(a2.next_u64()); z.push_back(b.next_u64()); w.push_back(c.next_u64()); }
  CHECK(x == y);
  CHECK(x != z);
  CHECK(x != w);
  // Creating and drawing from another component's stream does not shift this one's draws.
  Engine e(42);
  auto s1 = e.rng("workload");
  auto other = e.rng("new-component");
  for (int i = 0; i < 10; ++i) other.next_u64();
  auto s2 = e.rng("workload");
  for (int i = 0; i < 10; ++i) CHECK(s1.next_u64() == s2.next_u64());
}

TEST_CASE("RNG distributions have the right moments") {
  RngStream r(7, "moments");
  const int n = 200000;
  double su = 0, se = 0, sn = 0, sn2 = 0, sg = 0;
  for (int i = 0; i < n; ++i) {
    su += r.uniform();
    se += r.exponential(2.0);
    double g = r.gauss(550, 150);
    sn += g;
    sn2 += (g - 550) * (g - 550);
    sg += r.gamma(0.5, 4.0);
  }
  CHECK(su / n == doctest::Approx(0.5).epsilon(0.01));
  CHECK(se / n == doctest::Approx(2.0).epsilon(0.02));
  CHECK(sn / n == doctest::Approx(550).epsilon(0.005));
  CHECK(std::sqrt(sn2 / n) == doctest::Approx(150).epsilon(0.02));
  CHECK(sg / n == doctest::Approx(2.0).epsilon(0.03));
  std::set<uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    uint64_t v = r.below(7);
    REQUIRE(v < 7);
    seen.insert(v);
  }
  CHECK(seen.size() == 7);
}

TEST_CASE("RNG draws are pinned (platform-independent distributions)") {
  RngStream r(1, "pin");
  const uint64_t first = r.next_u64();
  RngStream again(1, "pin");
  CHECK(again.next_u64() == first);
  // Known values: guard against accidental changes to the stream derivation or the normal
  // sampler, which would silently change every golden output.
  CHECK(first == 10204900997593223445ull);
  RngStream g(1, "pin");
  CHECK(g.gauss(0, 1) == doctest::Approx(-1.0589008794890558).epsilon(1e-15));
  CHECK(g.gauss(0, 1) == doctest::Approx(-0.25053642769194828).epsilon(1e-15));
  CHECK(fnv1a("") == 0xcbf29ce484222325ull);
  CHECK(splitmix64(0) == 0xe220a8397b1dcdafull);
}

// round_ns replaces std::llround on the serving hot path: it must give the same integer for
// every value, halves (away from zero), the doubles just below them, negatives and values
// near 2^53 and beyond, where every double is an integer.
TEST_CASE("round_ns rounds exactly as std::llround") {
  std::vector<double> xs{0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, 0.49999999999999994, -0.49999999999999994, 1e-300,
                         4503599627370495.5, 4503599627370496.0, 9007199254740993.0, 9.2e18, -9.2e18, 123456789.5};
  uint64_t x = 99;
  for (int i = 0; i < 200000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const double u = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
    const double v = (u - 0.5) * std::ldexp(1.0, static_cast<int>(x % 62));
    xs.push_back(v);
    xs.push_back(std::nextafter(std::floor(v) + 0.5, 0.0));
    xs.push_back(std::floor(v) + 0.5);
  }
  long wrong = 0;
  for (const double v : xs)
    if (round_ns(v) != static_cast<int64_t>(std::llround(v)) && wrong++ == 0) MESSAGE("first mismatch at " << v);
  CHECK(wrong == 0);
  CHECK(round_ns(2.5) == 3);
  CHECK(round_ns(-2.5) == -3);
}

namespace {
// Each event stands for two: it does the work of a zero-delay one inline (counted) and
// schedules its successor.
struct InlineChain : EventHandler {
  uint64_t handled = 0;
  void on_event(Engine& e, uint32_t, uint32_t) override {
    ++handled;
    e.count_inline_event();
    e.schedule_in(SimTime::ns(1), Priority::Default, this, 0);
  }
};
}  // namespace

TEST_CASE("the event budget counts events a handler did inline, as events_processed does") {
  RunControl::get().set_limits(20000, 0);
  Engine e(1);
  InlineChain c;
  e.schedule_at(SimTime::zero(), Priority::Default, &c, 0);
  CHECK_THROWS_AS(e.run(), RunStopped);
  RunControl::get().clear();
  // Stopped within one check interval (4096) past 20000 counted events: about 12k handled
  // (each counts two), not 20k-24k as when only popped events were counted.
  CHECK(e.events_processed() == 2 * c.handled);
  CHECK(e.events_processed() > 20000);
  CHECK(e.events_processed() <= 20000 + 4096 + 2);
}

namespace {
// At each event, checks what a fast-forward may do from there.
struct Probe final : EventHandler {
  std::vector<std::pair<int64_t, bool>> asked;  // (target, answer)
  std::vector<int64_t> probes;                   // targets to ask at the first event
  bool advance = false;
  int64_t advanced_to = -1;
  void on_event(Engine& e, uint32_t kind, uint32_t) override {
    if (kind != 1) return;
    for (int64_t t : probes) asked.emplace_back(t, e.can_advance_to(t));
    if (advance) {
      e.advance_to(40);
      advanced_to = e.now().count_ns();
      CHECK_THROWS_AS(e.advance_to(60), std::logic_error);  // past the event due at 50
      CHECK_THROWS_AS(e.advance_to(30), std::logic_error);  // backwards
    }
  }
};
}  // namespace

TEST_CASE("a handler may advance the clock only up to the next due event and the run's horizon") {
  Engine e(1);
  Probe p;
  p.probes = {10, 49, 50, 51, 5};
  p.advance = true;
  e.schedule_at(SimTime::ns(10), Priority::Default, &p, 1);
  e.schedule_at(SimTime::ns(50), Priority::Stats, &p, 2);  // due at 50: nothing may pass it, whatever its priority
  e.run(SimTime::ns(100));
  CHECK(e.now().count_ns() == 50);  // the event at 50 still ran, after the advance to 40
  // 10 (now), 49: yes; 50 (an event due then), 51: no; 5: the past, no.
  CHECK(p.asked == std::vector<std::pair<int64_t, bool>>{{10, true}, {49, true}, {50, false}, {51, false}, {5, false}});
  CHECK(p.advanced_to == 40);
  // The horizon: run(until 45) lets a handler advance to 45, not beyond, even with nothing due.
  Engine h(1);
  Probe q;
  q.probes = {45, 46, 1'000'000};
  h.schedule_at(SimTime::ns(10), Priority::Default, &q, 1);
  h.run(SimTime::ns(45));
  CHECK(q.asked == std::vector<std::pair<int64_t, bool>>{{45, true}, {46, false}, {1'000'000, false}});
  // Outside run() (a handler called by step()), only due events bound it; a stopped engine none.
  Engine s(1);
  Probe r;
  r.probes = {1'000'000};
  s.schedule_at(SimTime::ns(10), Priority::Default, &r, 1);
  s.step();
  CHECK(r.asked == std::vector<std::pair<int64_t, bool>>{{1'000'000, true}});
  s.stop();
  CHECK(!s.can_advance_to(20));
}

namespace {
// Schedules under its own generation; bumping it voids what is pending (as a failure does).
struct Voidable final : EventHandler {
  uint32_t gen = 0;
  std::vector<uint32_t> ran;
  std::vector<uint32_t> dropped;
  void on_event(Engine& e, uint32_t kind, uint32_t arg) override {
    if (!(e.event_generation() == Generation(gen))) {
      dropped.push_back(arg);
      return;
    }
    CHECK(kind == 7);  // the handler gets its kind back unpacked
    ran.push_back(arg);
  }
};
}  // namespace

TEST_CASE("an event carries the generation it was scheduled under, and a bumped generation voids it") {
  Engine e(1);
  Voidable v;
  e.schedule_at(SimTime::ns(10), Priority::Default, &v, 7, 1, Generation(v.gen));
  e.schedule_at(SimTime::ns(20), Priority::Default, &v, 7, 2, Generation(v.gen));
  e.run(SimTime::ns(15));
  ++v.gen;  // a failure at 15 ns: the event at 20 ns belongs to the old generation
  e.schedule_at(SimTime::ns(30), Priority::Default, &v, 7, 3, Generation(v.gen));
  e.run();
  CHECK(v.ran == std::vector<uint32_t>{1, 3});
  CHECK(v.dropped == std::vector<uint32_t>{2});
  // Generations are kept modulo 2^24: the engine's layout, in one place.
  CHECK(Generation((1u << 24) + 5) == Generation(5));
  CHECK_FALSE(Generation(6) == Generation(5));
}

TEST_CASE("an event kind above 255 is refused: a generation goes in its own argument, not packed into the kind") {
  Engine e(1);
  Voidable v;
  CHECK_THROWS_WITH_AS(e.schedule_at(SimTime::ns(1), Priority::Default, &v, 256), doctest::Contains("Generation"), std::logic_error);
  CHECK_NOTHROW(e.schedule_at(SimTime::ns(1), Priority::Default, &v, 255));
}
