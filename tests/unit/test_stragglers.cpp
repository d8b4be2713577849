// Stragglers (issue 25): a fault process that makes devices compute slower for spells instead
// of failing them. A slow GPU slows its stage, and the data-parallel all-reduce makes every
// replica wait for it: by hand on a star, spells that end, the fast-forward on and off, and
// the keys' refusals.
#include <doctest/doctest.h>

#include "test_support.h"

#include "config/error.h"
#include "engine/run_control.h"
#include "run/runner.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// A 4-way data-parallel job of a flat model on the four-device star (one stage, two
// micro-batches: an iteration is the replicas' forwards and backwards, the ring all-reduce,
// Adam's step), and `faults` after it.
std::string star(const std::string& faults, int iterations = 4) {
  return std::string(sluice::testing::kFourDeviceStar) + R"(workloads:
  - {name: j, kind: training, sequence: 512, cost_tables: none, iterations: )" +
         std::to_string(iterations) + R"(,
     model: {name: flat, layers: 4, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: 512},
     parallel: {tp: 1, pp: 1, dp: 4, micro_batches: 2}}
)" + faults;
}

std::vector<double> iterations(const Json& m) { return m["training"]["iteration_s"].get<std::vector<double>>(); }

}  // namespace

TEST_CASE("stragglers: one GPU twice as slow makes every replica's iteration wait for its compute") {
  const Json base = run_text(star(""));
  const Json slow = run_text(star(R"(faults:
  - {kind: straggler, component: chip, only: [d1], slowdown: 2, onset: {dist: fixed, mean: 1ns}, duration: {dist: fixed, mean: 100000d}}
)"));
  const double b = iterations(base).back(), ar = base["training"]["dp_allreduce_ms"].get<double>() / 1e3;
  // An iteration is compute + all-reduce + Adam's step; the slow replica doubles its compute and
  // its step, the others wait for it at the all-reduce: 2 (b - ar) + ar.
  CHECK(iterations(slow).back() == doctest::Approx(2 * b - ar).epsilon(1e-8));
  CHECK(slow["training"]["dp_allreduce_ms"] == base["training"]["dp_allreduce_ms"]);  // the fabric is not slower
  const Json& f = slow["world"]["faults"];
  CHECK(f["slowdowns"] == 1);
  CHECK(f["slow_device_s"].get<double>() == doctest::Approx(slow["world"]["simulated_s"].get<double>()).epsilon(1e-6));
  CHECK_FALSE(base["world"].contains("faults"));
}

TEST_CASE("stragglers: spells end, and the fast-forward gives the same bytes across them") {
  // Iterations of about 51 ms; every chip turns 1.5x slow 0.3 s after full speed, for 0.2 s.
  const std::string yaml = star(R"(faults:
  - {kind: straggler, component: chip, slowdown: 1.5, onset: {dist: fixed, mean: 300ms}, duration: {dist: fixed, mean: 200ms}}
)",
                                60);
  const Json m = testing::same_with_and_without_fast_forward(yaml);
  const auto it = iterations(m);
  const double lo = *std::min_element(it.begin(), it.end()), hi = *std::max_element(it.begin(), it.end());
  // Full-speed iterations and, while every chip is slow, iterations of 1.5 (compute + step) + all-reduce.
  const double ar = m["training"]["dp_allreduce_ms"].get<double>() / 1e3;
  CHECK(hi == doctest::Approx(1.5 * (lo - ar) + ar).epsilon(1e-8));
  CHECK(m["world"]["faults"]["slowdowns"].get<int>() >= 4 * 4);  // four chips, several spells each
}

TEST_CASE("stragglers: a slowdown of at most 1, a class that holds no devices and an unknown chip are refused at their keys") {
  CHECK_THROWS_WITH_AS(run_text(star(R"(faults:
  - {kind: straggler, component: chip, slowdown: 1, onset: {dist: fixed, mean: 1s}, duration: {dist: fixed, mean: 1s}}
)")),
                       doctest::Contains("slowdown"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(star(R"(faults:
  - {kind: straggler, component: switch, slowdown: 2, onset: {dist: fixed, mean: 1s}, duration: {dist: fixed, mean: 1s}}
)")),
                       doctest::Contains("component"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(star(R"(faults:
  - {kind: straggler, component: chip, only: [d9], slowdown: 2, onset: {dist: fixed, mean: 1s}, duration: {dist: fixed, mean: 1s}}
)")),
                       doctest::Contains("only[0]"), ConfigError);
}
