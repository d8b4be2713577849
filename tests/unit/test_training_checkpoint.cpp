// Checkpoints written to storage over the fabric (issue 25): storage servers in the topology,
// each device's share of the checkpoint a flow to one of them, the write as long as its last
// byte takes. By hand on a star whose storage link is the bottleneck; with the fast-forward on
// and off; refused without storage servers.
#include <doctest/doctest.h>

#include "test_support.h"

#include "config/error.h"
#include "hardware/spec.h"
#include "workloads/training/training.h"
#include "engine/run_control.h"
#include "run/runner.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// Four devices on one switch (100 GB/s each, no latency), `servers` storage servers on that
// switch at `bw`; a 4-way data-parallel job of a flat model, a checkpoint after every
// iteration, and a fault process that never fires within the run (checkpoints are taken only
// in a world with faults).
std::string star(int servers, const std::string& bw, const std::string& to = "storage", int iterations = 6,
                 const std::string& interval = "1ns") {
  return std::string(sluice::testing::kFourDeviceStar) + "  storage_servers: " + std::to_string(servers) + "\n  storage_bandwidth: " + bw +
         R"(
workloads:
  - {name: j, kind: training, sequence: 512, cost_tables: none, iterations: )" +
         std::to_string(iterations) + R"(,
     model: {name: flat, layers: 4, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: 512},
     parallel: {tp: 1, pp: 1, dp: 4, micro_batches: 2},
     recovery: {checkpoint_interval: )" +
         interval + R"(, checkpoint_to: )" +
         to + R"(, checkpoint_write: 7s}}
faults:
  - {name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 100000d}, repair: {dist: fixed, mean: 1s}}
)";
}

// flat: 4 layers of 4·h² (attention) + 3·h·ffn (gated MLP) parameters, plus 2·8·h.
constexpr double kH = 4096;
constexpr double kParams = 4 * (4 * kH * kH + 3 * kH * 16384) + 2 * 8 * kH;

}  // namespace

TEST_CASE("checkpoint to storage: bf16 weights and fp32 Adam state once, written at the storage link's rate") {
  const Json m = run_text(star(1, "10GB/s"))["training"];
  const Json& f = m["faults"];
  // 14 bytes a parameter (2 of bf16 weights, 12 of master, m and v), the model once: each of
  // the 4 replicas writes a quarter.
  CHECK(f["checkpoint_bytes"].get<double>() == doctest::Approx(14 * kParams).epsilon(0.01));
  // Four flows share the one 10 GB/s storage link (the devices' own links carry 100 GB/s):
  // they end together after the bytes over 10 GB/s, plus the storage link's 500 ns.
  const double expect = f["checkpoint_bytes"].get<double>() / 10e9 + 500e-9;
  CHECK(f["checkpoint_write_s_mean"].get<double>() == doctest::Approx(expect).epsilon(1e-6));
  // A checkpoint after every iteration but the last (the job ends there): 5 writes.
  CHECK(f["checkpoints"] == 5);
  CHECK(f["checkpoint_s"].get<double>() == doctest::Approx(5 * expect).epsilon(1e-6));
  // Twice the storage servers (each on the switch): half the time per write.
  const Json two = run_text(star(2, "10GB/s"))["training"]["faults"];
  CHECK(two["checkpoint_write_s_mean"].get<double>() == doctest::Approx(f["checkpoint_bytes"].get<double>() / 20e9 + 500e-9).epsilon(1e-6));
  // A pause instead: the fixed 7 s each, and no storage figures.
  const Json pause = run_text(star(1, "10GB/s", "pause"))["training"]["faults"];
  CHECK(pause["checkpoint_s"].get<double>() == doctest::Approx(5 * 7.0));
  CHECK_FALSE(pause.contains("checkpoint_bytes"));
}

TEST_CASE("checkpoint to storage: the same bytes with the fast-forward on and off") {
  // Iterations of about 51 ms, a checkpoint every second: two writes, the iterations between
  // them counted by the fast-forward (57 of 60) when it is on.
  const Json m = testing::same_with_and_without_fast_forward(star(1, "10GB/s", "storage", 60, "1s"));
  CHECK(m["training"]["faults"]["checkpoints"] == 2);
}

TEST_CASE("checkpoint to storage: writes that repeat from one state are counted at once, with the same outputs as writing each, around a failure") {
  // A write (1.5 s: 15 GB over the one 10 GB/s storage link) after every 150 ms of training,
  // a chip down from 1.3 s to 1.5 s: the job restarts 200 ms after, on the same fabric. The
  // first two writes prove what a write from the healthy fabric does; the one the failure
  // cuts short is written with flows (the failure is another handler's event within it) and
  // lost as it would be; every other write, after the restart too, is counted at once.
  const std::string yaml = star(1, "10GB/s", "storage, restart: 200ms", 60, "150ms") +
                           "  - {kind: trace, events: [\"1.3s chip:d1 down\", \"1.5s chip:d1 up\"]}\n";
  struct Out {
    std::string metrics;
    long replayed = 0;
  };
  const auto run = [&](bool on) {
    const RunControl::FastForward ff(on);
    Scenario sc = load_scenario_text(yaml, "t.yaml", {}, sluice::testing::registry());
    Recorder rec;
    run_into(sc, rec, {});
    Out o{rec.metrics().dump(1)};
    for (const auto& l : rec.summary_lines()) {
      const auto p = l.find(" writes repeated the one before");
      if (p != std::string::npos) o.replayed = std::stol(l.substr(l.rfind('(', p) + 1));
    }
    return o;
  };
  const Out on = run(true), off = run(false);
  CHECK(on.metrics == off.metrics);
  const Json f = Json::parse(on.metrics)["training"]["faults"];
  CHECK(f["failures"] == 1);
  CHECK(f["checkpoints"].get<int>() >= 10);
  CHECK(off.replayed == 0);
  CHECK(on.replayed == f["checkpoints"].get<int>() - 2);
}

TEST_CASE("checkpoint to storage: refused without storage servers, and storage refused on a fabric without switches") {
  CHECK_THROWS_WITH_AS(run_text(star(0, "10GB/s")), doctest::Contains("checkpoint_to"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(R"(name: t
cluster: {topology: torus-2d, storage_servers: 2}
workloads:
  - {name: j, kind: training, model: tinyllama-1.1b, cost_tables: none, parallel: {tp: 1, pp: 1, dp: 4}, place: {devices: [0-3]}}
)"),
                       doctest::Contains("storage_servers"), ConfigError);
}

TEST_CASE("checkpoint to storage: an expert-parallel job writes every expert once") {
  // Mixtral-8x7B at TP2 x DP32 with EP8: each device holds 1/8 of the routed experts, and the
  // 32 replicas are 4 copies of 8 different expert sets; the checkpoint is the whole model once.
  training::TrainingConfig c;
  c.model = load_model("mixtral-8x7b");
  c.tp = 2, c.pp = 1, c.dp = 32, c.ep = 8;
  const double all = training::checkpoint_bytes_per_device(c) * c.tp * c.pp * c.dp;
  CHECK(all == doctest::Approx(c.model.parameters() * (c.model.dtype_bytes + 12)));
  CHECK(c.model.parameters() > 4e10);  // 46.7B: the experts are most of it
}

TEST_CASE("storage servers: spread over the top tier within each switch's radix, refused where no port is free") {
  const auto world = [](const std::string& topo, int servers) {
    return run_text("name: t\ncluster: {topology: " + topo + ", storage_servers: " + std::to_string(servers) + R"(}
workloads:
  - {name: j, kind: training, model: tinyllama-1.1b, cost_tables: none, parallel: {tp: 8, pp: 1, dp: 1}, place: {servers: [0]}}
)");
  };
  // A non-blocking fat-tree's spines have every port on a leaf: no room.
  CHECK_THROWS_WITH_AS(world("fat-tree", 2), doctest::Contains("storage_servers"), ConfigError);
  // Oversubscribed 3:1, the spines have free ports; on the multi-plane, 8 servers spread over its planes.
  CHECK_NOTHROW(world("{catalog: fat-tree, oversubscription: 3}", 2));
  CHECK_NOTHROW(world("{catalog: multi-plane, servers: 128, oversubscription: 3}", 8));
}
