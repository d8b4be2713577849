// Failures in a disaggregated deployment: a decode device lost during a KV copy (the copy goes
// to another decode replica, the prompt is not prefilled again), a prefill device lost during
// it (the prompt is prefilled again elsewhere), the whole decode pool lost (requests wait
// parked for it), each on a hand-computed case; and random node failures on a larger run, with
// requests conserved and the same results with or without the steady-decode fast-forward.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "config/node.h"
#include "engine/run_control.h"
#include "hardware/cost_model.h"
#include "registry/registry.h"
#include "workloads/serving/serving_sim.h"

using namespace sluice;
using sluice::testing::registry;
using sluice::testing::run_text;

namespace {

// Two prefill devices d0, d1 on switch s0; two decode devices d2, d3 on s1; the switches joined
// by one 10 GB/s link; no latency anywhere. Replicas: prefill d0, d1; decode d2, d3.
std::string cluster(const std::string& faults) {
  return R"(name: t
cluster:
  hardware: h200
  topology:
    kind: explicit
    nodes:
      - {name: s0, kind: switch}
      - {name: s1, kind: switch}
      - {name: d0, kind: device, group: 0}
      - {name: d1, kind: device, group: 1}
      - {name: d2, kind: device, group: 2}
      - {name: d3, kind: device, group: 3}
    links:
      - {a: d0, b: s0, bandwidth: 1000GB/s, latency: 0ns}
      - {a: d1, b: s0, bandwidth: 1000GB/s, latency: 0ns}
      - {a: d2, b: s1, bandwidth: 1000GB/s, latency: 0ns}
      - {a: d3, b: s1, bandwidth: 1000GB/s, latency: 0ns}
      - {a: s0, b: s1, bandwidth: 10GB/s, latency: 0ns}
workloads:
  - name: chat
    kind: serving
    model: tinyllama-1.1b
    deployment: {replicas: 4, prefill_replicas: 2, cost_tables: none}
    scheduler: {kind: vllm}
    router: {kind: round_robin}
    decode_router: {kind: round_robin}
    workload: {kind: llmperf, requests: 1, input_tokens: {mean: 1000, sd: 0}, output_tokens: {mean: 4, sd: 0}, arrival: {kind: closed_loop, clients: 1}}
    last_mile: {d2h: fixed, d2h_latency: 0us, detokenize_per_token: 7us, stream_per_token: 3us}
    outputs: {trace: false}
    recovery: {reload: 1s, failover_timeout: 600s}
    place: {devices: [0, 1, 2, 3]}
faults:
  - {kind: trace, events: [)" + faults + "]}\n";
}

// TinyLlama's prefill of 999 tokens and its first decode step (with the last mile), ns, as the
// deployment costs them (the roofline).
std::pair<int64_t, int64_t> prefill_and_first_ns() {
  const auto node = load_yaml_string("model: tinyllama-1.1b\nhardware: h200\ndeployment: {cost_tables: none}\n"
                                     "workload: {kind: llmperf, requests: 1}\n", "c.yaml");
  auto parsed = registry().parse(node, "study", "", "serving");
  const serving::ServingConfig cfg = serving::build_serving_config(parsed.params, registry(), 1, nullptr);
  const CostModel cost(cfg.hardware, cfg.model, CostOptions{1, 1, ""});
  std::vector<SeqWork> prefill{{999, 0, true}}, first{{1, 999, true}};
  auto t = [](double ns) { return std::max<int64_t>(1, std::llround(ns)); };
  return {t(cost.iteration_ns(prefill)), t(cost.iteration_ns(first)) + 10'000};
}

constexpr double kCopyNs = 999.0 * 22528 / 10;  // 999 tokens x 22,528 bytes over 10 GB/s: 0.1 ns a byte

double ttft_ns(const Json& m) { return m["latency_ms"]["ttft"]["p50"].get<double>() * 1e6; }

}  // namespace

TEST_CASE("a decode device lost during a KV copy: the copy starts over to another decode replica, the prompt is not prefilled again") {
  const auto [prefill, first] = prefill_and_first_ns();
  const int64_t fail = prefill + 1'000'000;  // 1 ms into the copy to d2
  const Json m = run_text(cluster(fmt::format("\"{}ns chip:d2 down\"", fail)))["serving"];
  CHECK(m["requests"]["completed"] == 1);
  CHECK(m["requests"]["retried"] == 0);
  CHECK(m["requests"]["re_prefilled"] == 0);
  CHECK(m["disaggregation"]["kv_transfers"] == 1);
  CHECK(m["disaggregation"]["kv_transfer_bytes"].get<double>() == 999.0 * 22528);  // the voided copy is not counted
  // The whole copy again, to d3, from the failure on (the first copy's flows stall at the dead device).
  CHECK(ttft_ns(m) == doctest::Approx(static_cast<double>(fail + first) + kCopyNs).epsilon(1e-7));
}

TEST_CASE("a prefill device lost during a KV copy: its KV cache is gone, the prompt is prefilled again on the other prefill replica") {
  const auto [prefill, first] = prefill_and_first_ns();
  const int64_t fail = prefill + 1'000'000;
  const Json m = run_text(cluster(fmt::format("\"{}ns chip:d0 down\"", fail)))["serving"];
  CHECK(m["requests"]["completed"] == 1);
  CHECK(m["requests"]["retried"] == 1);
  CHECK(m["requests"]["re_prefilled"] == 1);
  CHECK(m["disaggregation"]["kv_transfers"] == 1);
  // d1 prefills it from the failure, then the copy to the next decode replica (d3: round robin).
  CHECK(ttft_ns(m) == doctest::Approx(static_cast<double>(fail + prefill + first) + kCopyNs).epsilon(1e-7));
  // Nothing is left held: d2's blocks for the voided copy were given back.
  CHECK(m["kv_cache"]["occupancy_max"].get<double>() < 0.01);
}

TEST_CASE("the whole decode pool lost: a prefilled prompt waits parked until a decode replica is back, then is prefilled again") {
  const auto [prefill, first] = prefill_and_first_ns();
  const int64_t fail = prefill + 1'000'000, up = fail + 100'000'000;  // both decode devices; d3 back 100 ms later
  const Json m = run_text(cluster(fmt::format("\"{0}ns chip:d2 down\", \"{0}ns chip:d3 down\", \"{1}ns chip:d3 up\"", fail, up)))["serving"];
  CHECK(m["requests"]["completed"] == 1);
  CHECK(m["requests"]["failed"] == 0);
  CHECK(m["requests"]["re_prefilled"] == 1);
  // After d3's repair and its 1 s reload the prompt is prefilled again (on d1, round robin) and copied to d3.
  CHECK(ttft_ns(m) == doctest::Approx(static_cast<double>(up + 1'000'000'000 + prefill + first) + kCopyNs).epsilon(1e-7));
}

TEST_CASE("random node failures in a disaggregated deployment: every request answered or failed, the same results with or without the fast-forward") {
  const std::string text = slurp((std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios/serving-failures-base.yaml").string());
  // Failures every 20 s on one of the 8 servers, repaired in 3 s, reloaded in 2 s: some of them
  // land on KV copies in flight (their flows stall at the dead device).
  const std::vector<std::string> sets = {"workloads.0.deployment.prefill_replicas=3", "workloads.0.workload.requests=3000",
                                         "faults.0.ttf.mean=20s", "faults.0.repair.mean=3s", "workloads.0.recovery.reload=2s"};
  int64_t stalled = 0;
  for (const char* mode : {"whole", "layerwise"}) {
    CAPTURE(mode);
    auto s = sets;
    s.push_back(std::string("workloads.0.deployment.kv_transfer=") + mode);
    const Json on = run_text(text, s);
    const Json off = [&] {
      const RunControl::FastForward no(false);
      return run_text(text, s);
    }();
    const Json& m = on["serving"];
    CHECK(m["faults"]["replica_failures"].get<int>() >= 5);
    CHECK(m["requests"]["retried"].get<int>() > 0);
    CHECK(m["requests"]["completed"].get<int>() + m["requests"]["failed"].get<int>() == 3000);
    CHECK(on.dump() == off.dump());
    stalled += on["world"]["faults"]["flows_stalled"].get<int64_t>();
  }
  CHECK(stalled > 0);
}

TEST_CASE("a request parked for want of a decode replica keeps its first failover deadline when a prefill replica's repair re-parks it") {
  const auto [prefill, first] = prefill_and_first_ns();
  (void)first;
  const int64_t fail = prefill + 1'000'000;
  // The decode pool is lost for good; prefill device d1 fails and is back (reloaded in 1 ms) 3 ms later, which re-parks the request.
  const Json m = run_text(cluster(fmt::format("\"{0}ns chip:d2 down\", \"{0}ns chip:d3 down\", \"{1}ns chip:d1 down\", \"{2}ns chip:d1 up\"",
                                              fail, fail + 1'000'000, fail + 2'000'000)),
                          {"workloads.0.recovery.reload=1ms", "workloads.0.recovery.failover_timeout=50ms"})["serving"];
  CHECK(m["requests"]["failed"] == 1);
  // It fails 50 ms after it was first parked, not 50 ms after the repair.
  CHECK(m["simulated_s"].get<double>() == doctest::Approx(static_cast<double>(fail + 50'000'000) / 1e9).epsilon(1e-12));
}
