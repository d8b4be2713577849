// Prefill/decode disaggregation: TTFT on a hand-computed case, the KV copy as a flow that
// shares links with other work, the decode pool's KV capacity bounding what it takes,
// conservation across the pools, goodput under SLOs, and bad input.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>

#include "config/node.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"
#include "registry/registry.h"
#include "run/runner.h"
#include "workloads/serving/serving_sim.h"

using namespace sluice;
using sluice::testing::registry;
using sluice::testing::run_text;

namespace {

// Four single-device servers: d0, d1 on switch s0, d2, d3 on s1, the switches joined by one
// 10 GB/s link, every link without latency: a copy from d0 to d2 crosses the middle link.
const char* kCluster = R"(name: t
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
)";

// One deployment of two TinyLlama replicas, prefill on device 0, decode on device 2.
std::string deployment_text(const std::string& load, const std::string& extra = "") {
  return std::string(kCluster) +
         "  - name: chat\n"
         "    kind: serving\n"
         "    model: tinyllama-1.1b\n"
         "    deployment: {replicas: 2, prefill_replicas: 1, cost_tables: none}\n"
         "    scheduler: {kind: vllm}\n"
         "    workload: " + load + "\n"
         "    last_mile: {d2h: fixed, d2h_latency: 0us, detokenize_per_token: 7us, stream_per_token: 3us}\n"
         "    outputs: {trace: false}\n"
         "    place: {devices: [0, 2]}\n" + extra;
}

const std::string kOne = "{kind: llmperf, requests: 1, input_tokens: {mean: 1000, sd: 0}, output_tokens: {mean: 4, sd: 0}, "
                         "arrival: {kind: closed_loop, clients: 1}}";

// The deployment's prefill of kOne's 999 tokens and its first decode step with the last mile
// (7 + 3 us), in ms, from the cost model it uses (the roofline).
std::pair<double, double> prefill_and_first_ms() {
  const auto cfg_node = load_yaml_string("model: tinyllama-1.1b\nhardware: h200\ndeployment: {cost_tables: none}\n"
                                         "workload: {kind: llmperf, requests: 1}\n", "c.yaml");
  auto parsed = registry().parse(cfg_node, "study", "", "serving");
  const serving::ServingConfig cfg = serving::build_serving_config(parsed.params, registry(), 1, nullptr);
  CostModel cost(cfg.hardware, cfg.model, CostOptions{1, 1, ""});
  std::vector<SeqWork> prefill{{999, 0, true}}, first{{1, 999, true}};
  auto t = [](double ns) { return std::max<int64_t>(1, static_cast<int64_t>(std::llround(ns))); };
  return {static_cast<double>(t(cost.iteration_ns(prefill))) / 1e6, static_cast<double>(t(cost.iteration_ns(first)) + 7000 + 3000) / 1e6};
}

}  // namespace

TEST_CASE("disaggregated TTFT = prefill + KV copy over the fabric + the first decode step (hand-computed)") {
  const Json m = run_text(deployment_text(kOne))["serving"];
  const Json& d = m["disaggregation"];
  REQUIRE(d["kv_transfers"].get<int>() == 1);
  // The prefill pool computes 999 tokens; their KV (TinyLlama: 22 layers x 4 KV heads x 64 x
  // K and V x 2 bytes = 22,528 bytes a token) crosses the 10 GB/s link.
  const double per_token = m["kv_cache"]["bytes_per_token"].get<double>();
  CHECK(per_token == 22528);
  CHECK(d["kv_transfer_bytes"].get<double>() == doctest::Approx(999 * per_token));
  const double copy_ms = d["kv_transfer_ms"]["mean"].get<double>();
  CHECK(copy_ms == doctest::Approx(999 * per_token / 10e9 * 1e3).epsilon(1e-4));
  // The iterations' times from the same cost model the deployment uses (the roofline).
  const auto cfg_node = load_yaml_string(R"(
model: tinyllama-1.1b
hardware: h200
deployment: {cost_tables: none}
workload: {kind: llmperf, requests: 1}
)", "c.yaml");
  auto parsed = registry().parse(cfg_node, "study", "", "serving");
  const serving::ServingConfig cfg = serving::build_serving_config(parsed.params, registry(), 1, nullptr);
  CostModel cost(cfg.hardware, cfg.model, CostOptions{1, 1, ""});
  std::vector<SeqWork> prefill{{999, 0, true}}, first{{1, 999, true}};
  auto t = [](double ns) { return std::max<int64_t>(1, static_cast<int64_t>(std::llround(ns))); };
  const double expect_ms = (static_cast<double>(t(cost.iteration_ns(prefill)) + t(cost.iteration_ns(first)) + 7000 + 3000)) / 1e6 + copy_ms;
  CHECK(m["latency_ms"]["ttft"]["p50"].get<double>() == doctest::Approx(expect_ms).epsilon(1e-9));
  // Decoding then goes on at the decode replica alone: 4 tokens, 3 gaps.
  CHECK(m["disaggregation"]["decode"]["iterations"].get<int>() == 4);
  CHECK(m["disaggregation"]["prefill"]["iterations"].get<int>() == 1);
}

TEST_CASE("layer-by-layer KV copies: only the last layer's share is left when the prefill ends, unless the link is the bound") {
  const Json whole = run_text(deployment_text(kOne))["serving"];
  const Json layered = run_text(deployment_text(kOne), {"workloads.0.deployment.kv_transfer=layerwise"})["serving"];
  const double copy_ms = 999 * 22528 / 10e9 * 1e3;  // the whole copy over the 10 GB/s link (2.25 ms: less than the prefill)
  const auto ttft = [](const Json& m) { return m["latency_ms"]["ttft"]["p50"].get<double>(); };
  // TinyLlama has 22 layers: 21 of them crossed during the prefill; the 22nd after it.
  CHECK(ttft(whole) - ttft(layered) == doctest::Approx(copy_ms * 21 / 22).epsilon(1e-3));
  CHECK(layered["disaggregation"]["kv_transfer_ms"]["mean"].get<double>() == doctest::Approx(copy_ms / 22).epsilon(1e-3));
  CHECK(layered["disaggregation"]["kv_transfer_bytes"].get<double>() == whole["disaggregation"]["kv_transfer_bytes"].get<double>());
  CHECK(layered["requests"]["completed"].get<int>() == 1);
  // A link ten times slower (22.5 ms a copy, longer than the prefill): the copy is bound by the
  // link from the prefill's start, so TTFT is the copy and the first decode step, the prefill hidden.
  std::string slow = deployment_text(kOne);
  slow.replace(slow.find("bandwidth: 10GB/s"), 17, "bandwidth: 1GB/s");
  const Json s_layered = run_text(slow, {"workloads.0.deployment.kv_transfer=layerwise"})["serving"];
  const auto [prefill_ms, first_ms] = prefill_and_first_ms();
  CHECK(10 * copy_ms > prefill_ms);
  CHECK(ttft(layered) == doctest::Approx(prefill_ms + copy_ms / 22 + first_ms).epsilon(1e-6));
  CHECK(ttft(s_layered) == doctest::Approx(10 * copy_ms + first_ms).epsilon(1e-6));
  // Requests conserved over a busier load, and layerwise never slower.
  const std::string load = "{kind: llmperf, requests: 40, input_tokens: {mean: 1500, sd: 200}, output_tokens: {mean: 16, sd: 0}, "
                           "arrival: {kind: poisson, rate: 20/s}}";
  const Json a = run_text(deployment_text(load))["serving"];
  const Json b = run_text(deployment_text(load), {"workloads.0.deployment.kv_transfer=layerwise"})["serving"];
  CHECK(b["requests"]["completed"].get<int>() == 40);
  CHECK(b["disaggregation"]["kv_transfers"].get<int>() == 40);
  CHECK(b["latency_ms"]["ttft"]["mean"].get<double>() < a["latency_ms"]["ttft"]["mean"].get<double>());
}

TEST_CASE("the decode router is a registered router: least_outstanding keeps one client on one decode replica, round_robin alternates") {
  // One prefill replica (device 0) and two decode replicas (devices 1 and 2); one client at a time.
  std::string text = deployment_text("{kind: llmperf, requests: 10, input_tokens: {mean: 300, sd: 0}, output_tokens: {mean: 4, sd: 0}, "
                                     "arrival: {kind: closed_loop, clients: 1}}");
  text.replace(text.find("replicas: 2, prefill_replicas: 1"), 32, "replicas: 3, prefill_replicas: 1");
  text.replace(text.find("devices: [0, 2]"), 15, "devices: [0, 1, 2]");
  auto decode_iterations = [](const Json& m) {
    std::vector<int64_t> v;
    for (const auto& r : m["replicas"]) v.push_back(r["iterations"].get<int64_t>());
    return v;
  };
  const Json least = run_text(text)["serving"];
  const Json rr = run_text(text, {"workloads.0.decode_router=round_robin"})["serving"];
  for (const Json* m : {&least, &rr}) {
    CHECK((*m)["requests"]["completed"].get<int>() == 10);
    CHECK((*m)["disaggregation"]["kv_transfers"].get<int>() == 10);
  }
  // Each request decodes 4 tokens there: 40 decode iterations in all.
  CHECK(decode_iterations(least) == std::vector<int64_t>{10, 40, 0});
  CHECK(decode_iterations(rr) == std::vector<int64_t>{10, 20, 20});
}

TEST_CASE("a KV copy slows when it shares a link with a gradient all-reduce (the world's fabric)") {
  const std::string load = "{kind: llmperf, requests: 20, input_tokens: {mean: 2000, sd: 0}, output_tokens: {mean: 8, sd: 0}, "
                           "arrival: {kind: poisson, rate: 5/s}}";
  const Json alone = run_text(deployment_text(load));
  // A data-parallel job on devices 1 and 3: its ring crosses the same middle link, all the time.
  const std::string job =
      "  - {name: train, kind: training, model: tinyllama-1.1b, sequence: 512, iterations: 0, cost_tables: none, "
      "parallel: {tp: 1, pp: 1, dp: 2, micro_batches: 1}, place: {devices: [1, 3]}}\n";
  const Json shared = run_text(deployment_text(load, job));
  const double t_alone = alone["serving"]["disaggregation"]["kv_transfer_ms"]["mean"].get<double>();
  const double t_shared = shared["workloads"]["chat"]["disaggregation"]["kv_transfer_ms"]["mean"].get<double>();
  CHECK(t_shared > 1.3 * t_alone);
  CHECK(t_shared <= 2.0 * t_alone * 1.001);  // at worst half the link (max-min fair sharing)
  CHECK(shared["workloads"]["chat"]["requests"]["completed"].get<int>() == 20);
}

TEST_CASE("disaggregation conserves requests across the pools, and a one-token prompt goes straight to the decode pool") {
  const std::string mixed = "{kind: llmperf, requests: 300, input_tokens: {mean: 600, sd: 400}, output_tokens: {mean: 40, sd: 30}, "
                            "arrival: {kind: poisson, rate: 40/s}}";
  const Json m = run_text(deployment_text(mixed))["serving"];
  CHECK(m["requests"]["completed"].get<int>() == 300);
  CHECK(m["disaggregation"]["kv_transfers"].get<int>() == 300);  // every prompt longer than a token was handed over once
  const std::string single = "{kind: llmperf, requests: 30, input_tokens: {mean: 1, sd: 0}, output_tokens: {mean: 5, sd: 0}, "
                             "arrival: {kind: poisson, rate: 40/s}}";
  const Json s = run_text(deployment_text(single))["serving"];
  CHECK(s["requests"]["completed"].get<int>() == 30);
  CHECK(s["disaggregation"]["kv_transfers"].get<int>() == 0);
  CHECK(s["disaggregation"]["prefill"]["iterations"].get<int>() == 0);
}

TEST_CASE("the decode pool's KV capacity bounds what it takes: handoffs wait for blocks, and every request is still answered") {
  // A decode replica left with room for few sequences: long prompts wait there for blocks.
  const std::string load = "{kind: llmperf, requests: 60, input_tokens: {mean: 1900, sd: 0}, output_tokens: {mean: 100, sd: 0}, "
                           "arrival: {kind: poisson, rate: 200/s}}";
  const std::string text = deployment_text(load);
  const Json roomy = run_text(text)["serving"];
  const Json tight = run_text(text, {"cluster.hardware={catalog: h200, hbm_capacity: 4GiB, runtime_capacity: 4GiB}"})["serving"];
  CHECK(roomy["disaggregation"]["wait_for_decode_blocks_ms"]["max"].get<double>() == 0);
  CHECK(tight["disaggregation"]["wait_for_decode_blocks_ms"]["max"].get<double>() > 0);
  CHECK(tight["requests"]["completed"].get<int>() == 60);
  CHECK(tight["disaggregation"]["kv_transfers"].get<int>() == 60);
}

TEST_CASE("goodput counts the requests that meet both SLOs, per second and per GPU") {
  const std::string load = "{kind: llmperf, requests: 50, input_tokens: {mean: 500, sd: 0}, output_tokens: {mean: 20, sd: 0}, "
                           "arrival: {kind: poisson, rate: 10/s}}";
  const Json easy = run_text(deployment_text(load, "    slo: {ttft: 10s, tpot: 1s}\n"))["serving"];
  CHECK(easy["slo"]["attainment"].get<double>() == 1.0);
  CHECK(easy["slo"]["met"].get<int>() == 50);
  CHECK(easy["slo"]["gpus"].get<double>() == 2);
  CHECK(easy["slo"]["goodput_requests_per_s_per_gpu"].get<double>() ==
        doctest::Approx(easy["throughput"]["requests_per_s"].get<double>() / 2));
  const Json hard = run_text(deployment_text(load, "    slo: {ttft: 1us}\n"))["serving"];
  CHECK(hard["slo"]["attainment"].get<double>() == 0.0);
  CHECK(hard["slo"]["tpot_met"].get<int>() == 50);  // no TPOT objective: every request meets it
  const Json none = run_text(deployment_text(load))["serving"];
  CHECK_FALSE(none.contains("slo"));
}

TEST_CASE("an SLO no request could meet on the deployment is flagged: the shortest prompt alone on an idle replica is slower") {
  auto warnings = [](const std::string& text) {
    Scenario sc = load_scenario_text(text, "t.yaml", {}, registry());
    Recorder rec;
    run_into(sc, rec, {});
    std::string all;
    for (const auto& w : rec.warnings()) all += w + "\n";
    return all;
  };
  const std::string fixed = "{kind: llmperf, requests: 20, input_tokens: {mean: 2000, sd: 0}, output_tokens: {mean: 8, sd: 0}, "
                            "arrival: {kind: poisson, rate: 5/s}}";
  // TinyLlama prefills 2000 tokens in far more than 1 us, and decodes a step in more than 1 us.
  const std::string w = warnings(deployment_text(fixed, "    slo: {ttft: 1us, tpot: 1us}\n"));
  CHECK(w.find("TTFT objective 1.000us cannot be met by any request") != std::string::npos);
  CHECK(w.find("2000 tokens to compute") != std::string::npos);
  CHECK(w.find("TPOT objective 1.000us cannot be met") != std::string::npos);
  // Objectives an idle replica can meet draw no warning (whether the load lets them is the run's answer).
  CHECK(warnings(deployment_text(fixed, "    slo: {ttft: 10s, tpot: 1s}\n")).find("objective") == std::string::npos);
  // A spread of lengths may draw a one-token prompt: the TTFT bound is that prompt's.
  const std::string spread = "{kind: llmperf, requests: 20, input_tokens: {mean: 2000, sd: 100}, output_tokens: {mean: 8, sd: 0}, "
                             "arrival: {kind: poisson, rate: 5/s}}";
  CHECK(warnings(deployment_text(spread, "    slo: {ttft: 1us}\n")).find("(1 tokens to compute)") != std::string::npos);
  // A shared prefix goes in front of the drawn input, which a cache never holds: the input is what
  // is computed, less its tail where the two pass TinyLlama's 2048-token context (2047 - 1000).
  const std::string prefixed = "{kind: llmperf, requests: 20, input_tokens: {mean: 2000, sd: 0}, output_tokens: {mean: 1, sd: 0}, "
                               "shared_prefix: {tokens: 1000}, arrival: {kind: poisson, rate: 5/s}}";
  CHECK(warnings(deployment_text(prefixed, "    slo: {ttft: 1us}\n")).find("(1047 tokens to compute)") != std::string::npos);
}

TEST_CASE("disaggregation's bad input: no decode pool left, pipeline-parallel replicas, or a KV copy mode without pools, is refused where it is written") {
  const std::string base = R"(name: t
model: tinyllama-1.1b
deployment: {replicas: 2, prefill_replicas: 1, cost_tables: none}
workload: {kind: llmperf, requests: 4}
)";
  CHECK_THROWS_WITH_AS(run_text(base, {"deployment.prefill_replicas=2"}), doctest::Contains("no decode pool"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(base, {"deployment.pipeline_parallel=2"}), doctest::Contains("pipeline-parallel"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(base, {"deployment.prefill_replicas=0", "deployment.kv_transfer=layerwise"}),
                       doctest::Contains("deployment.kv_transfer"), ConfigError);
  CHECK_NOTHROW(run_text(base));
  CHECK_NOTHROW(run_text(base, {"deployment.kv_transfer=layerwise"}));
}

TEST_CASE("static batching: a member that left its replica is padding there, not run again (handed to the decode pool, or re-routed after a failure)") {
  // A static batch holds its members until the longest ends. A prefill engine hands each prompt to
  // the decode pool when its prefill ends, and a failed replica's requests go elsewhere: the batch
  // used to keep running them ("request 3 ended twice", or a run that never ended).
  const std::string base = R"(name: t
model: tinyllama-1.1b
deployment: {replicas: 2, prefill_replicas: 1, cost_tables: none}
workload: {kind: llmperf, requests: 40, output_tokens: {mean: 32, sd: 0}, arrival: {kind: closed_loop, clients: 16}}
)";
  for (const char* where : {"scheduler={kind: static}", "deployment.prefill_pool={scheduler: {kind: static}}"}) {
    const Json s = run_text(base, {where})["serving"];
    CHECK(s["requests"]["completed"] == 40);
    CHECK(s["throughput"]["output_tokens"] == 40 * 32);  // each token once
  }
  const Json failures = run_text(testing::slurp(std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios/serving-failures-base.yaml"),
                                 {"workloads.0.scheduler={kind: static}"});
  const Json& rq = failures["serving"]["requests"];
  CHECK(rq["completed"].get<int64_t>() > 0);
  CHECK(rq["completed"].get<int64_t>() <= rq["announced"].get<int64_t>());
}
