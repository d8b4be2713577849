// Context parallelism (ring attention): each sequence cut into 2 cp chunks over cp ranks, every
// layer's keys and values around the CP ring as flows while its attention runs. By hand on the
// four-device star: memory per device, the ring's bytes, the op's time G + max(A, R) in a
// comm-bound and a compute-bound case, the gradient reduction over the CP ranks, the fast-forward
// on and off under failures, and the refusals.
#include <doctest/doctest.h>

#include "test_support.h"

#include "config/error.h"
#include "config/schema.h"
#include "hardware/cost_model.h"
#include "run/runner.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// A job of a flat model (4 layers, 32 heads of 128) on the star with links of `link`:
// `sequence` tokens a micro-batch, `m` micro-batches, context parallelism `cp`, `dp` replicas
// (more parallel keys in `extra`, job keys in `job`).
struct Job {
  int cp = 2, sequence = 8192, m = 1, dp = 1, iterations = 1;
  std::string link = "100GB/s", extra, job;
};
std::string star(const Job& j) {
  std::string topo = sluice::testing::kFourDeviceStar;
  for (size_t at = 0; (at = topo.find("100GB/s", at)) != std::string::npos; at += j.link.size()) topo.replace(at, 7, j.link);
  const std::string s = std::to_string(j.sequence);
  return topo + "workloads:\n  - {name: j, kind: training, sequence: " + s + ", cost_tables: none, iterations: " + std::to_string(j.iterations) +
         j.job + ",\n     model: {name: flat, layers: 4, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: " + s +
         "},\n     parallel: {tp: 1, pp: 1, dp: " + std::to_string(j.dp) + ", cp: " + std::to_string(j.cp) +
         ", micro_batches: " + std::to_string(j.m) + j.extra + "}}\n";
}

const Json& training(const Json& m) { return m["training"]; }
double ms(const Json& m, const char* key) { return training(m)[key].get<double>() / 1e3; }
double iteration(const Json& m) { return training(m)["iteration_s"].back().get<double>(); }

// One forward's keys and values for the whole sequence on one device: tokens x 2 x 32 heads x
// 128 x 2 bytes x 4 layers.
double kv_bytes(int sequence) { return sequence * 2.0 * 32 * 128 * 2 * 4; }

}  // namespace

TEST_CASE("context parallelism: each rank keeps 1/cp of the activations, ZeRO shards over dp x cp, and the job holds tp x cp x pp x dp devices") {
  const Json one = run_text(star({.cp = 1})), four = run_text(star({.cp = 4}));
  const Json& m1 = training(one)["memory_per_device"];
  const Json& m4 = training(four)["memory_per_device"];
  CHECK(m4["activations_bytes"].get<double>() == doctest::Approx(m1["activations_bytes"].get<double>() / 4).epsilon(1e-12));
  CHECK(m4["weights_bytes"].get<double>() == m1["weights_bytes"].get<double>());  // every CP rank holds the stage's parameters
  CHECK(training(four)["job"]["devices"].get<int>() == 4);
  const Json z = run_text(star({.cp = 4, .extra = ", zero: 1"}));
  CHECK(training(z)["memory_per_device"]["optimizer_bytes"].get<double>() ==
        doctest::Approx(m1["optimizer_bytes"].get<double>() / 4).epsilon(1e-12));
  CHECK(training(four)["context_parallel"]["tokens_per_rank"].get<int>() == 2048);
  CHECK(training(one).find("context_parallel") == training(one).end());  // only with cp > 1
}

TEST_CASE("context parallelism: a device sends (cp-1)/cp of the sequence's keys and values per forward and twice that per backward") {
  const Json two = run_text(star({.m = 3})), four = run_text(star({.cp = 4, .m = 3}));
  CHECK(training(two)["context_parallel"]["ring_bytes_per_device"].get<double>() == doctest::Approx(3 * 3 * kv_bytes(8192) / 2));
  CHECK(training(four)["context_parallel"]["ring_bytes_per_device"].get<double>() == doctest::Approx(3 * 3 * kv_bytes(8192) * 3 / 4));
  // Full recomputation passes them once more in the backward.
  const Json rec = run_text(star({.m = 3, .job = ", recompute: true"}));
  CHECK(training(rec)["context_parallel"]["ring_bytes_per_device"].get<double>() == doctest::Approx(3 * 4 * kv_bytes(8192) / 2));
}

TEST_CASE("context parallelism: an op takes its GEMMs, then the slower of its attention and its ring, and the last block's attention") {
  // cp 2 over two devices on the star (no latency): a forward's ring is an all-gather of
  // kv_bytes, each device sending half of it: R = kv / 2 / bandwidth; the backward's is twice
  // that, and its attention twice the forward's A. One micro-batch: the iteration is the forward,
  // the backward, the gradients' all-reduce over the two CP ranks and Adam's step.
  SUBCASE("comm-bound: past the attention, the ring and then the last of cp blocks' attention, 3 (R - A/2) an iteration") {
    const Json r = run_text(star({.link = "10GB/s"}));
    const double R = kv_bytes(8192) / 2 / 10e9, A = training(r)["context_parallel"]["attention_ms_per_micro_batch"].get<double>() / 1e3;
    REQUIRE(R > A);
    const double exposed = training(r)["context_parallel"]["ring_exposed_ms"].get<double>() / 1e3;
    CHECK(exposed == doctest::Approx(3 * (R - A / 2)).epsilon(1e-6));
    const Json& per = training(r)["per_micro_batch_ms"];
    const double f = per["forward"].get<double>() / 1e3, b = per["backward"].get<double>() / 1e3;
    // Twice the forward but for the loss, its six kernels forward and two backward each at a
    // launch's floor here (a vocabulary of 8).
    const double loss = per["loss"].get<double>() / 1e3;
    REQUIRE(loss > 0);
    CHECK(b == doctest::Approx(2 * (f - 0.75 * loss) + 0.25 * loss).epsilon(1e-6));
    REQUIRE(ms(r, "dp_allreduce_ms") > 0);  // the CP ranks hold the same parameters: their gradients are reduced
    CHECK(iteration(r) == doctest::Approx(f + b + exposed + ms(r, "dp_allreduce_ms") + ms(r, "optimizer_ms")).epsilon(1e-6));
  }
  SUBCASE("allgather (Llama 3's): the keys and values first, then the attention: the ring all exposed, 3R an iteration") {
    const Json r = run_text(star({.link = "100GB/s", .extra = ", cp_comm: allgather"}));
    const double R = kv_bytes(8192) / 2 / 100e9;
    const double exposed = training(r)["context_parallel"]["ring_exposed_ms"].get<double>() / 1e3;
    CHECK(exposed == doctest::Approx(3 * R).epsilon(1e-6));
    const Json& per = training(r)["per_micro_batch_ms"];
    CHECK(iteration(r) == doctest::Approx(per["forward"].get<double>() / 1e3 + per["backward"].get<double>() / 1e3 + exposed +
                                          ms(r, "dp_allreduce_ms") + ms(r, "optimizer_ms"))
                              .epsilon(1e-6));
    CHECK(training(r)["context_parallel"]["comm"] == "allgather");
  }
  SUBCASE("compute-bound: the ring hides under the attention") {
    const Json r = run_text(star({.link = "2000GB/s"}));
    const double R = kv_bytes(8192) / 2 / 2000e9, A = training(r)["context_parallel"]["attention_ms_per_micro_batch"].get<double>() / 1e3;
    REQUIRE(R < A);
    CHECK(training(r)["context_parallel"]["ring_exposed_ms"].get<double>() == 0);
    const Json& per = training(r)["per_micro_batch_ms"];
    CHECK(iteration(r) == doctest::Approx(per["forward"].get<double>() / 1e3 + per["backward"].get<double>() / 1e3 + ms(r, "dp_allreduce_ms") +
                                          ms(r, "optimizer_ms"))
                              .epsilon(1e-6));
  }
}

TEST_CASE("context parallelism: a rank's GEMMs run once over its s/cp tokens, its attention per chunk at the chunk's prefix") {
  // Llama-3-8B at 8192 tokens, cp 2 on the star: chunks of 2048, rank 0 holding chunks 0 and 3,
  // rank 1 chunks 1 and 2. The cost model's own parts, read here, give what the forward must be.
  std::string yaml = star({.sequence = 8192, .job = ", recompute: true"});  // (recomputing: it fits one H200)
  yaml.replace(yaml.find("model: {"), yaml.find("},\n     parallel") + 1 - yaml.find("model: {"), "model: llama3-8b");
  const Json r = run_text(yaml);
  const CostModel cm(load_hardware("h200"), load_model("llama3-8b"), CostOptions{1, 1, ""});
  auto attention = [&](long tokens, long prefix) {
    double ns = 0;
    for (const OpCost& o : cm.slice(1, tokens, prefix, cm.stage_range(0)).ops)
      if (o.op.rfind("attention", 0) == 0) ns += o.ns;
    return ns;
  };
  std::vector<double> whole(1);
  cm.slice_stage_ns(1, 4096, 0, true, whole);
  const double rest = whole[0] - attention(4096, 0);
  const double a = std::max(attention(2048, 0) + attention(2048, 6144), attention(2048, 2048) + attention(2048, 4096));
  CHECK(training(r)["context_parallel"]["attention_ms_per_micro_batch"].get<double>() == doctest::Approx(a / 1e6).epsilon(1e-6));
  // And the loss's forward over the rank's 4096 tokens: 38 bytes each of 128,256 logits, at the
  // device's bandwidth (the roofline).
  const double loss_f = 38.0 * 4096 * 128256 / load_hardware("h200").effective_bandwidth_Bps() * 1e9;
  CHECK(training(r)["per_micro_batch_ms"]["forward"].get<double>() == doctest::Approx((rest + a + loss_f) / 1e6).epsilon(1e-6));
}

TEST_CASE("context parallelism with tensor parallelism: each CP rank's TP group in its own server, the ring between servers") {
  // Two servers of two devices (NVLink inside, one switch between): tp 2 x cp 2 of a GQA model
  // (32 heads, 8 KV heads: 4 a TP rank). Each TP rank's ring carries its KV heads' share.
  const std::string yaml = R"(name: t
cluster:
  topology:
    kind: explicit
    nodes:
      - {name: s, kind: switch}
      - {name: d0, kind: device, group: 0}
      - {name: d1, kind: device, group: 0}
      - {name: d2, kind: device, group: 1}
      - {name: d3, kind: device, group: 1}
    links:
      - {a: d0, b: d1, bandwidth: 400GB/s, latency: 0ns}
      - {a: d2, b: d3, bandwidth: 400GB/s, latency: 0ns}
      - {a: d0, b: s, bandwidth: 50GB/s, latency: 0ns}
      - {a: d1, b: s, bandwidth: 50GB/s, latency: 0ns}
      - {a: d2, b: s, bandwidth: 50GB/s, latency: 0ns}
      - {a: d3, b: s, bandwidth: 50GB/s, latency: 0ns}
  hardware: h200
workloads:
  - {name: j, kind: training, sequence: 8192, cost_tables: none, iterations: 1,
     model: {name: gqa, layers: 4, hidden: 4096, heads: 32, kv_heads: 8, ffn: 16384, vocab: 8, max_context: 8192},
     parallel: {tp: 2, cp: 2, micro_batches: 1}}
)";
  const Json r = run_text(yaml);
  // 8192 tokens x K and V x 4 KV heads x 128 x 2 bytes x 4 layers, half of it sent, forward and backward (x3).
  const double kv = 8192.0 * 2 * 4 * 128 * 2 * 4;
  CHECK(training(r)["context_parallel"]["ring_bytes_per_device"].get<double>() == doctest::Approx(3 * kv / 2));
  CHECK(training(r)["job"]["devices"].get<int>() == 4);
  CHECK(training(r)["job"]["cp"].get<int>() == 2);
  // Flows an iteration: each op, a fused 2-device ring per TP rank (the KV ring, 2 flows) and per
  // CP rank (the TP all-reduce, 2 flows): 8; forward and backward: 16; the gradients' all-reduce
  // over the two CP ranks, per TP rank: 4. 20.
  CHECK(r["world"]["flows"]["started"].get<double>() == 20);
}

TEST_CASE("context parallelism: each rank computes about 1/cp of the sequence's work") {
  const double f1 = training(run_text(star({.cp = 1})))["per_micro_batch_ms"]["forward"].get<double>();
  const double f4 = training(run_text(star({.cp = 4})))["per_micro_batch_ms"]["forward"].get<double>();
  // The two chunks of a rank attend over as many keys as any other rank's: a quarter of the
  // causal attention and of the GEMMs' rows, plus the kernels' fixed costs paid twice.
  CHECK(f4 < f1 / 3);
  CHECK(f4 > f1 / 4 * 0.9);
}

TEST_CASE("context parallelism with ZeRO-3: the weights shard over dp x cp and every layer gathers over the CP ranks beside its ring") {
  const Json z2 = run_text(star({.cp = 4, .extra = ", zero: 2"})), z3 = run_text(star({.cp = 4, .extra = ", zero: 3"}));
  const Json& m2 = training(z2)["memory_per_device"];
  const Json& m3 = training(z3)["memory_per_device"];
  // The bf16 shard is the gradients' (a quarter), and two of the 4 layers gathered whole twice that.
  CHECK(m3["gradients_bytes"] == m2["gradients_bytes"]);
  CHECK(m3["weights_bytes"].get<double>() == doctest::Approx(3 * m3["gradients_bytes"].get<double>()).epsilon(1e-12));
  CHECK(m3["weights_bytes"].get<double>() < m2["weights_bytes"].get<double>() * 0.8);
  // One micro-batch. ZeRO-2: the forward's and the backward's key/value rings (4 flows each: one
  // per edge, every layer's steps fused), then the gradients' reduce-scatter and the parameters'
  // gather over the 4 CP ranks (4 each). ZeRO-3 runs each of the 4 layers on its own: its ring
  // (a quarter of the bytes) and its gather, and after a backward layer its reduce-scatter.
  CHECK(training(z2)["flows"].get<int>() == 2 * 4 + 2 * 4);
  CHECK(training(z3)["flows"].get<int>() == 4 * (4 + 4) + 4 * (4 + 4 + 4));
  const Json& c2 = training(z2)["context_parallel"];
  const Json& c3 = training(z3)["context_parallel"];
  CHECK(c3["ring_bytes_per_device"] == c2["ring_bytes_per_device"]);
  // The same keys and values cross a layer at a time: the busiest link carries ZeRO-2's bytes and
  // one more 3/4-shard collective (the backward's gather; both stages reduce-scatter and gather once).
  const double link2 = z2["world"]["fabric"]["most_loaded_link"]["bytes"].get<double>();
  const double link3 = z3["world"]["fabric"]["most_loaded_link"]["bytes"].get<double>();
  CHECK(link3 - link2 == doctest::Approx(3 * training(z3)["memory_per_device"]["gradients_bytes"].get<double>()).epsilon(1e-12));
  // A layer's ring shares the CP ranks' links with the next layer's gather: more of it shows.
  CHECK(c3["ring_exposed_ms"].get<double>() > c2["ring_exposed_ms"].get<double>());
  // Each gather runs while the layer before it computes, the reduce-scatters while the backward
  // goes on, and nothing is gathered after Adam's step: ZeRO-3 ends first here.
  CHECK(iteration(z3) < iteration(z2));
  // With two replicas of cp 2, the same rings over dp x cp, and the same bytes with the fast-forward on and off.
  const std::string yaml = star({.sequence = 4096, .m = 2, .dp = 2, .iterations = 40, .extra = ", zero: 3"}) + R"(faults:
  - {name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 2s}, repair: {dist: fixed, mean: 100ms}}
)";
  testing::same_with_and_without_fast_forward(yaml);
}

TEST_CASE("context parallelism: the same bytes with the fast-forward on and off under failures") {
  const std::string yaml = star({.sequence = 4096, .m = 2, .iterations = 40}) + R"(faults:
  - {name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 2s}, repair: {dist: fixed, mean: 100ms}}
)";
  testing::same_with_and_without_fast_forward(yaml);
}

TEST_CASE("context parallelism: refused where the sequence does not cut into 2 cp chunks, and with token slicing") {
  CHECK_THROWS_WITH_AS(run_text(star({.cp = 3})), doctest::Contains("parallel.cp"), ConfigError);  // 8192 / 6
  std::string sliced = star({});
  sliced.replace(sliced.find("parallel: {"), 11, "slicing: {policy: uniform, slices: 2}, parallel: {schedule: gpipe, ");
  CHECK_THROWS_WITH_AS(run_text(sliced), doctest::Contains("slicing.policy"), ConfigError);
  // More devices than the cluster has: 2 x 4 x 1 x 1 = 8 on four.
  CHECK_THROWS_AS(run_text(star({.cp = 4, .dp = 2})), ConfigError);
}
