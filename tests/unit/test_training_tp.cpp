// Training's tensor-parallel collectives on the fabric (TrainingJob::tp_pass), by hand on a star
// of two 2-device servers: the decoder layers' two all-reduces a layer (twice in a recomputing
// backward), the embedding's reduce-scatter and all-gather on the first stage, each LM head's
// all-gather and reduce-scatter and the loss's per-token fp32 all-reduces on the last, and a
// multi-token prediction module's embedding and projection gathers. A ring of two moves each
// all-reduce's buffer once through every device's link; a reduce-scatter or all-gather half of
// it, in half the steps. (Not run, so not counted: the backward's re-gather of a sequence-
// parallel input for a weight gradient, which Megatron hides under the input gradient's GEMM.)
#include <doctest/doctest.h>

#include "test_support.h"

#include <string>

using namespace sluice;
using sluice::testing::run_text;

namespace {

constexpr double kTokens = 2048, kRow = 4096 * 2;  // a micro-batch's tokens; a token's bf16 activation

// The star with d0, d1 in one server and d2, d3 in another; `latency` on every link.
std::string star(const std::string& latency) {
  std::string s = sluice::testing::kFourDeviceStar;
  auto swap = [&](const std::string& a, const std::string& b) {
    const auto at = s.find(a);
    REQUIRE(at != std::string::npos);
    s.replace(at, a.size(), b);
  };
  swap("{name: d1, kind: device, group: 1}", "{name: d1, kind: device, group: 0}");
  swap("{name: d3, kind: device, group: 3}", "{name: d3, kind: device, group: 2}");
  for (auto at = s.find("latency: 0ns"); at != std::string::npos; at = s.find("latency: 0ns", at + 1))
    s.replace(at, 12, "latency: " + latency);
  return s;
}

// Two decoder layers, tp 2 over `pp` stages, one micro-batch of 2048 tokens, no tables.
std::string job(int pp, const std::string& extra, const std::string& latency = "0ns") {
  return star(latency) + "workloads:\n  - {name: j, kind: training, sequence: 2048, cost_tables: none, iterations: 1" + extra +
         ",\n     model: {name: flat, layers: 2, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 128000, max_context: 2048},\n"
         "     parallel: {tp: 2, pp: " +
         std::to_string(pp) + ", dp: 1, micro_batches: 1}}\n";
}

// Bytes the directed link `name` carried in the run.
double link_bytes(const Json& m, const std::string& name) {
  for (const Json& l : m["world"]["fabric"]["hottest_links"])
    if (l["link"] == name) return l["bytes"].get<double>();
  FAIL("no link " << name);
  return 0;
}

}  // namespace

TEST_CASE("Training tp collectives: the first and last stage's links carry the layers', embedding's, heads' and loss's bytes") {
  const double handoff = kTokens * kRow / 2;  // each device's half of the activations (or their gradient) to the other stage
  const Json m = run_text(job(2, ", recompute: false"));
  // First stage (one layer and the embedding): forward two all-reduces and the embedding's
  // reduce-scatter (half one), backward the same with its all-gather: 2.5 rows a token each way.
  CHECK(link_bytes(m, "d0 -> s") == doctest::Approx(kTokens * (2.5 + 2.5) * kRow + handoff).epsilon(1e-12));
  CHECK(link_bytes(m, "s -> d1") == link_bytes(m, "d0 -> s"));
  // Last stage (one layer, the LM head and the loss): forward the layer's two, the head's
  // all-gather and the loss's three fp32 scalars a token (12 bytes); backward the two and the
  // head's reduce-scatter.
  CHECK(link_bytes(m, "d2 -> s") == doctest::Approx(kTokens * ((2.5 + 2.5) * kRow + 12) + handoff).epsilon(1e-12));
  // loss_fusion sends the last two scalars as one: the same bytes.
  CHECK(link_bytes(run_text(job(2, ", recompute: false, loss_fusion: true")), "d2 -> s") == link_bytes(m, "d2 -> s"));
  // Full recomputation: the backward runs the recomputed forward's two a layer and its own two;
  // the embedding, the head and the loss are not recomputed.
  const Json rc = run_text(job(2, ", recompute: true"));
  CHECK(link_bytes(rc, "d0 -> s") == doctest::Approx(kTokens * (2.5 + 4.5) * kRow + handoff).epsilon(1e-12));
  CHECK(link_bytes(rc, "d2 -> s") == doctest::Approx(kTokens * ((2.5 + 4.5) * kRow + 12) + handoff).epsilon(1e-12));
  // Learned positions (GPT-3): Megatron all-reduces the embedding forward (a whole row a token)
  // and splits it into the sequence-parallel region (an all-gather backward).
  const Json gpt = run_text(job(2, ", recompute: false"), {"workloads.0.model.positions=learned"});
  CHECK(link_bytes(gpt, "d0 -> s") == doctest::Approx(kTokens * (3 + 2.5) * kRow + handoff).epsilon(1e-12));
  CHECK(link_bytes(gpt, "d2 -> s") == link_bytes(m, "d2 -> s"));
}

TEST_CASE("Training tp collectives: a multi-token prediction module adds its layer's, its head's and its projection's gathers") {
  const double handoff = kTokens * kRow / 2;
  const Json m = run_text(job(2, ", recompute: false, mtp_layers: 1"));
  const Json rc = run_text(job(2, ", recompute: true, mtp_layers: 1"));
  // With the module, the first and last rank also all-reduce the embedding's gradient (its
  // vocab / tp rows, once through each link of a ring of two).
  const double embedding = 128000 / 2 * kRow;
  CHECK(m["training"]["embedding_grads_bytes_per_device"].get<double>() == embedding);
  // Last stage, forward: two layers' two all-reduces (4 rows), two heads' all-gathers (1), two
  // losses' scalars (24 bytes), the module's embedding reduce-scatter (0.5), its 2h input's
  // all-gather (1) and its output's all-gather (0.5); backward the same less the losses.
  CHECK(link_bytes(m, "d2 -> s") == doctest::Approx(kTokens * (2 * 7 * kRow + 24) + handoff + embedding).epsilon(1e-12));
  // The first stage is as without it.
  CHECK(link_bytes(m, "d0 -> s") == doctest::Approx(kTokens * 5 * kRow + handoff + embedding).epsilon(1e-12));
  // Recomputing, the backward runs both layers' two again and the projection's two gathers
  // (1.5 rows), in the module's checkpoint; not the heads, the losses nor the embedding.
  CHECK(link_bytes(rc, "d2 -> s") == doctest::Approx(kTokens * (2 * 7 * kRow + 4 * kRow + 1.5 * kRow + 24) + handoff + embedding).epsilon(1e-12));
}

TEST_CASE("Training tp collectives: each all-reduce pays a ring's steps' latencies, a reduce-scatter or all-gather half") {
  // One stage of both layers: forward 2 x 2 layer all-reduces, the embedding's and the head's
  // halves and the loss's three (8 all-reduces' worth), backward 4 + 0.5 + 0.5 (5). A ring of two
  // takes two steps an all-reduce, each over two links of 1 us.
  auto iteration_s = [](const std::string& extra, const std::string& latency) {
    return run_text(job(1, ", recompute: false" + extra, latency))["training"]["iteration_s_mean"].get<double>();
  };
  const double step_s = 2e-6;
  CHECK(iteration_s("", "1us") - iteration_s("", "0ns") == doctest::Approx(13 * 2 * step_s).epsilon(1e-6));
  // Fused, the loss sends two all-reduces: one ring's latencies fewer.
  const double fused = iteration_s(", loss_fusion: true", "1us") - iteration_s(", loss_fusion: true", "0ns");
  CHECK(fused == doctest::Approx(12 * 2 * step_s).epsilon(1e-6));
  // Recomputing, the backward runs the layers' four again: 8 + 9.
  const double rc = run_text(job(1, ", recompute: true", "1us"))["training"]["iteration_s_mean"].get<double>() -
                    run_text(job(1, ", recompute: true", "0ns"))["training"]["iteration_s_mean"].get<double>();
  CHECK(rc == doctest::Approx(17 * 2 * step_s).epsilon(1e-6));
}
