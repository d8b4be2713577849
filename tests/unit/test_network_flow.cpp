// Network flows: the incremental max-min solver against a from-scratch progressive filling on
// random small networks, with flows starting and ending and link capacities changing; flows
// cut where they are (a failed training job's); and the graveyard that keeps collectives a
// failure voided until nothing of them can come.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "network/collective.h"
#include "network/flow.h"
#include "network/generators.h"

using namespace sluice;
using namespace sluice::net;

namespace {

// Max-min fair rates of flows on paths over link capacities, by plain progressive filling.
std::vector<double> reference_rates(const std::vector<std::vector<int>>& paths, const std::vector<double>& cap) {
  std::vector<double> rem = cap, rate(paths.size(), 0.0);
  std::vector<int> cnt(cap.size(), 0);
  std::vector<bool> frozen(paths.size(), false);
  for (const auto& p : paths)
    for (int l : p) ++cnt[static_cast<size_t>(l)];
  for (;;) {
    int best = -1;
    double share = 0;
    for (size_t l = 0; l < cap.size(); ++l) {
      if (cnt[l] == 0) continue;
      const double s = std::max(0.0, rem[l]) / cnt[l];
      if (best < 0 || s < share) {
        best = static_cast<int>(l);
        share = s;
      }
    }
    if (best < 0) return rate;
    for (size_t f = 0; f < paths.size(); ++f) {
      if (frozen[f] || std::find(paths[f].begin(), paths[f].end(), best) == paths[f].end()) continue;
      frozen[f] = true;
      rate[f] = share;
      for (int l : paths[f]) {
        rem[static_cast<size_t>(l)] -= share;
        --cnt[static_cast<size_t>(l)];
      }
    }
  }
}

// Drives a FlowSim with random flows: each completion may start another flow.
struct RandomNet : FlowSink {
  Topology topo{"random"};
  Engine engine{1};
  std::mt19937_64 rng;
  int links = 0;
  int restarts_left = 0;
  int crowd = 0;  // extra flows at the start: crowded links, whose heaps recomputes rebuild whole
  std::map<uint32_t, std::vector<int>> path_of;  // flow id -> path (ids are reused)
  std::vector<std::pair<uint64_t, int64_t>> done;
  uint64_t next_tag = 0;
  std::unique_ptr<Router> router;
  std::unique_ptr<FlowSim> sim;

  explicit RandomNet(uint64_t seed) : rng(seed) {
    const int nodes = 4 + static_cast<int>(rng() % 5);
    for (int i = 0; i < nodes; ++i) topo.add_node(NodeInfo{fmt::format("n{}", i), NodeKind::Device});
    const double bws[] = {10e9, 20e9, 25e9, 40e9, 12.5e9, 3e9};
    for (int i = 0; i + 1 < nodes; ++i) topo.add_link(i, i + 1, bws[rng() % 6], static_cast<int64_t>(rng() % 3) * 100);
    for (int k = 0; k < 3; ++k) {
      const int a = static_cast<int>(rng() % static_cast<uint64_t>(nodes));
      const int b = (a + 2) % nodes;
      topo.add_link(a, b, rng() % 2 ? bws[rng() % 6] : 1e9 + static_cast<double>(rng() % 30'000) * 1e6, 50);
    }
    links = topo.link_count();
    router = std::make_unique<Router>(topo);
    sim = std::make_unique<FlowSim>(engine, topo, *router);
    restarts_left = 40;
  }

  std::vector<int> random_path() {
    std::vector<int> all(static_cast<size_t>(links));
    for (int i = 0; i < links; ++i) all[static_cast<size_t>(i)] = i;
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(1 + rng() % 4);
    return all;
  }

  void start_random() {
    const std::vector<int> p = random_path();
    // Bytes from a few round sizes (ties in completion times) or arbitrary.
    const double sizes[] = {1e6, 2e6, 5e6, 10e6};
    const double bytes = rng() % 2 ? sizes[rng() % 4] : 1e5 + static_cast<double>(rng() % 20'000'000);
    const uint32_t id = sim->start_on_path(p, bytes, this, next_tag++);
    path_of[id] = p;
  }

  void on_flow_done(Engine& e, uint64_t tag) override {
    done.push_back({tag, e.now().count_ns()});
    if (restarts_left > 0 && rng() % 3 != 0) {
      --restarts_left;
      const int n = 1 + static_cast<int>(rng() % 2);
      for (int i = 0; i < n; ++i) start_random();
    }
  }

  // Compares every active flow's rate with a from-scratch max-min computation.
  void check_rates() {
    sim->check_invariants();  // heaps in order, every entry where its slot says
    std::vector<uint32_t> ids;
    std::vector<std::vector<int>> paths;
    for (const auto& [id, p] : path_of)
      if (sim->flow_active(id)) {
        ids.push_back(id);
        paths.push_back(p);
      }
    std::vector<double> cap(static_cast<size_t>(links));
    for (int l = 0; l < links; ++l) cap[static_cast<size_t>(l)] = sim->link_capacity(l);
    const std::vector<double> want = reference_rates(paths, cap);
    for (size_t i = 0; i < ids.size(); ++i) {
      const double got = sim->rate_Bps(ids[i]);
      CHECK(std::fabs(got - want[i]) <= 1e-9 * std::max(1e9, want[i]));
    }
  }

  // Runs to the end, checking rates at random instants; returns the delivery record.
  std::vector<std::pair<uint64_t, int64_t>> run(bool check) {
    const int initial = 3 + static_cast<int>(rng() % 12) + crowd;
    for (int i = 0; i < initial; ++i) start_random();
    // A few capacity changes, some to zero and back (a circuit going down and coming up).
    for (int k = 0; k < 3; ++k) {
      const int l = static_cast<int>(rng() % static_cast<uint64_t>(links));
      const int64_t at = static_cast<int64_t>(rng() % 2'000'000);
      const double before = sim->link_capacity(l);
      sim->set_link_capacity_at(SimTime::ns(at), l, rng() % 2 ? 0.0 : before * 0.5);
      sim->set_link_capacity_at(SimTime::ns(at + 1 + static_cast<int64_t>(rng() % 500'000)), l, before);
    }
    int64_t t = 0;
    while (engine.pending() > 0) {
      t += static_cast<int64_t>(rng() % 40'000);
      engine.run(SimTime::ns(t));
      if (check) check_rates();
    }
    CHECK(sim->active_flows() == 0);
    return done;
  }
};


// Counts the flows delivered to it.
struct CountingSink : FlowSink {
  int done = 0;
  void on_flow_done(Engine&, uint64_t) override { ++done; }
};

// Eight chips on a ring (a 1-D torus), its ring order, and a fabric on it.
struct Ring8 {
  Topology t = [] {
    TorusSpec spec;
    spec.dims = {8};
    return build_torus(spec, "ring8");
  }();
  std::vector<int> devs = ring_order(t);
  Engine engine{0};
  Router router{t, RoutePolicy::Auto};
  FlowSim sim{engine, t, router};
};

// What a fabric reports after flows were cut and moved: every link's carried bytes and each
// delivery's (offset, tag). `warmup` flows first run to their end on a link of their own, so
// its free slots are left in an order of their own.
struct CutAndMoved {
  std::vector<double> carried;
  std::vector<std::pair<int64_t, uint64_t>> delivered;
};
CutAndMoved cut_and_moved(int warmup) {
  // Two hosts joined by two switches: a -> s1 -> b and a -> s2 -> b, 10 GB/s each link.
  Topology t("diamond");
  for (const char* n : {"a", "b"}) t.add_node(NodeInfo{n, NodeKind::Device});
  for (const char* n : {"s1", "s2"}) t.add_node(NodeInfo{n, NodeKind::Switch});
  const int a_s1 = t.add_link(0, 2, 10e9, 100);
  t.add_link(2, 1, 10e9, 100);
  t.add_link(0, 3, 10e9, 100);
  t.add_link(3, 1, 10e9, 100);
  for (const char* n : {"c", "d"}) t.add_node(NodeInfo{n, NodeKind::Device});
  const int c_d = t.add_link(4, 5, 10e9, 100);  // the warm-up's own link
  Engine e(1);
  Router r(t);
  FlowSim sim(e, t, r);
  struct Sink : FlowSink {
    int64_t t0 = 0;
    std::vector<std::pair<int64_t, uint64_t>> got;
    void on_flow_done(Engine& en, uint64_t tag) override { got.emplace_back(en.now().count_ns() - t0, tag); }
  } job, other, warm;
  std::mt19937_64 rng(warmup);
  for (int i = 0; i < warmup; ++i) sim.start_on_path({c_d}, 1e5 * (1 + static_cast<double>(rng() % 50)), &warm, static_cast<uint64_t>(i));
  e.run();
  const int64_t t0 = e.now().count_ns();
  job.t0 = other.t0 = t0;
  for (int i = 0; i < 60; ++i)
    sim.start(0, 1, 1e6 * (1 + i % 7), i % 3 == 0 ? static_cast<FlowSink*>(&job) : &other, static_cast<uint64_t>(1000 + i), static_cast<uint64_t>(i * 7919));
  e.run(SimTime::ns(t0 + 300'000));
  sim.cancel([&](const FlowSink* s) { return s == &job; });
  e.run(SimTime::ns(t0 + 600'000));
  t.mutable_link(a_s1).up = false;  // a's link to s1 fails: its flows move to s2
  sim.set_link_capacity(a_s1, 0);
  r.invalidate();
  sim.reroute({a_s1}, 0);
  e.run(SimTime::ns(t0 + 900'000));
  CutAndMoved out{sim.carried_link_bytes(), {}};
  out.carried.resize(4);  // the diamond's links (the warm-up's carried what it was given)
  e.run();
  out.delivered = other.got;
  CHECK(job.got.empty());
  return out;
}

}  // namespace

TEST_CASE("flow: incremental max-min rates match progressive filling from scratch on random networks") {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    RandomNet net(seed);
    const auto record = net.run(true);
    CHECK(record.size() == net.next_tag);
  }
}

TEST_CASE("flow: crowded links, their heaps rebuilt whole when most keys change, keep max-min rates and ordered heaps") {
  uint64_t rebuilt = 0;
  for (uint64_t seed = 200; seed < 212; ++seed) {
    CAPTURE(seed);
    RandomNet net(seed);
    net.crowd = 150 + static_cast<int>(seed % 4) * 100;
    const auto record = net.run(true);
    CHECK(record.size() == net.next_tag);
    rebuilt += net.sim->stats().heaps_rebuilt;
  }
  CHECK(rebuilt > 0);
}

TEST_CASE("flow: random runs are deterministic to the nanosecond") {
  for (uint64_t seed = 100; seed < 110; ++seed) {
    CAPTURE(seed);
    RandomNet a(seed), b(seed);
    CHECK(a.run(false) == b.run(true));
  }
}

TEST_CASE("flow: a flow ending at the top level speeds up only the flows it bottlenecked") {
  // Link 0 (10 GB/s) carries A and B; link 1 (30 GB/s) carries B, C, D. A and B get 5 each,
  // C and D share the remaining 25 on link 1: 12.5 each. When C ends, D takes 25 and A, B
  // (bottlenecked on link 0, below C's level) are not re-filled at all.
  Topology t("levels");
  for (int i = 0; i < 3; ++i) t.add_node(NodeInfo{fmt::format("n{}", i), NodeKind::Device});
  const int l0 = t.add_link(0, 1, 10e9, 0);
  const int l1 = t.add_link(1, 2, 30e9, 0);
  Engine e(1);
  Router r(t);
  FlowSim sim(e, t, r);
  struct Nop : FlowSink {
    void on_flow_done(Engine&, uint64_t) override {}
  } sink;
  const uint32_t a = sim.start_on_path({l0}, 1e9, &sink, 1);
  const uint32_t b = sim.start_on_path({l0, l1}, 1e9, &sink, 2);
  const uint32_t c = sim.start_on_path({l1}, 12.5e6, &sink, 3);
  const uint32_t d = sim.start_on_path({l1}, 1e9, &sink, 4);
  e.step();
  CHECK(sim.rate_Bps(a) == 5e9);
  CHECK(sim.rate_Bps(b) == 5e9);
  CHECK(sim.rate_Bps(c) == 12.5e9);
  CHECK(sim.rate_Bps(d) == 12.5e9);
  const uint64_t before = sim.stats().flows_rated;
  e.step();  // C ends at 1 ms
  CHECK(e.now().count_ns() == 1'000'000);
  e.step();  // its recomputation re-fills D only
  CHECK(sim.stats().flows_rated - before == 1);
  CHECK(sim.rate_Bps(d) == 25e9);
  CHECK(sim.rate_Bps(a) == 5e9);
  CHECK(sim.rate_Bps(b) == 5e9);
}

TEST_CASE("flow: a reused flow record gets heap slots for a longer path, and every heap entry finds its place") {
  // A chain of 6 links. One-hop flows end first and their records are reused by flows of 3
  // and 5 hops: each needs more position slots than the record had reserved (1, then 4),
  // while earlier flows still sit in the same link heaps. Rates must be the max-min ones, and
  // check_invariants also checks that every heap entry's slot says where it sits.
  Topology t("chain");
  for (int i = 0; i < 7; ++i) t.add_node(NodeInfo{fmt::format("n{}", i), NodeKind::Device});
  std::vector<int> l;
  for (int i = 0; i < 6; ++i) l.push_back(t.add_link(i, i + 1, 10e9, 0));
  Engine e(1);
  Router r(t);
  FlowSim sim(e, t, r);
  CountingSink sink;
  const uint32_t shortf = sim.start_on_path({l[0]}, 1e6, &sink, 1);  // ends first
  const uint32_t longf = sim.start_on_path({l[0], l[1], l[2], l[3], l[4], l[5]}, 1e9, &sink, 2);
  while (sink.done < 1) e.step();
  e.run(e.now());  // the recomputation after its end
  sim.check_invariants();
  const uint32_t three = sim.start_on_path({l[1], l[2], l[3]}, 1e9, &sink, 3);
  CHECK(three == shortf);  // the freed record, now with three hops
  const uint32_t five = sim.start_on_path({l[1], l[2], l[3], l[4], l[5]}, 1e9, &sink, 4);
  e.run(e.now());
  sim.check_invariants();
  // Links 1-3 carry three flows, 4-5 two, link 0 one: everyone is held to 10/3 GB/s by link 1.
  CHECK(sim.rate_Bps(longf) == doctest::Approx(10e9 / 3));
  CHECK(sim.rate_Bps(three) == doctest::Approx(10e9 / 3));
  CHECK(sim.rate_Bps(five) == doctest::Approx(10e9 / 3));
  e.run();
  CHECK(sink.done == 4);
  sim.check_invariants();
  CHECK(sim.active_flows() == 0);
}

TEST_CASE("flow: cutting a sink's flows re-shares their links at once, delivers none of them and keeps their bytes on the ledger") {
  // Link 0 (10 GB/s) carries A (job) and B (other): 5 GB/s each. C (job) has sent its bytes over
  // link 1 and is in flight for the link's 1 ms latency when the job's flows are cut.
  Topology t("cut");
  for (int i = 0; i < 3; ++i) t.add_node(NodeInfo{fmt::format("n{}", i), NodeKind::Device});
  const int l0 = t.add_link(0, 1, 10e9, 0);
  const int l1 = t.add_link(1, 2, 10e9, 1'000'000);
  Engine e(1);
  Router r(t);
  FlowSim sim(e, t, r);
  CountingSink job, other;
  const uint32_t a = sim.start_on_path({l0}, 1e9, &job, 1);
  const uint32_t b = sim.start_on_path({l0}, 1e9, &other, 2);
  sim.start_on_path({l1}, 1e3, &job, 3);
  e.run(e.now());
  CHECK(sim.rate_Bps(a) == 5e9);
  while (e.now().count_ns() < 100) e.step();  // C's last byte left at 100 ns: in flight
  e.run(e.now());
  const FlowLedger before = sim.ledger();
  const uint64_t events = e.events_processed();
  CHECK(sim.cancel([&](const FlowSink* s) { return s == &job; }) == 2);
  CHECK(!sim.flow_active(a));
  CHECK(sim.active_flows() == 1);
  e.run(e.now());  // the recomputation: B alone on link 0
  CHECK(sim.rate_Bps(b) == 10e9);
  CHECK(sim.ledger().link_bytes == before.link_bytes);  // what the cut flows were given stays counted
  CHECK(sim.ledger().bytes == before.bytes);
  e.run();
  CHECK(job.done == 0);  // neither the sending nor the flying one arrives
  CHECK(other.done == 1);
  CHECK(sim.stats().completed == 1);
  // The recomputation, B's end, the one after it and B's delivery: the cut flows' events are void.
  CHECK(e.events_processed() == events + 4);
  // Cutting every flow leaves the fabric empty with no recomputation owed.
  sim.start_on_path({l0, l1}, 1e9, &job, 4);
  e.run(e.now());
  const uint64_t recomputes = sim.stats().recomputes;
  CHECK(sim.cancel([&](const FlowSink* s) { return s == &job; }) == 1);
  CHECK(sim.empty());
  e.run();
  CHECK(sim.stats().recomputes == recomputes);
  CHECK(job.done == 0);
  sim.check_invariants();
}

TEST_CASE("flow: a flow moved onto a longer route takes a new block of hop slots, and its old links let it go") {
  // a -> b directly (one hop), or a -> s1 -> s2 -> b (three hops), 10 GB/s each link.
  Topology t("detour");
  for (const char* n : {"a", "b"}) t.add_node(NodeInfo{n, NodeKind::Device});
  for (const char* n : {"s1", "s2"}) t.add_node(NodeInfo{n, NodeKind::Switch});
  const int ab = t.add_link(0, 1, 10e9, 100);
  const int a1 = t.add_link(0, 2, 10e9, 100), s12 = t.add_link(2, 3, 10e9, 100), s2b = t.add_link(3, 1, 10e9, 100);
  Engine e(1);
  Router r(t);
  FlowSim sim(e, t, r);
  CountingSink sink;
  const uint32_t f = sim.start(0, 1, 1e9, &sink, 7);  // 100 ms alone on a -> b
  const uint32_t g = sim.start_on_path({a1, s12}, 1e9, &sink, 8);  // shares a -> s1 and s1 -> s2 after the move
  e.run(SimTime::ms(50));
  sim.check_invariants();
  CHECK(sim.rate_Bps(f) == 10e9);
  for (const int l : {ab, ab + 1}) {  // the cable between a and b, both ways (add_link adds the way back next)
    t.mutable_link(l).up = false;
    sim.set_link_capacity(l, 0);
  }
  r.invalidate();
  CHECK(sim.reroute({ab, ab + 1}, 0) == std::pair<int, int>{1, 0});
  e.run(e.now());  // the recomputation: f and g share a -> s1 and s1 -> s2
  sim.check_invariants();  // every heap entry where its slot says, on the link its slot's route names
  CHECK(sim.rate_Bps(f) == doctest::Approx(5e9));
  CHECK(sim.rate_Bps(g) == doctest::Approx(5e9));
  const std::vector<double> carried = sim.carried_link_bytes();
  CHECK(carried[static_cast<size_t>(ab)] == doctest::Approx(0.5e9));  // what it sent before the move
  e.run();
  CHECK(sink.done == 2);
  const std::vector<double> after = sim.carried_link_bytes();
  CHECK(after[static_cast<size_t>(ab)] == doctest::Approx(0.5e9));
  CHECK(after[static_cast<size_t>(s2b)] == doctest::Approx(0.5e9));  // the rest of f over the detour
  CHECK(after[static_cast<size_t>(a1)] == doctest::Approx(1.5e9));
  // The record, reused, takes the longer block's route again and the fabric stays whole.
  sim.start_on_path({a1, s12, s2b}, 1e6, &sink, 9);
  e.run(e.now());
  sim.check_invariants();
  e.run();
  CHECK(sink.done == 3);
}

TEST_CASE("flow: what a fabric reports after flows are cut and moved does not depend on the slots they had") {
  // The fabric's slots depend on how many flows it ever held at once (a training fast-forward
  // skips some); cut flows, moved flows and carried bytes follow the order flows began.
  const CutAndMoved a = cut_and_moved(3), b = cut_and_moved(40), c = cut_and_moved(97);
  CHECK(a.delivered.size() == 40);
  CHECK(a.delivered == b.delivered);
  CHECK(a.delivered == c.delivered);
  CHECK(a.carried == b.carried);  // bit for bit
  CHECK(a.carried == c.carried);
}

TEST_CASE("collectives: a cancelled collective starts nothing more, never finishes, and is let go once nothing of it can come") {
  Ring8 r;
  auto& [t, devs, engine, router, sim] = r;
  bool done = false;
  auto c = std::make_unique<Collective>(sim, CollectiveKind::AllReduceRing, devs, 64e6);
  c->start([&](Engine&) { done = true; });
  engine.run(SimTime::ns(1000));  // a few steps in
  const uint64_t flows = c->flows_started();
  c->cancel();
  const Collective* raw = c.get();
  CHECK(sim.cancel([raw](const FlowSink* s) { return s == raw; }) > 0);
  engine.run();
  CHECK(!done);
  CHECK(!c->finished());
  CHECK(c->flows_started() == flows);
  CHECK(c->spent());
  CHECK(sim.empty());
}

TEST_CASE("collectives: a graveyard keeps voided collectives until they finish, then lets them go") {
  Ring8 r;
  auto& [t, devs, engine, router, sim] = r;
  Graveyard yard;
  // Buried while their flows are on the fabric: none may go, however many there are.
  std::vector<Collective*> live;
  for (int i = 0; i < 150; ++i) {
    auto c = std::make_unique<Collective>(sim, CollectiveKind::AllGather, devs, 8e6);
    c->start();
    live.push_back(c.get());
    yard.bury(std::move(c));
  }
  CHECK(yard.size() == 150);
  engine.run();  // their flows land on collectives still alive (ASan would see it otherwise)
  for (const Collective* c : live) CHECK(c->finished());
  // A long run with a failure every so often: the yard holds what is still draining, not
  // every collective ever voided.
  size_t most = 0;
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 10; ++i) {
      auto c = std::make_unique<Collective>(sim, CollectiveKind::AllGather, devs, 8e6);
      c->start();
      yard.bury(std::move(c));
    }
    most = std::max(most, yard.size());
    engine.run();
  }
  CHECK(most < 330);  // 1,150 buried in all
  CHECK(yard.size() < 330);
}

TEST_CASE("collectives: a hierarchical all-to-all crosses to another server once, rail to rail, and forwards over NVLink") {
  // Three 8-GPU servers on one leaf (not rail-optimized: a flat all-to-all's pairs across
  // servers take the NIC, never NVLink). Flat: n (n - 1) flows, the NICs carrying (K - 1) M S in
  // all and NVLink the (M - 1) S inside servers. Hierarchical: n (K - 1) flows across and n (M - 1)
  // inside, the NICs carrying the same (K - 1) M S times the servers' share (a2a_dedup) and
  // NVLink K times as much (each device forwards what every server's same-rank device sent it).
  ClosSpec c;
  c.servers = 3;
  c.server.host_cpus = 0;
  const Topology t = build_clos(c, "three");
  const auto& devs = t.devices();
  const int n = static_cast<int>(devs.size()), K = 3, M = 8;
  REQUIRE(n == K * M);
  struct Out {
    double nic = 0, nvlink = 0, nic_from_first = 0;  // (the last: out of the first server's GPUs)
    uint64_t flows = 0;
    SimTime took;
  };
  const double S = 24e6;
  auto run = [&](CollectiveKind kind, CollectiveOptions o) {
    Engine engine(0);
    Router router(t);
    FlowSim sim(engine, t, router);
    Collective a2a(sim, kind, devs, S, o);
    a2a.start();
    engine.run();
    REQUIRE(a2a.finished());
    Out out;
    out.flows = a2a.flows_started();
    out.took = a2a.duration();
    const auto carried = sim.carried_link_bytes();
    for (int e = 0; e < t.link_count(); ++e) {
      if (t.node(t.link(e).src).kind != NodeKind::Device) continue;  // (each flow leaves its sender once)
      (t.link(e).label == "nic" ? out.nic : out.nvlink) += carried[static_cast<size_t>(e)];
      if (t.link(e).label == "nic" && std::find(devs.begin(), devs.begin() + M, t.link(e).src) != devs.begin() + M)
        out.nic_from_first += carried[static_cast<size_t>(e)];
    }
    return out;
  };
  const Out flat = run(CollectiveKind::AllToAll, {});
  const Out hier = run(CollectiveKind::AllToAllHierarchical, {});
  CHECK(flat.flows == static_cast<uint64_t>(n * (n - 1)));
  CHECK(hier.flows == static_cast<uint64_t>(n * (K - 1) + n * (M - 1)));
  CHECK(flat.nic == doctest::Approx((K - 1) * M * S / n * n));
  CHECK(flat.nvlink == doctest::Approx((M - 1) * S));
  CHECK(hier.nic == doctest::Approx(flat.nic));
  CHECK(hier.nvlink == doctest::Approx(K * flat.nvlink));
  // A token once per server: the servers' share scales the network's bytes and nothing else.
  CollectiveOptions half;
  std::vector<int> asked;
  half.a2a_dedup = [&asked](const std::vector<int>& server) {
    asked.push_back(static_cast<int>(server.size()));
    return 0.5;
  };
  const Out dedup = run(CollectiveKind::AllToAllHierarchical, half);
  CHECK(asked == std::vector<int>(K, M));
  CHECK(dedup.nic == doctest::Approx(0.5 * flat.nic));
  CHECK(dedup.nvlink == doctest::Approx(hier.nvlink));
  CHECK(dedup.took < hier.took);
  // Weights move bytes between pairs, not their sum; one server is the flat all-to-all.
  CollectiveOptions skew;
  for (int i = 0; i < n; ++i) skew.a2a_weights.push_back(i < M ? 1.5 : 0.75);
  const Out skewed = run(CollectiveKind::AllToAllHierarchical, skew);
  CHECK(skewed.nic + skewed.nvlink == doctest::Approx(hier.nic + hier.nvlink));
  // Each crossing is discounted by the share of the server holding the experts: a dispatch by
  // the receiver's, a combine (reduced inside the experts' server first) by the sender's. The
  // first server hot (weights 1.5, share 0.3), the others cold (0.75, 0.7): each of its 8 ranks
  // sends to each of the 2 others the dispatch to 8 cold GPUs, 8 c (0.75 / 2) 0.7, and its 8
  // GPUs' combine, 8 c (1.5 / 2) 0.3 (c = S / n).
  CollectiveOptions hot = skew;
  hot.a2a_dedup = [M](const std::vector<int>& server) { return server.front() < M ? 0.3 : 0.7; };
  const Out shared = run(CollectiveKind::AllToAllHierarchical, hot);
  const double cpair = S / n;
  CHECK(shared.nic_from_first == doctest::Approx(M * (K - 1) * M * cpair * (0.75 / 2 * 0.7 + 1.5 / 2 * 0.3)));
  CHECK(shared.nic == doctest::Approx(M * (K - 1) * M * cpair * (0.75 / 2 * 0.7 + 1.5 / 2 * 0.3) * 2 +  // to and from the hot server
                                      M * 2 * M * cpair * (0.75 / 2 * 0.7 + 0.75 / 2 * 0.7)));       // between the two cold ones
  // An FP8 dispatch is the lighter part of each pair (a2a_dispatch_fraction f, the rest the BF16
  // combine): the first server's crossings carry f of the cold GPUs' dispatch and 1 - f of its combine.
  CollectiveOptions fp8 = hot;
  const double f = 1.03125 / 3.03125;
  fp8.a2a_dispatch_fraction = f;
  const Out lighter = run(CollectiveKind::AllToAllHierarchical, fp8);
  CHECK(lighter.nic_from_first == doctest::Approx(M * (K - 1) * M * cpair * (0.75 * f * 0.7 + 1.5 * (1 - f) * 0.3)));
  CHECK(lighter.nic_from_first != doctest::Approx(shared.nic_from_first));
  const std::vector<int> one(devs.begin(), devs.begin() + M);
  Engine engine(0);
  Router router(t);
  FlowSim sim(engine, t, router);
  Collective inside(sim, CollectiveKind::AllToAllHierarchical, one, S);
  inside.start();
  engine.run();
  CHECK(inside.flows_started() == static_cast<uint64_t>(M * (M - 1)));
  // Servers holding different numbers of the group's devices: refused (a rail per local rank).
  std::vector<int> uneven(devs.begin(), devs.begin() + M + 3);
  CHECK_THROWS_WITH_AS(Collective(sim, CollectiveKind::AllToAllHierarchical, uneven, S), doctest::Contains("the same number on each"),
                       std::invalid_argument);
}

TEST_CASE("flow: a link given its bandwidth for a later time twice (reprogrammed before the first came) gets it at the later time") {
  TorusSpec spec;
  spec.dims = {4};
  const Topology t = build_torus(spec, "ring4");
  Engine engine(0);
  Router router(t);
  FlowSim sim(engine, t, router);
  const double bw = t.link(0).bandwidth_Bps;
  sim.set_link_capacity(0, 0);
  sim.set_link_capacity_at(SimTime::us(10), 0, bw);
  sim.set_link_capacity_at(SimTime::us(30), 0, bw);
  CHECK(sim.ready_ns(0) == 30'000);
  engine.run(SimTime::us(20));
  CHECK(sim.link_capacity(0) == 0);
  engine.run(SimTime::us(40));
  CHECK(sim.link_capacity(0) == bw);
}

TEST_CASE("flow: a large all-to-all makes room for its pairs once, and a second one reuses their records") {
  // 128 chips, 16,256 pairs started at one instant: the flow table grows once to exactly that
  // (FlowSim::reserve), not by doubling to 16,384; run again, the ended flows' records serve.
  TorusSpec spec;
  spec.dims = {4, 4, 8};
  const Topology t = build_torus(spec, "torus");
  Engine engine(1);
  Router router(t);
  FlowSim sim(engine, t, router);
  CHECK(sim.flow_capacity() == 0);
  Collective first(sim, CollectiveKind::AllToAll, t.devices(), 16.0 * 1024 * 1024);
  first.start();
  CHECK(sim.stats().started == 128u * 127u);
  CHECK(sim.flow_capacity() == 128u * 127u);
  engine.run();
  REQUIRE(first.finished());
  Collective second(sim, CollectiveKind::AllToAll, t.devices(), 16.0 * 1024 * 1024);
  second.start();
  engine.run();
  REQUIRE(second.finished());
  CHECK(sim.flow_capacity() == 128u * 127u);
  CHECK(second.duration() == first.duration());
}
