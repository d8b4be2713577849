// Faults across the world: distributions, traces at exact times, links failing under flows,
// serving requests conserved under replica failures, training restarts from checkpoints, the
// monkey.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>

#include <fmt/format.h>

#include "config/node.h"
#include "faults/distribution.h"
#include "network/generators.h"
#include "run/monkey.h"
#include "run/runner.h"
#include "world/world.h"

using namespace sluice;
using sluice::testing::registry;
using sluice::testing::run_text;

namespace {

std::unique_ptr<FaultProcess> make_fault(World& w, const std::string& yaml) {
  static std::vector<std::unique_ptr<Node>> trees;  // Params point into their tree: kept for the test run
  trees.push_back(std::make_unique<Node>(load_yaml_string(yaml, "f.yaml")));
  const ComponentInfo* info = registry().find("fault", trees.back()->find("kind")->scalar);
  REQUIRE(info != nullptr);
  const Params p = parse_params(*trees.back(), *info->schema, "faults[0]");
  return registry().factory<FaultProcessFactory>(*info)(p, w, "f");
}

// d0 - s0 = s1 - d1: devices at 100 GB/s, `mids` parallel links of 10 GB/s between the switches.
std::shared_ptr<net::Topology> dumbbell(int mids) {
  auto t = std::make_shared<net::Topology>("dumbbell");
  const int s0 = t->add_node(net::NodeInfo{"s0", net::NodeKind::Switch, 0, 0, {-1, -1, -1}, -1});
  const int s1 = t->add_node(net::NodeInfo{"s1", net::NodeKind::Switch, 0, 0, {-1, -1, -1}, -1});
  const int d0 = t->add_node(net::NodeInfo{"d0", net::NodeKind::Device, 0, 0, {-1, -1, -1}, 0});
  const int d1 = t->add_node(net::NodeInfo{"d1", net::NodeKind::Device, 0, 0, {-1, -1, -1}, 1});
  t->add_link(d0, s0, 100e9, 0);
  t->add_link(d1, s1, 100e9, 0);
  for (int i = 0; i < mids; ++i) t->add_link(s0, s1, 10e9, 0);
  t->check();
  return t;
}

struct Done final : net::FlowSink {
  int64_t at = -1;
  void on_flow_done(Engine& e, uint64_t) override { at = e.now().count_ns(); }
};

}  // namespace

TEST_CASE("fault distributions: seeded draws with the right moments") {
  using faults::DistKind;
  struct Case {
    faults::Distribution d;
  };
  std::vector<faults::Distribution> ds;
  faults::Distribution e;
  e.kind = DistKind::Exponential;
  e.mean_s = 1000;
  ds.push_back(e);
  faults::Distribution wb;
  wb.kind = DistKind::Weibull;
  wb.shape = 1.5;
  wb.scale_s = 500;
  ds.push_back(wb);
  faults::Distribution ln;
  ln.kind = DistKind::Lognormal;
  ln.mean_s = 300;
  ln.sigma = 0.5;
  ds.push_back(ln);
  faults::Distribution fx;
  fx.kind = DistKind::Fixed;
  fx.mean_s = 42;
  ds.push_back(fx);
  for (const auto& d : ds) {
    CAPTURE(d.describe());
    RngStream rng(7, "moments");
    const int n = 200000;
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
      const double x = d.draw(rng);
      REQUIRE(x >= 0);
      sum += x;
      sq += x * x;
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    CHECK(mean == doctest::Approx(d.mean()).epsilon(0.01));
    if (d.variance() > 0) CHECK(var == doctest::Approx(d.variance()).epsilon(0.04));
    else CHECK(var == doctest::Approx(0).epsilon(1e-9));
    // Same seed and stream: the same draws.
    RngStream a(7, "moments"), b(7, "moments");
    for (int i = 0; i < 100; ++i) CHECK(d.draw(a) == d.draw(b));
  }
  CHECK(wb.mean() == doctest::Approx(500 * std::tgamma(1 + 1 / 1.5)));
}

TEST_CASE("a distribution section's keys reach their fields: dist, mean, scale and sigma in seconds, shape") {
  using faults::DistKind;
  auto read = [](bool lifetime, const std::string& yaml) {
    static std::vector<std::unique_ptr<Node>> trees;  // Params point into their tree
    static std::vector<std::shared_ptr<Schema>> schemas;
    trees.push_back(std::make_unique<Node>(load_yaml_string(yaml, "d.yaml")));
    schemas.push_back(faults::distribution_schema(lifetime));
    return faults::distribution_from_params(parse_params(*trees.back(), *schemas.back(), "ttf"));
  };
  const faults::Distribution wb = read(true, "{dist: weibull, shape: 2.5, scale: 2h}");
  CHECK(wb.kind == DistKind::Weibull);
  CHECK(wb.shape == 2.5);
  CHECK(wb.scale_s == doctest::Approx(7200));
  const faults::Distribution fx = read(true, "{dist: fixed, mean: 90min}");
  CHECK(fx.kind == DistKind::Fixed);
  CHECK(fx.mean_s == doctest::Approx(5400));
  const faults::Distribution ex = read(true, "{mean: 1500ms}");  // the lifetime's default kind
  CHECK(ex.kind == DistKind::Exponential);
  CHECK(ex.mean_s == doctest::Approx(1.5));
  const faults::Distribution ln = read(false, "{dist: lognormal, mean: 4h, sigma: 1.25}");
  CHECK(ln.kind == DistKind::Lognormal);
  CHECK(ln.mean_s == doctest::Approx(14400));
  CHECK(ln.sigma == 1.25);
  const faults::Distribution rx = read(false, "{dist: exponential, mean: 30s}");
  CHECK(rx.kind == DistKind::Exponential);
  CHECK(rx.mean_s == doctest::Approx(30));
  const faults::Distribution rf = read(false, "{mean: 2s}");  // the repair's default kind
  CHECK(rf.kind == DistKind::Fixed);
  CHECK(rf.sigma == 0.5);  // defaulted keys fill too
  // A kind's missing parameter is still refused at its key.
  CHECK_THROWS_WITH_AS(read(true, "{dist: weibull, shape: 2}"), doctest::Contains("scale"), ConfigError);
  CHECK_THROWS_WITH_AS(read(false, "{dist: lognormal}"), doctest::Contains("needs its mean"), ConfigError);
}

TEST_CASE("a fault trace fails a link at exactly its time: the flow stalls and resumes on repair") {
  World w(1, Cluster{dumbbell(1), HardwareSpec{}});
  w.add_fault(make_fault(w, "{kind: trace, events: [\"500ms link:s0~s1 down\", \"2500ms link:s0~s1 up\"]}"));
  Done done;
  // 10 GB at 10 GB/s: 1 s alone; stalled from 0.5 s to 2.5 s, so it ends at 3 s exactly.
  w.fabric().start(w.device_node(0), w.device_node(1), 10e9, &done, 1);
  for (const auto& f : w.faults()) f->start(w);
  w.engine().run();
  CHECK(done.at == 3'000'000'000);
  CHECK(w.fault_stats().flows_stalled == 1);
  CHECK(w.fault_stats().flows_rerouted == 0);
  const auto& links = w.components(FaultClass::Link);
  const int mid = w.find_component(FaultClass::Link, "s0~s1");
  REQUIRE(mid >= 0);
  CHECK(links[static_cast<size_t>(mid)].failures == 1);
  CHECK(links[static_cast<size_t>(mid)].down_ns == 2'000'000'000);
}

TEST_CASE("flows re-route around a failed link, paying the re-route penalty") {
  Cluster c{dumbbell(2), HardwareSpec{}};
  c.reroute_penalty_ns = 7'000'000;  // 7 ms
  World w(1, std::move(c));
  // The two parallel links are s0~s1 and s0~s1#2; the flow takes one, which then fails.
  Done done;
  w.fabric().start(w.device_node(0), w.device_node(1), 10e9, &done, 1);
  w.engine().run(SimTime::ns(100'000'000));  // 0.1 s at 10 GB/s: 1 GB sent
  int used = -1;
  for (int i = 0; i < 2; ++i) {
    const auto& comp = w.components(FaultClass::Link)[static_cast<size_t>(w.find_component(FaultClass::Link, i ? "s0~s1#2" : "s0~s1"))];
    if (w.fabric().link_capacity(comp.links[0]) > 0 && w.topology().link(comp.links[0]).up) {
      // Which one carries it: the one with load (check by failing it and seeing a re-route).
      (void)comp;
    }
  }
  // Fail both in turn on fresh worlds would be slow to set up; instead fail whichever the route used.
  const auto path = w.fabric().router().route(w.device_node(0), w.device_node(1), 0);
  for (int e : path)
    if (w.topology().link(e).label.empty() && w.topology().node(w.topology().link(e).src).kind == net::NodeKind::Switch &&
        w.topology().node(w.topology().link(e).dst).kind == net::NodeKind::Switch)
      used = e;
  REQUIRE(used >= 0);
  std::string name;
  for (const auto& comp : w.components(FaultClass::Link))
    for (int e : comp.links)
      if (e == used) name = comp.name;
  REQUIRE(!name.empty());
  w.set_component(FaultClass::Link, w.find_component(FaultClass::Link, name), true);
  w.engine().run();
  // Either the flow was on the failed link (moved: 9 GB more on the other, + 7 ms), or it was
  // on the other one all along (untouched: 1 s).
  if (w.fault_stats().flows_rerouted == 1) CHECK(done.at == 1'000'000'000 + 7'000'000);
  else CHECK(done.at == 1'000'000'000);
  CHECK(w.fault_stats().flows_stalled == 0);
  w.fabric().check_invariants();
}

TEST_CASE("fault traces are checked line by line before the run") {
  World w(1, Cluster{dumbbell(1), HardwareSpec{}});
  auto bad = [&](const std::string& ev, const std::string& needle) {
    CAPTURE(ev);
    try {
      make_fault(w, "{kind: trace, events: [\"" + ev + "\"]}");
      FAIL("accepted");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
      CHECK(e.origin().line == 1);
    }
  };
  bad("5s switch:nope down", "no switch named 'nope'");
  bad("5s gpu:d0 down", "not a component class");
  bad("five switch:s0 down", "not a time");
  bad("5s switch:s0 sideways", "not a state");
  bad("5s switch:s0", "three fields");
}

TEST_CASE("adding a fault process never changes another's draws") {
  const std::string base = R"(
name: streams
seed: 3
cluster: {topology: fat-tree, hardware: h100-sxm}
workloads:
  - {name: job, kind: training, model: gpt3-1b, parallel: {tp: 8, dp: 2}, iterations: 40, place: {servers: 0-1},
     recovery: {restart: 1s, checkpoint_interval: 0s}}
faults:
  - {name: nodes, kind: random, component: node, ttf: {dist: exponential, mean: 2s}, repair: {dist: fixed, mean: 1s}}
)";
  const Json a = run_text(base, {"workloads.0.iterations=100000", "max_sim_time=60s"});
  const Json b = run_text(base + "  - {name: links, kind: random, component: link, only: [\"leaf0~spine0\"], ttf: {mean: 3s}, repair: {mean: 1s}}\n",
                          {"workloads.0.iterations=100000", "max_sim_time=60s"});
  const Json& na = a["world"]["faults"]["classes"]["node"];
  const Json& nb = b["world"]["faults"]["classes"]["node"];
  CHECK(na["failures"].get<long>() > 5);
  CHECK(na["failures"] == nb["failures"]);
  CHECK(na["availability"] == nb["availability"]);
  CHECK(b["world"]["faults"]["classes"]["link"]["failures"].get<long>() > 0);
  // Host availability follows MTBF / (MTBF + MTTR) = 2/3, within sampling noise over 32 nodes x 60 s.
  CHECK(na["availability"].get<double>() == doctest::Approx(2.0 / 3).epsilon(0.06));
}

TEST_CASE("training restarts from its last checkpoint: lost work, checkpoints and recovery add up by hand") {
  const std::string yaml = R"(
name: ckpt
seed: 1
cluster: {topology: dgx-h100, hardware: h100-sxm}
workloads:
  - {name: job, kind: training, model: gpt3-1b, parallel: {tp: 8}, iterations: 6, place: {servers: [0]},
     recovery: {checkpoint_interval: CKPT, checkpoint_write: 2s, restart: 3s}}
)";
  auto with = [&](const std::string& ckpt) {
    std::string s = yaml;
    s.replace(s.find("CKPT"), 4, ckpt);
    return s;
  };
  // The clean iteration time tau.
  const Json clean = run_text(with("0s"));
  const double tau = clean["training"]["iteration_s"][0].get<double>();
  REQUIRE(tau > 0);
  for (const auto& x : clean["training"]["iteration_s"]) CHECK(x.get<double>() == doctest::Approx(tau).epsilon(1e-9));
  // Checkpoints after iterations 2 and 4 (interval 1.5 tau); a node failure half-way through
  // iteration 5, repaired 10 s later: 0.5 tau lost, then iterations 5 and 6 again.
  const long long ck_ns = std::llround(1.5 * tau * 1e9);
  const long long tau_ns = std::llround(tau * 1e9);
  const long long fail_ns = 4 * tau_ns + 2 * 2'000'000'000LL + tau_ns / 2;
  const long long up_ns = fail_ns + 10'000'000'000LL;
  const Json m = run_text(with(std::to_string(ck_ns) + "ns") + fmt::format("faults:\n  - {{kind: trace, events: [\"{}ns node:node0 down\", \"{}ns node:node0 up\"]}}\n", fail_ns, up_ns));
  const Json& f = m["training"]["faults"];
  CHECK(f["failures"] == 1);
  CHECK(f["restarts"] == 1);
  CHECK(f["checkpoints"] == 2);
  CHECK(f["lost_s"].get<double>() == doctest::Approx(tau / 2).epsilon(1e-3));
  CHECK(f["checkpoint_s"].get<double>() == doctest::Approx(4.0).epsilon(1e-9));
  CHECK(f["recovering_s"].get<double>() == doctest::Approx(13.0).epsilon(1e-6));
  CHECK(f["useful_s"].get<double>() == doctest::Approx(6 * tau).epsilon(1e-3));
  CHECK(f["wall_s"].get<double>() == doctest::Approx(up_ns / 1e9 + 3 + 2 * tau).epsilon(1e-6));
  CHECK(f["useful_s"].get<double>() + f["lost_s"].get<double>() + f["checkpoint_s"].get<double>() + f["recovering_s"].get<double>() ==
        doctest::Approx(f["wall_s"].get<double>()).epsilon(1e-9));
  CHECK(m["training"]["iterations"] == 6);
}

TEST_CASE("serving under replica failures: every request ends completed, failed or in flight") {
  const std::string yaml = R"(
name: conserve
seed: 2
cluster: {topology: fat-tree, hardware: h100-sxm}
workloads:
  - name: chat
    kind: serving
    model: llama3-8b
    deployment: {replicas: 4, tensor_parallel: 2}
    workload: {kind: llmperf, input_tokens: {mean: 512, sd: 0}, output_tokens: {mean: 64, sd: 0}, requests: 1500, arrival: {kind: poisson, rate: 30/s}}
    place: {servers: 0}
    recovery: {reload: 5s, failover_timeout: 4s}
faults:
  - {kind: random, component: chip, only: [gpu0.0, gpu0.2, gpu0.4, gpu0.6], ttf: {mean: 20s}, repair: {dist: exponential, mean: 10s}}
)";
  const Json m = run_text(yaml);
  const Json& r = m["serving"]["requests"];
  CHECK(r["retried"].get<long>() > 0);
  CHECK(r["re_prefilled"].get<long>() > 0);
  CHECK(m["serving"]["faults"]["replica_failures"].get<long>() > 0);
  CHECK(r["completed"].get<long>() + r["failed"].get<long>() + r["in_flight_at_end"].get<long>() == 1500);
  CHECK(m["serving"]["faults"]["availability"].get<double>() < 1.0);
  // One server, every replica down for good: the requests left fail after the timeout.
  const Json all = run_text(yaml, {"faults=[{kind: trace, events: [\"10s node:node0 down\"]}]"});
  const Json& ra = all["serving"]["requests"];
  CHECK(ra["failed"].get<long>() > 0);
  CHECK(ra["completed"].get<long>() + ra["failed"].get<long>() == 1500);
  CHECK(ra["completed"].get<long>() < 400);
}

TEST_CASE("the monkey runs every single-component failure and reports what breaks") {
  const std::string dir = std::string(SLUICE_TESTS_DIR) + "/../scenarios/";
  MonkeyOptions o;
  o.instants = 2;
  o.per_class = 2;
  o.repair_after_s = 1;
  const auto rep = run_monkey(dir + "spine-failure.yaml", {}, registry(), o);
  CHECK(rep.runs == static_cast<int>(rep.all.size()));
  CHECK(rep.runs >= 2 * 5);  // chip, host, node, rack, link, switch: at least 5 classes on a fat-tree
  CHECK(rep.hangs + rep.crashes + rep.invariants == 0);
  // A deployment that waits forever for a replica never repaired: the monkey reports it.
  MonkeyOptions never;
  never.instants = 1;
  never.per_class = 1;
  never.classes = {"node"};
  const auto bad = run_monkey(dir + "serving-failures-base.yaml", {"workloads.0.recovery.failover_timeout=0s", "workloads.0.deployment.replicas=1",
                                                                    "workloads.0.place.devices=[0]"},
                              registry(), never);
  CHECK(bad.runs == 1);
  CHECK(bad.stalls == 1);  // reported as a stall, the scenario's doing, not as a crash
  CHECK(bad.crashes == 0);
  CHECK(bad.all[0].outcome == "stall");
  CHECK(bad.all[0].message.find("never returns") != std::string::npos);
}

TEST_CASE("the serving short form takes faults too: a replica outage parks requests until reload") {
  Scenario sc = load_scenario(std::string(SLUICE_TESTS_DIR) + "/../scenarios/quickstart.yaml",
                              {"faults=[{kind: trace, events: [\"20s chip:gpu0.0 down\", \"40s chip:gpu0.0 up\"]}]", "recovery.reload=5s"},
                              registry());
  Recorder rec;
  run_into(sc, rec, {});
  const Json& s = rec.metrics()["serving"];
  CHECK(s["faults"]["replica_failures"] == 1);
  CHECK(s["requests"]["retried"].get<long>() > 0);
  CHECK(s["requests"]["completed"] == 150);
  // One replica, out from 20 s to 45 s (repair, then a 5 s reload): 25 s of its run.
  const double run_s = rec.metrics()["world"]["simulated_s"].get<double>();
  CHECK(s["faults"]["availability"].get<double>() == doctest::Approx(1 - 25.0 / run_s).epsilon(0.02));
  CHECK(s["faults"]["time_to_recover_s_mean"].get<double>() == doctest::Approx(25.0));
}

TEST_CASE("a slice re-formed during the run waits for its OCS circuits") {
  const std::string f = std::string(SLUICE_TESTS_DIR) + "/../scenarios/tpu-v4-training-faults.yaml";
  auto worst = [&](const std::string& reconf) {
    Scenario sc = load_scenario(f, {"workloads.0.recovery.restart=0s", "cluster.ocs_reconfigure=" + reconf}, registry());
    Recorder rec;
    run_into(sc, rec, {});
    const Json& t = rec.metrics()["training"];
    CHECK(t["faults"]["slices_reformed"] == 1);
    double w = 0;
    for (const auto& x : t["iteration_s"]) w = std::max(w, x.get<double>());
    return w;
  };
  const double instant = worst("0s"), slow = worst("1s");
  // The first iteration on the new circuits waits for them (some of the second is hidden behind compute).
  CHECK(slow > instant + 0.5);
  CHECK(slow < instant + 1.0 + 1e-6);
}
