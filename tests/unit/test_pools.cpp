// Disaggregation with a prefill pool of its own (deployment.prefill_pool): another device type
// on servers of its own, another tensor parallelism, another scheduler. TTFT on a hand-computed
// case with each phase costed on its own device, the KV copy split over the larger side's
// devices, each pool's memory plan, and bad input.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>

#include "config/node.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"
#include "registry/registry.h"
#include "workloads/serving/serving_sim.h"

using namespace sluice;
using sluice::testing::registry;
using sluice::testing::run_text;

namespace {

// One request of 1000 prompt tokens and 4 answer tokens, alone.
const char* kShortForm = R"(name: t
model: tinyllama-1.1b
hardware: h200
deployment:
  replicas: 2
  prefill_replicas: 1
  nodes: 1
  gpus_per_node: 1
  cost_tables: none
  prefill_pool: {hardware: a100-80gb, cost_tables: none}
workload: {kind: llmperf, requests: 1, input_tokens: {mean: 1000, sd: 0}, output_tokens: {mean: 4, sd: 0}, arrival: {kind: closed_loop, clients: 1}}
last_mile: {d2h: fixed, d2h_latency: 0us, detokenize_per_token: 7us, stream_per_token: 3us}
outputs: {trace: false}
)";

// One iteration of `work` on `hw` as the deployment costs it (the roofline; whole ns, at least 1).
int64_t iteration_ns(const std::string& hw, std::vector<SeqWork> work, int tp = 1) {
  const HardwareSpec h = load_hardware(hw);
  const auto model_node = load_yaml_string("model: tinyllama-1.1b\nworkload: {kind: llmperf, requests: 1}\n", "c.yaml");
  auto parsed = registry().parse(model_node, "study", "", "serving");
  const serving::ServingConfig cfg = serving::build_serving_config(parsed.params, registry(), 1, nullptr);
  const CostModel cost(h, cfg.model, CostOptions{tp, 1, ""});
  return std::max<int64_t>(1, std::llround(cost.iteration_ns(work)));
}

}  // namespace

TEST_CASE("a prefill pool of another device type: the prompt prefills on it, its KV crosses the NICs, decode runs on the deployment's (hand-computed)") {
  const Json m = run_text(kShortForm)["serving"];
  const Json& dep = m["deployment"];
  CHECK(dep["hardware"] == "h200");
  CHECK(dep["prefill_pool"]["hardware"] == "a100-80gb");
  CHECK(dep["prefill_pool"]["tensor_parallel"] == 1);
  // Two servers of one GPU each (an A100's, then an H200's) joined by the cluster switch.
  CHECK(dep["topology"] == "1x1 a100-80gb + 1x1 h200");
  const Json& d = m["disaggregation"];
  REQUIRE(d["kv_transfers"] == 1);
  const double bytes = d["kv_transfer_bytes"].get<double>();
  CHECK(bytes == doctest::Approx(999 * 22528.0));
  // The copy crosses two 400 Gb/s NIC links (A100 -> switch -> H200), 500 ns of latency each.
  const double copy_ms = d["kv_transfer_ms"]["mean"].get<double>();
  CHECK(copy_ms == doctest::Approx(bytes / 50e9 * 1e3 + 2 * 500e-6).epsilon(1e-6));
  // TTFT: the prefill of 999 tokens on the A100, the copy, the first step on the H200 with the last mile.
  const int64_t prefill = iteration_ns("a100-80gb", {{999, 0, true}});
  const int64_t first = iteration_ns("h200", {{1, 999, true}});
  CHECK(prefill != iteration_ns("h200", {{999, 0, true}}));  // the A100 is slower: the pool is costed on its own device
  CHECK(m["latency_ms"]["ttft"]["p50"].get<double>() == doctest::Approx(static_cast<double>(prefill + first + 10'000) / 1e6 + copy_ms).epsilon(1e-9));
  // Each pool's memory plan: the A100's 80 GB hold fewer tokens of KV than the H200's 141 GB.
  const double a100_tokens = dep["prefill_pool"]["kv_tokens_per_replica"].get<double>();
  const double h200_tokens = m["kv_cache"]["tokens_per_replica"].get<double>();
  CHECK(a100_tokens < 0.6 * h200_tokens);
  CHECK(a100_tokens > 0.4 * h200_tokens);
  // Goodput per GPU counts both pools' GPUs.
  CHECK(d["prefill"]["gpus"] == 1);
  CHECK(d["decode"]["gpus"] == 1);
}

TEST_CASE("pools of different tensor parallelism: the KV copy is cut over the larger side's devices, each piece to the device that holds its heads") {
  // One prefill device d0 and a decode pair d2, d3 whose own links are the bottleneck (10 GB/s each).
  const std::string text = R"(name: t
cluster:
  hardware: h200
  topology:
    kind: explicit
    nodes:
      - {name: s0, kind: switch}
      - {name: s1, kind: switch}
      - {name: d0, kind: device, group: 0}
      - {name: d1, kind: device, group: 0}
      - {name: d2, kind: device, group: 1}
      - {name: d3, kind: device, group: 1}
    links:
      - {a: d0, b: s0, bandwidth: 1000GB/s, latency: 0ns}
      - {a: d1, b: s0, bandwidth: 1000GB/s, latency: 0ns}
      - {a: d2, b: s1, bandwidth: 10GB/s, latency: 0ns}
      - {a: d3, b: s1, bandwidth: 10GB/s, latency: 0ns}
      - {a: s0, b: s1, bandwidth: 1000GB/s, latency: 0ns}
workloads:
  - name: chat
    kind: serving
    model: tinyllama-1.1b
    deployment: {replicas: 2, prefill_replicas: 1, tensor_parallel: 2, prefill_pool: {tensor_parallel: 1}, cost_tables: none}
    workload: {kind: llmperf, requests: 1, input_tokens: {mean: 1000, sd: 0}, output_tokens: {mean: 4, sd: 0}, arrival: {kind: closed_loop, clients: 1}}
    outputs: {trace: false}
    place: {devices: [0, 2, 3]}
)";
  const Json m = run_text(text)["serving"];
  const Json& d = m["disaggregation"];
  REQUIRE(d["kv_transfers"] == 1);
  const double bytes = d["kv_transfer_bytes"].get<double>();
  // Half to each decode device, over their two links at once: twice one link's rate.
  CHECK(d["kv_transfer_ms"]["mean"].get<double>() == doctest::Approx(bytes / 20e9 * 1e3).epsilon(1e-6));
  CHECK(m["deployment"]["prefill_pool"]["tensor_parallel"] == 1);
  CHECK(d["prefill"]["gpus"] == 1);
  CHECK(d["decode"]["gpus"] == 2);
  // The prefill on one device, costed at tp 1: TTFT holds it whole (no all-reduce on the prefill side).
  const int64_t prefill = iteration_ns("h200", {{999, 0, true}}, 1);
  CHECK(m["latency_ms"]["ttft"]["p50"].get<double>() > static_cast<double>(prefill) / 1e6 + bytes / 20e9 * 1e3);
  CHECK(m["requests"]["completed"] == 1);
}

TEST_CASE("a prefill pool of its own scheduler and parallelism serves a load: requests conserved, the pools' GPUs counted apart") {
  const std::string load = "{kind: llmperf, requests: 60, input_tokens: {mean: 1500, sd: 200}, output_tokens: {mean: 32, sd: 4}, "
                           "arrival: {kind: poisson, rate: 30/s}}";
  const std::string base = std::string(R"(name: t
model: llama3-8b
hardware: h200
deployment: {replicas: 3, prefill_replicas: 1, cost_tables: none, prefill_pool: {tensor_parallel: 2, scheduler: {kind: sarathi, token_budget: 1024}}}
outputs: {trace: false}
slo: {ttft: 10s, tpot: 1s}
workload: )") + load + "\n";
  const Json m = run_text(base)["serving"];
  CHECK(m["requests"]["completed"] == 60);
  CHECK(m["disaggregation"]["kv_transfers"] == 60);
  CHECK(m["deployment"]["prefill_pool"]["scheduler"] == "sarathi");
  CHECK(m["slo"]["gpus"] == 4);  // one prefill replica of 2 GPUs and two decode replicas of 1
  // Sarathi's 1024-token budget chunks every prompt: the prefill pool runs more iterations than prompts.
  CHECK(m["disaggregation"]["prefill"]["iterations"].get<int>() > 60);
  // The same run with the deployment's scheduler everywhere prefills each prompt in one go.
  const Json plain = run_text(base, {"deployment.prefill_pool.scheduler=vllm"})["serving"];
  CHECK(plain["disaggregation"]["prefill"]["iterations"].get<int>() <= 60);
}

TEST_CASE("a prefill pool's bad input is refused at its key") {
  const std::string base = R"(name: t
model: tinyllama-1.1b
deployment: {replicas: 2, prefill_replicas: 1, cost_tables: none}
workload: {kind: llmperf, requests: 4}
)";
  auto error = [&](std::vector<std::string> sets) {
    try {
      run_text(base, sets);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(error({"deployment.prefill_replicas=0", "deployment.prefill_pool.tensor_parallel=2"}).find("deployment.prefill_pool.tensor_parallel") !=
        std::string::npos);
  CHECK(error({"deployment.prefill_pool.tensor_parallel=3"}).find("split them evenly") != std::string::npos);
  CHECK(error({"deployment.prefill_pool.nodes=2"}).find("has none of its own") != std::string::npos);
  CHECK(error({"deployment.prefill_pool.hardware=a100-80gb", "topology=dgx-h200"}).find("one kind") != std::string::npos);
  CHECK(error({"deployment.prefill_pool.hardware=a100-80gb", "deployment.precision=fp8"}).find("deployment.prefill_pool.hardware") !=
        std::string::npos);
  CHECK(error({"deployment.prefill_pool.tensor_parallel=2", "deployment.speculative.method=eagle", "deployment.speculative.acceptance=0.7"}).find("a prefill pool of its own is not modelled") !=
        std::string::npos);
  // Prefill replicas too large for the servers given them.
  CHECK(error({"deployment.replicas=4", "deployment.prefill_replicas=3", "deployment.prefill_pool.hardware=a100-80gb",
               "deployment.prefill_pool.tensor_parallel=4", "deployment.prefill_pool.nodes=1"})
            .find("do not fit") != std::string::npos);
  // A world's cluster has one device type.
  const std::string world = R"(name: t
cluster: {hardware: h200, topology: dgx-h200}
workloads:
  - name: chat
    kind: serving
    model: tinyllama-1.1b
    deployment: {replicas: 2, prefill_replicas: 1, cost_tables: none, prefill_pool: {hardware: a100-80gb}}
    workload: {kind: llmperf, requests: 4}
)";
  CHECK_THROWS_WITH_AS(run_text(world), doctest::Contains("one kind of device"), ConfigError);
  CHECK(error({"deployment.prefill_pool.tensor_parallel=2"}) == "(no error)");
}
