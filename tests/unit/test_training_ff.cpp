// Training's steady-state fast-forward: iterations that repeat the last one exactly are
// counted without being simulated, and every output is the same as simulating each one.
#include <doctest/doctest.h>

#include "test_support.h"

#include "engine/event_queue.h"
#include "engine/run_control.h"
#include "network/flow.h"
#include "network/routing.h"
#include "network/topology.h"
#include "run/runner.h"

using namespace sluice;
using sluice::testing::registry;

namespace {

struct Ran {
  std::string metrics;
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<std::string> summary;
};

Ran run(const std::string& yaml, bool fast_forward, const std::vector<std::string>& sets = {}) {
  const RunControl::FastForward ff(fast_forward);
  Scenario sc = load_scenario_text(yaml, "t.yaml", sets, registry());
  Recorder rec;
  run_into(sc, rec, {});
  return {rec.metrics().dump(1), rec.files(), rec.summary_lines()};
}

// How many iterations the fast-forward counted, from the summary ("N iterations (...) ..." / 0).
long skipped(const Ran& r) {
  for (const auto& l : r.summary) {
    const auto p = l.find(" were counted without being simulated");
    if (p == std::string::npos) continue;
    size_t b = 0;
    while (b < l.size() && !std::isdigit(static_cast<unsigned char>(l[b]))) ++b;
    return std::stol(l.substr(b));
  }
  return 0;
}

// The count before `phrase` in the summary's fast-forward line ("...; N <phrase>"; 0: none).
long count_before(const Ran& r, const char* phrase) {
  for (const auto& l : r.summary) {
    const auto p = l.find(phrase);
    if (p == std::string::npos) continue;
    size_t b = l.rfind("; ", p);
    return b == std::string::npos ? -1 : std::stol(l.substr(b + 2));
  }
  return 0;
}

// How many times a restart (or an iteration another handler's event cut into) took a proven
// steady iteration as its last.
long resumed(const Ran& r) { return count_before(r, " times a restart or an interruption found the world as the proven iteration had"); }

// How many iterations a failure cut short were counted from the proven iteration's tape.
long partials(const Ran& r) { return count_before(r, " iterations a failure cut short were counted up to it from the proven iteration's tape"); }

void same(const Ran& a, const Ran& b) {
  CHECK(a.metrics == b.metrics);
  REQUIRE(a.files.size() == b.files.size());
  for (size_t i = 0; i < a.files.size(); ++i) {
    CAPTURE(a.files[i].first);
    CHECK(a.files[i] == b.files[i]);
  }
}

// 32 GPUs on four leaves (16-port switches) joined by two spines: a TP2 x PP2 x DP4 job on
// servers 0-1 (a pipeline rank a server: its hand-offs cross the spines), a small chat deployment on server 3.
// The job's shape, shared by the tests' jobs (each adds its name, iterations, place, recovery).
const char* kTinyJob = R"(
    kind: training
    model: tinyllama-1.1b
    cost_tables: none
    parallel: {tp: 2, pp: 2, dp: 4, micro_batches: 4}
    sequence: 512)";

const std::string kWorld = std::string(R"(
name: ff
seed: 7
cluster:
  topology: {catalog: fat-tree, name: ft32, servers: 4, switch_radix: 16}
  hardware: h100-sxm
workloads:
  - name: pretrain)") + kTinyJob + R"(
    iterations: 1200
    place: {servers: [0-1]}
    recovery: {checkpoint_interval: 2s, checkpoint_write: 150ms, restart: 400ms, collective_timeout: 1s}
)";

const char* kChat = R"(
  - name: chat
    kind: serving
    model: tinyllama-1.1b
    deployment: {replicas: 1, tensor_parallel: 2}
    workload:
      kind: llmperf
      input_tokens: {mean: 256, sd: 0}
      output_tokens: {mean: 16, sd: 0}
      requests: 12
      arrival: {kind: poisson, rate: 4/s}
    place: {devices: [24-25]}
)";

// (The spine fails at an instant when pipeline hand-offs are on it: only they cross the spines,
// each pair's on one path every micro-batch, tens of microseconds each.)
const char* kFaults = R"(
faults:
  - {name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 60s}, repair: {dist: fixed, mean: 1s}}
  - {kind: trace, events: ["3.0072s switch:spine0 down", "7s switch:spine0 up"]}
)";

}  // namespace

TEST_CASE("training fast-forward: a lone job's repeated iterations are counted, with the same outputs as simulating each") {
  const std::string yaml = kWorld;
  const Ran ff = run(yaml, true), full = run(yaml, false);
  same(ff, full);
  CHECK(skipped(full) == 0);
  // Iterations 2 and 3 establish the steady state (the first is never taken as alone: the
  // workloads and fault processes that start after it had no events pending yet); the other
  // 1197 are counted at once.
  CHECK(skipped(ff) == 1197);
  // The same with ZeRO's reduce-scatter and all-gather and with interleaved virtual stages.
  for (const std::vector<std::string>& sets : {std::vector<std::string>{"workloads.0.parallel.zero=2"},
                                              std::vector<std::string>{"workloads.0.parallel.virtual_stages=2"}}) {
    CAPTURE(sets[0]);
    const Ran a = run(yaml, true, sets), b = run(yaml, false, sets);
    same(a, b);
    CHECK(skipped(a) == 1197);
  }
}

TEST_CASE("training fast-forward: the same outputs under chip failures, a spine outage, checkpoints and a watchdog") {
  const std::string yaml = std::string(kWorld) + kFaults;
  const Ran ff = run(yaml, true), full = run(yaml, false);
  same(ff, full);
  const Json m = Json::parse(ff.metrics);
  const Json& f = m["training"]["faults"];
  CHECK(f["failures"].get<int>() >= 3);   // the job failed and restarted several times ...
  CHECK(f["checkpoints"].get<int>() >= 5);  // ... and wrote checkpoints between
  CHECK(m["world"]["faults"]["flows_rerouted"].get<int>() + m["world"]["faults"]["flows_stalled"].get<int>() > 0);
  // Every interruption has its cause, the fault process that failed a device (the spine's
  // trace fails no device), and the causes' lost and recovering time add up to the totals.
  const Json& by = f["by_cause"];
  REQUIRE(by.size() == 1);
  CHECK(by["gpus"]["interruptions"] == f["failures"]);
  CHECK(by["gpus"]["lost_s"].get<double>() == doctest::Approx(f["lost_s"].get<double>()));
  CHECK(by["gpus"]["recovering_s"].get<double>() == doctest::Approx(f["recovering_s"].get<double>()));
  CHECK(skipped(ff) > 600);  // most iterations still counted at once
  // Restarts after the spine is back find the fabric and devices as the proven iteration did
  // and count on at once (none during the outage: the spine's links are down, another state).
  CHECK(resumed(ff) >= 1);
  CHECK(resumed(full) == 0);
  // A failure that cuts an iteration of the proven state short is foreseen at the iteration's
  // start: the job stands for the iteration up to it from the proven iteration's tape, and
  // every interruption but those in the spine's outage (another state) and the first (before
  // the tape) is counted so, with the same outputs as simulating each.
  MESSAGE("failures " << f["failures"] << ", partial iterations from tape " << partials(ff));
  CHECK(partials(ff) >= f["failures"].get<int>() - 3);
  CHECK(partials(full) == 0);
}

TEST_CASE("training fast-forward: iterations a failure cuts short are counted from the proven iteration's tape, with the same outputs") {
  const std::string yaml = std::string(kWorld) + R"(
faults:
  - {name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 60s}, repair: {dist: fixed, mean: 1s}}
)";
  // ZeRO's sharded collectives, ZeRO-3's gathers, interleaved stages, a whole server failing,
  // checkpoints written to storage over the fabric (the tape holds the job's state at its start,
  // the fabric's counts at every instant and every flow's bytes on every link).
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{}, std::vector<std::string>{"workloads.0.parallel.zero=2"}, std::vector<std::string>{"workloads.0.parallel.zero=3"},
        std::vector<std::string>{"workloads.0.parallel.virtual_stages=2"},
        std::vector<std::string>{"faults.0.component=node", "faults.0.ttf.mean=20s"},
        std::vector<std::string>{"cluster.storage_servers=2", "cluster.topology.switch_radix=24", "cluster.storage_bandwidth=20GB/s", "workloads.0.recovery.checkpoint_to=storage"},
        std::vector<std::string>{"workloads.0.trace=true"}}) {
    const std::string label = sets.empty() ? std::string("chip failures") : sets[0];
    CAPTURE(label);
    const Ran a = run(yaml, true, sets), b = run(yaml, false, sets);
    same(a, b);
    const long failures = Json::parse(a.metrics)["training"]["faults"]["failures"].get<long>();
    MESSAGE("failures " << failures << ", from tape " << partials(a));
    CHECK(failures >= 3);
    CHECK(partials(a) >= failures - 2);  // all but those before the tape was proven
    CHECK(partials(b) == 0);
  }
  // Traced, and restarting from the first iteration each time (no checkpoint yet): the first two
  // iterations after a restart write their ops to the trace, so a failure cutting one of them is
  // simulated (the trace file the same as the full simulation's), the others stood in.
  {
    const std::vector<std::string> traced{"workloads.0.trace=true", "workloads.0.recovery.checkpoint_interval=1000s", "workloads.0.recovery.restart=10ms",
                                          "faults.0.repair.mean=1ms", "faults.0.ttf.mean=5s", "max_sim_time=10s"};
    const Ran a = run(yaml, true, traced), b = run(yaml, false, traced);
    same(a, b);
    const long failures = Json::parse(a.metrics)["training"]["faults"]["failures"].get<long>();
    MESSAGE("traced: failures " << failures << ", from tape " << partials(a));
    CHECK(partials(a) > failures / 2);
    CHECK(partials(a) < failures - 1);
  }
  // A watchdog whose timeout is shorter than the iteration: the stand-in moves no progress mark,
  // so it is not used (nor is the skip); the outputs are the same.
  const std::vector<std::string> short_watchdog{"workloads.0.recovery.collective_timeout=15ms"};
  const Ran a = run(yaml, true, short_watchdog), b = run(yaml, false, short_watchdog);
  same(a, b);
  CHECK(partials(a) == 0);
  CHECK(Json::parse(a.metrics)["training"]["faults"]["failures"].get<int>() >= 3);
}

TEST_CASE("training fast-forward: the same outputs with a serving deployment beside it, skipping only once it is idle") {
  const std::string yaml = std::string(kWorld) + kChat + kFaults;
  const Ran ff = run(yaml, true), full = run(yaml, false);
  same(ff, full);
  CHECK(skipped(ff) > 0);
  // With the deployment serving all run long (a request every 10 ms on average, an iteration
  // takes 21 ms), a skip fits only where its replica waits for a repair or the arrivals leave
  // a long gap (a lone iteration's state then proven, skipping resumes at once); the outputs
  // are still the same.
  const std::vector<std::string> busy_sets{"workloads.1.workload.requests=100000", "workloads.1.workload.arrival.rate=100/s"};
  const Ran busy = run(yaml, true, busy_sets);
  same(busy, run(yaml, false, busy_sets));
  MESSAGE("skipped alone " << skipped(ff) << ", beside a busy deployment " << skipped(busy));
  CHECK(skipped(busy) * 10 < skipped(ff));
  // Failures once the deployment is idle (its trace on, as by default) are foreseen too.
  MESSAGE("partial iterations from tape " << partials(ff));
  CHECK(partials(ff) > 0);
  CHECK(partials(full) == 0);
}

TEST_CASE("training fast-forward: a run's horizon (max_sim_time) cuts a skip where the full simulation stops") {
  const std::string yaml = std::string(kWorld) + kChat + "max_sim_time: 9s\n";
  const Ran ff = run(yaml, true, {"workloads.0.iterations=0"}), full = run(yaml, false, {"workloads.0.iterations=0"});
  same(ff, full);
}

TEST_CASE("a fabric ledger replayed n times equals n repetitions, in exact sums") {
  Engine e(1);
  net::Topology t("line");
  const int a = t.add_node({"a", net::NodeKind::Device});
  const int b = t.add_node({"b", net::NodeKind::Device});
  t.add_link(a, b, 3e9, 0);
  net::Router router(t);
  net::FlowSim repeated(e, t, router);
  const net::FlowLedger start = repeated.ledger();
  for (int i = 0; i < 5; ++i) {
    repeated.start(a, b, 1e6 / 3.0, nullptr, 0);
    e.run();
  }
  Engine e2(1);
  net::FlowSim once(e2, t, router);
  const net::FlowLedger before = once.ledger();
  once.start(a, b, 1e6 / 3.0, nullptr, 0);
  e2.run();
  CHECK(once.still());
  once.replay(net::FlowLedger::between(before, once.ledger()), 4);
  CHECK(once.ledger() == repeated.ledger());
  CHECK(once.stats().bytes_started == repeated.stats().bytes_started);
  CHECK(once.carried_link_bytes() == repeated.carried_link_bytes());
  CHECK(net::FlowLedger::between(start, repeated.ledger()).counts[0] == 5);  // FlowStats::started
}

TEST_CASE("a training job that is done stops its watchdog: it neither fails afterwards nor ends the run for a job still training") {
  // Job a is done after 50 iterations, job b trains 400 on other servers; both watch their
  // collectives (1 s) in a world with a fault process that fails nothing in the run.
  const std::string yaml = kWorld + "  - name: second" + kTinyJob + R"(
    iterations: 400
    place: {servers: [2-3]}
    recovery: {collective_timeout: 1s}
faults:
  - {name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 10000d}, repair: {dist: fixed, mean: 1s}}
)";
  for (bool fast : {true, false}) {
    CAPTURE(fast);
    const Json m = Json::parse(run(yaml, fast, {"workloads.0.iterations=50"}).metrics);
    CHECK(m["workloads"]["pretrain"]["iterations"] == 50);
    CHECK_FALSE(m["workloads"]["pretrain"]["faults"]["failed"].get<bool>());
    CHECK(m["workloads"]["second"]["iterations"] == 400);
    CHECK_FALSE(m["workloads"]["second"]["faults"]["failed"].get<bool>());
  }
}
