// ZeRO-3 (FSDP): parameters sharded over the data-parallel replicas, gathered layer by layer
// before every forward and backward op's layers (one layer ahead, across ops), each layer's
// gradients reduce-scattered as its backward ends. By hand on the four-device star: memory per
// device, the comm-bound iteration (the links busy with every layer's collective but for one
// layer's compute), the compute-bound one (only the first layer's gather and the last one's
// reduce-scatter show), the fast-forward on and off, and the refusals.
#include <doctest/doctest.h>

#include "test_support.h"

#include "config/error.h"
#include "engine/run_control.h"
#include "run/runner.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// A 4-way data-parallel job of a flat model (4 layers) on the star: `sequence` tokens a
// micro-batch, `m` micro-batches, ZeRO stage `zero`.
std::string star(int zero, int sequence, int m, int iterations = 2, const std::string& extra = "") {
  const std::string s = std::to_string(sequence);
  return std::string(sluice::testing::kFourDeviceStar) + "workloads:\n  - {name: j, kind: training, sequence: " + s +
         ", cost_tables: none, iterations: " + std::to_string(iterations) +
         ",\n     model: {name: flat, layers: 4, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: " + s +
         "},\n     parallel: {tp: 1, pp: 1, dp: 4, micro_batches: " + std::to_string(m) + ", zero: " + std::to_string(zero) + extra + "}}\n";
}

const Json& training(const Json& m) { return m["training"]; }
double iteration(const Json& m) { return training(m)["iteration_s"].back().get<double>(); }

constexpr double kH = 4096;
constexpr double kParams = 4 * (4 * kH * kH + 3 * kH * 16384) + 2 * 8 * kH;

}  // namespace

TEST_CASE("ZeRO-3: each device holds a quarter of the weights plus two layers gathered whole") {
  const Json mem = training(run_text(star(3, 512, 1)))["memory_per_device"];
  const double w = mem["weights_bytes"].get<double>(), g = mem["gradients_bytes"].get<double>(), o = mem["optimizer_bytes"].get<double>();
  CHECK(g == doctest::Approx(2 * kParams / 4).epsilon(1e-3));  // bf16 gradients, a quarter (P: the layers' GEMMs and embeddings)
  // The weights' shard is as large as the gradients'; two of the 4 layers gathered whole are 2 x P/4 x 2 bytes: twice that.
  CHECK(w == doctest::Approx(3 * g));
  CHECK(o == doctest::Approx(6 * g));  // 12 bytes a parameter over 4
}

TEST_CASE("ZeRO-3 gathers layer by layer: comm-bound the links never rest but for a layer, compute-bound only a layer's gather and reduce-scatter show") {
  // The flat model's 4 layers on one pipeline rank: an op is 4 layers, each gathered (G / 4)
  // before it computes and, in a backward, reduce-scattered (R / 4) after. On the symmetric star
  // with no latency a ring all-gather takes what the reduce-scatter does (G = R), in proportion
  // to its bytes. ZeRO-2's iteration: Cf + Cb + R + Adam + G (the gather after the step).
  const Json z2 = run_text(star(2, 512, 1)), z3 = run_text(star(3, 512, 1));
  const double t2 = iteration(z2), R = training(z2)["dp_allreduce_ms"].get<double>() / 1e3, adam = training(z2)["optimizer_ms"].get<double>() / 1e3;
  const double cf = (t2 - 2 * R - adam) / 3, g = R / 4;
  // One micro-batch of 512 tokens: a layer's forward (Cf / 4) and backward (Cb / 4) are shorter
  // than its gather, so every device's link carries 12 layer collectives (8 gathers, 4
  // reduce-scatters) nearly back to back: the iteration is at least those and Adam, and the
  // links rest only while a layer computes with nothing ready to send, here no more than one
  // forward layer's compute in all. Whole-op gathers (the model before) gave t2 + R - Cf,
  // 54.0 ms against 50.6 here: the backward's gather of a whole op waited out the forward.
  REQUIRE(cf / 4 < g);
  CHECK(iteration(z3) >= 12 * g + adam - 1e-9);
  CHECK(iteration(z3) <= 12 * g + adam + cf / 4 + 1e-9);
  CHECK(iteration(z3) < t2 + R - cf - 1e-3);
  // Only the last layer's reduce-scatter is exposed after the backward.
  CHECK(training(z3)["dp_allreduce_ms"].get<double>() / 1e3 == doctest::Approx(R / 4).epsilon(1e-6));
  // The waits for gathers inside an op are not busy: busy is the compute alone (Cf + Cb = 3 Cf)
  // over the span to the backward's end (the iteration less Adam and that reduce-scatter).
  CHECK(training(z3)["bubble_fraction"].get<double>() == doctest::Approx(1 - 3 * cf / (iteration(z3) - adam - R / 4)).epsilon(1e-6));
  // 8192 tokens, two micro-batches: every layer outlasts a gather and a reduce-scatter, so only
  // the first layer's gather (G / 4) and the last layer's reduce-scatter (R / 4) show, where
  // ZeRO-2 shows all of R and G: 3/4 of each less.
  const double big2 = iteration(run_text(star(2, 8192, 2))), big3 = iteration(run_text(star(3, 8192, 2)));
  CHECK(big3 == doctest::Approx(big2 - 0.75 * (R + R)).epsilon(1e-8));
}

TEST_CASE("ZeRO-3 prefetch: each layer more holds one more layer whole and lets a pipeline's waits carry the gathers") {
  auto weights = [](const Json& m) { return training(m)["memory_per_device"]["weights_bytes"].get<double>(); };
  const double g = training(run_text(star(3, 512, 1)))["memory_per_device"]["gradients_bytes"].get<double>();
  // The shard (g) and 1 + p of the 4 layers whole (a layer is g here: P / 4 parameters in bf16),
  // at most the stage's 4; prefetching 4 would gather a layer for the next op while this one
  // holds it (refused).
  const Json p2 = run_text(star(3, 512, 1, 2, ", zero3_prefetch: 2"));
  CHECK(weights(p2) == doctest::Approx(4 * g));
  CHECK(training(p2)["job"]["zero3_prefetch"] == 2);  // reported with the job
  CHECK(weights(run_text(star(3, 512, 1, 2, ", zero3_prefetch: 3"))) == doctest::Approx(5 * g));
  CHECK_THROWS_WITH_AS(run_text(star(3, 512, 1, 2, ", zero3_prefetch: 4")), doctest::Contains("1..3"), ConfigError);
  // Compute-bound on one stage, every gather hides either way: only the first layer's shows.
  CHECK(iteration(run_text(star(3, 8192, 2, 2, ", zero3_prefetch: 3"))) == doctest::Approx(iteration(run_text(star(3, 8192, 2)))).epsilon(1e-12));
  // Two pipeline ranks of four layers (the model at 8), 4 micro-batches, comm-bound: a rank
  // waiting for its pipeline input gathers one layer ahead with p = 1, three with p = 3.
  auto piped = [](int p) {
    std::string y = star(3, 512, 4, 2, ", pp: 2, zero3_prefetch: " + std::to_string(p));
    y.replace(y.find("pp: 1, dp: 4"), 12, "dp: 2");
    y.replace(y.find("layers: 4"), 9, "layers: 8");
    return run_text(y);
  };
  CHECK(iteration(piped(3)) < iteration(piped(1)) * 0.99);
}

TEST_CASE("ZeRO-3 prefetch: refused without ZeRO-3") {
  CHECK_THROWS_WITH_AS(run_text(star(2, 512, 1, 2, ", zero3_prefetch: 2")), doctest::Contains("zero3_prefetch"), ConfigError);
}

TEST_CASE("ZeRO-3: the same bytes with the fast-forward on and off") {
  const std::string yaml = std::string(star(3, 512, 2, 40)) + R"(faults:
  - {name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 2s}, repair: {dist: fixed, mean: 100ms}}
)";
  testing::same_with_and_without_fast_forward(yaml);
}

TEST_CASE("ZeRO-3 with interleaved stages: an op gathers and reduce-scatters its chunk's share, 1/v of the rank's") {
  // dp 2 x pp 2, two chunks a rank (one layer each), 2 micro-batches: 8 ops a rank an
  // iteration. ZeRO-2 reduce-scatters and gathers once a stage; ZeRO-3 gathers before every op
  // and reduce-scatters after every backward, each a ring of 2 (two flows) per stage.
  auto job = [](int zero, int v) {
    std::string y = star(zero, 512, 2, 2, ", pp: 2, virtual_stages: " + std::to_string(v));
    y.replace(y.find("pp: 1, dp: 4"), 12, "dp: 2");
    return run_text(y);
  };
  const Json z2 = job(2, 2), z3 = job(3, 2), z3v1 = job(3, 1);
  const int per_iteration = 2 * (8 + 4 - 2) * 2;  // stages x (gathers + reduce-scatters - ZeRO-2's two) x flows
  CHECK(training(z3)["flows"].get<int>() - training(z2)["flows"].get<int>() == 2 * per_iteration);
  // The rank's parameters are the same with or without chunks, and so is the shard: a chunk's
  // gather moves half of what an op of the uninterleaved job moves.
  CHECK(training(z3)["memory_per_device"]["gradients_bytes"] == training(z3v1)["memory_per_device"]["gradients_bytes"]);
  // The shard (half of a rank's two layers) and FSDP's two layers whole: 1.5 times ZeRO-2's weights.
  const double w2 = training(z2)["memory_per_device"]["weights_bytes"].get<double>();
  CHECK(training(z3)["memory_per_device"]["weights_bytes"].get<double>() == doctest::Approx(1.5 * w2).epsilon(1e-12));
  // Bytes on a device's link: ZeRO-2's reduce-scatter and gather each send half of the rank's w2;
  // ZeRO-3's 12 collectives each half of a chunk's w2 / 2: 3 w2 against w2 an iteration. (w2 is
  // the fuller rank's, rank 0 with its embedding; the busiest link is rank 1's, whose LM head
  // and final norm are a hair more: 1 part in 10^5 of this model.)
  auto link_bytes = [](const Json& m) { return m["world"]["fabric"]["most_loaded_link"]["bytes"].get<double>(); };
  CHECK(link_bytes(z3) - link_bytes(z2) == doctest::Approx(2 * (3 - 1) * w2).epsilon(2e-5));
  // Fast-forward on and off alike, through failures.
  std::string yaml = star(3, 512, 2, 40, ", pp: 2, virtual_stages: 2");
  yaml.replace(yaml.find("pp: 1, dp: 4"), 12, "dp: 2");
  testing::same_with_and_without_fast_forward(yaml + R"(faults:
  - {name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 2s}, repair: {dist: fixed, mean: 100ms}}
)");
}

TEST_CASE("ZeRO-3 with nothing to shard over holds the weights whole, with no gathering buffer") {
  std::string one = star(3, 512, 4, 2, ", pp: 4");
  one.replace(one.find("pp: 1, dp: 4"), 12, "dp: 1");
  std::string none = one;
  none.replace(none.find("zero: 3"), 7, "zero: 0");
  CHECK(training(run_text(one))["memory_per_device"]["weights_bytes"] == training(run_text(none))["memory_per_device"]["weights_bytes"]);
}

TEST_CASE("ZeRO-3: refused with token slicing") {
  std::string sliced = star(3, 512, 4);
  sliced.replace(sliced.find("parallel: {"), 11, "slicing: {policy: uniform, slices: 2}, parallel: {schedule: gpipe, ");
  CHECK_THROWS_WITH_AS(run_text(sliced), doctest::Contains("zero"), ConfigError);
}
