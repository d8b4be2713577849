// Autoscaling: the pool follows a step in load after its delays, requests are conserved
// while replicas come and go, replica-seconds are what the timeline says, and bad input.
#include <doctest/doctest.h>

#include "test_support.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {
const char* kStep = R"(name: t
model: llama3-8b
hardware: h200
deployment: {replicas: 4, cost_tables: none}
router: {kind: least_outstanding}
autoscaling: {policy: concurrency, min_replicas: 1, target: 8, interval: 10s, provision: 15s, model_load: 5s, cooldown: 30s}
workload:
  kind: llmperf
  requests: 6000
  input_tokens: {mean: 1500, sd: 300}
  output_tokens: {mean: 200, sd: 40}
  arrival: {kind: poisson, rate: 2/s, step_at: 120s, step_rate: 40/s}
outputs: {trace: false}
)";
}  // namespace

TEST_CASE("an autoscaler's pool follows a step in load after its delay, and every request is served") {
  const Json m = run_text(kStep)["serving"];
  CHECK(m["requests"]["completed"].get<int>() == 6000);
  const Json& a = m["autoscaling"];
  const Json& tl = a["timeline"];
  REQUIRE(tl.size() >= 2);
  CHECK(tl[0][0].get<double>() == 0);
  CHECK(tl[0][1].get<int>() == 1);
  // Before the step one replica keeps up (2 req/s); the first growth is decided at the first
  // evaluation after the step (every 10 s), not before.
  const double first_up = tl[1][0].get<double>();
  CHECK(tl[1][1].get<int>() > 1);
  CHECK(first_up >= 120);
  CHECK(first_up <= 130 + 1e-9);
  CHECK(a["replicas_most"].get<int>() == 4);
  CHECK(a["scale_ups"].get<int>() >= 1);
  // Replica-seconds are the timeline's integral up to the end of the run.
  double integral = 0;
  for (size_t i = 0; i + 1 < tl.size(); ++i) integral += tl[i][1].get<double>() * (tl[i + 1][0].get<double>() - tl[i][0].get<double>());
  integral += tl.back()[1].get<double>() * (m["simulated_s"].get<double>() - tl.back()[0].get<double>());
  CHECK(a["replica_hours"].get<double>() * 3600 == doctest::Approx(integral).epsilon(1e-6));
  // A fixed pool of the most replicas pays for all of them all the time.
  const Json fixed = run_text(kStep, {"autoscaling.policy=none"})["serving"];
  CHECK_FALSE(fixed.contains("autoscaling"));
  CHECK(a["replica_hours"].get<double>() < 4 * fixed["simulated_s"].get<double>() / 3600);
}

TEST_CASE("autoscaling's bad input is refused where it is written") {
  CHECK_THROWS_WITH_AS(run_text(kStep, {"autoscaling.min_replicas=5"}), doctest::Contains("min_replicas"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStep, {"autoscaling.policy=utilization"}), doctest::Contains("busy fraction"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStep, {"autoscaling.policy=sideways"}), doctest::Contains("autoscaling.policy"), ConfigError);
}

TEST_CASE("a disaggregated deployment's pools are scaled apart: each grows after the step on its own signal, within its own bounds") {
  // 3 prefill + 3 decode replicas at most, each pool starting from one.
  const std::vector<std::string> split = {"deployment.replicas=6", "deployment.prefill_replicas=3", "autoscaling.prefill_target=2"};
  const Json m = run_text(kStep, split)["serving"];
  CHECK(m["requests"]["completed"].get<int>() == 6000);
  CHECK(m["disaggregation"]["kv_transfers"].get<int>() == 6000);
  const Json& a = m["autoscaling"];
  CHECK(a["timeline"][0][1].get<int>() == 2);  // one replica of each pool to begin with
  CHECK(a["prefill_min_replicas"].get<int>() == 1);
  CHECK(a["prefill_replicas_mean"].get<double>() > 1);
  CHECK(a["prefill_replicas_mean"].get<double>() <= 3);
  CHECK(a["decode_replicas_mean"].get<double>() > 1);
  CHECK(a["decode_replicas_mean"].get<double>() <= 3);
  CHECK(a["prefill_replicas_mean"].get<double>() + a["decode_replicas_mean"].get<double>() ==
        doctest::Approx(a["replicas_mean"].get<double>()));
  // Goodput's GPUs are the mean paid for: fewer than the six of a fixed split.
  const Json fixed = run_text(kStep, {"deployment.replicas=6", "deployment.prefill_replicas=3", "autoscaling.policy=none"})["serving"];
  CHECK(a["replica_hours"].get<double>() < 6 * fixed["simulated_s"].get<double>() / 3600);
  // Each pool's bounds are checked at their keys.
  CHECK_THROWS_WITH_AS(run_text(kStep, {"deployment.replicas=6", "deployment.prefill_replicas=3", "autoscaling.prefill_min_replicas=4"}),
                       doctest::Contains("autoscaling.prefill_min_replicas"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStep, {"deployment.replicas=6", "deployment.prefill_replicas=3", "autoscaling.min_replicas=4"}),
                       doctest::Contains("decode pool"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStep, {"autoscaling.prefill_target=2"}), doctest::Contains("autoscaling.prefill_target"), ConfigError);
}
