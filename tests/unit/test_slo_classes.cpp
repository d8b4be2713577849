// Request classes end to end: per-class attainment and goodput, priority order under
// overload, Jain fairness, and the classes' bad input.
#include <doctest/doctest.h>

#include "test_support.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {
const char* kTwoClasses = R"(name: t
model: llama3-8b
hardware: h200
deployment: {replicas: 1, cost_tables: none}
workload:
  kind: llmperf
  requests: 400
  input_tokens: {mean: 1500, sd: 300}
  output_tokens: {mean: 60, sd: 10}
  arrival: {kind: poisson, rate: 60/s}
  classes:
    - {name: interactive, fraction: 0.3, priority: 0, ttft: 1s, tpot: 200ms}
    - {name: batch, fraction: 0.7, priority: 1, ttft: 60s}
outputs: {trace: false}
)";
}  // namespace

TEST_CASE("under overload, priority order serves the interactive class first: its TTFT drops, the batch class's grows") {
  const Json fcfs = run_text(kTwoClasses)["serving"];
  const Json prio = run_text(kTwoClasses, {"deployment.priority_scheduling=true"})["serving"];
  const Json& fi = fcfs["classes"]["interactive"];
  const Json& pi = prio["classes"]["interactive"];
  CHECK(fi["requests"].get<int>() + fcfs["classes"]["batch"]["requests"].get<int>() == 400);
  CHECK(fi["requests"].get<int>() == pi["requests"].get<int>());  // the same load: classes from their own stream
  CHECK(pi["ttft_ms"]["p99"].get<double>() < 0.5 * fi["ttft_ms"]["p99"].get<double>());
  CHECK(prio["classes"]["batch"]["ttft_ms"]["p99"].get<double>() > fcfs["classes"]["batch"]["ttft_ms"]["p99"].get<double>());
  CHECK(pi["attainment"].get<double>() > fi["attainment"].get<double>());
  // Jain's index of the attainments: (a + b)^2 / (2 (a^2 + b^2)).
  for (const Json* m : {&fcfs, &prio}) {
    const double a = (*m)["classes"]["interactive"]["attainment"].get<double>(), b = (*m)["classes"]["batch"]["attainment"].get<double>();
    CHECK((*m)["fairness"]["jain_attainment"].get<double>() == doctest::Approx((a + b) * (a + b) / (2 * (a * a + b * b))));
  }
}

TEST_CASE("late shedding turns away what can no longer meet its TTFT objective, and conserves the requests") {
  const Json shed = run_text(kTwoClasses, {"deployment.shed_late=true"})["serving"];
  const int64_t late = shed["requests"]["rejected_late"].get<int64_t>();
  CHECK(late > 0);
  CHECK(shed["requests"]["completed"].get<int64_t>() + late == 400);
  const Json& i = shed["classes"]["interactive"];
  CHECK(i["requests"].get<int64_t>() - i["answered"].get<int64_t>() + shed["classes"]["batch"]["requests"].get<int64_t>() -
            shed["classes"]["batch"]["answered"].get<int64_t>() == late);
}

TEST_CASE("request classes' bad input is refused where it is written") {
  CHECK_THROWS_WITH_AS(run_text(kTwoClasses, {"workload.classes.1.fraction=0.6"}), doctest::Contains("sum to 1"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kTwoClasses, {"workload.classes.1.name=interactive"}), doctest::Contains("two classes"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kTwoClasses, {"workload.classes.1.deadline=3s"}), doctest::Contains("deadline"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kTwoClasses, {"workload.classes.0.name=a.b"}), doctest::Contains("classes[0].name"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kTwoClasses, {"workload.classes=[]"}), doctest::Contains("classes"), ConfigError);
}
