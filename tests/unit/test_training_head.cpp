// The model's ends in training: the loss (Megatron's vocabulary-parallel cross-entropy on the
// last stage, costed as the memory-bound kernels it runs: 38 bytes a bf16 logit forward, 14
// backward; fused with loss_fusion, 22 and 10), the LM head's GEMMs left out of full recomputation (Megatron checkpoints the
// decoder layers only), the embedding group's gradient all-reduce between the first and last
// pipeline rank, and the model FLOPs MFU counts (the logits once, no lookups). By hand on the
// star's H200s, without tables (the roofline: the device's effective bandwidth for every
// kernel, each far above a launch's floor where it says so).
#include <doctest/doctest.h>

#include "test_support.h"

#include "hardware/spec.h"
#include "run/runner.h"
#include "workloads/training/training.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// One device, one micro-batch of `sequence` tokens of a 2-layer model with a `vocab` vocabulary.
std::string one_device(int vocab, bool recompute, int sequence = 2048, const std::string& job = "") {
  const std::string s = std::to_string(sequence);
  return std::string(sluice::testing::kFourDeviceStar) + "workloads:\n  - {name: j, kind: training, sequence: " + s +
         ", cost_tables: none, iterations: 1, recompute: " + (recompute ? "true" : "false") + job +
         ",\n     model: {name: flat, layers: 2, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: " +
         std::to_string(vocab) + ", max_context: " + s + "},\n     parallel: {tp: 1, pp: 1, dp: 1, micro_batches: 1}}\n";
}

const Json& per_mb(const Json& m) { return m["training"]["per_micro_batch_ms"]; }

}  // namespace

TEST_CASE("Training loss: the cross-entropy moves 52 bytes a logit, in the last stage's forward and backward") {
  const double bw = load_hardware("h200").effective_bandwidth_Bps();
  const double S = 2048, V = 128000;
  const Json big = run_text(one_device(128000, false));
  const double loss_ms = per_mb(big)["loss"].get<double>();
  // Forward: cast (2 + 4), max (4), subtract (8), exp (8), sum (4), divide (8) = 38 bytes a
  // logit; backward: scale (8), cast back (4 + 2) = 14.
  CHECK(loss_ms == doctest::Approx(52 * S * V / bw * 1e3).epsilon(1e-6));
  // Twice the tokens, twice the loss.
  CHECK(per_mb(run_text(one_device(128000, false, 4096)))["loss"].get<double>() == doctest::Approx(2 * loss_ms).epsilon(1e-6));
  // A tiny vocabulary: six and two kernels at a launch's floor, next to nothing.
  CHECK(per_mb(run_text(one_device(8, false)))["loss"].get<double>() < 0.02);
}

TEST_CASE("Training loss: fused (loss_fusion) it moves 32 bytes a logit in four kernels, and only the loss changes") {
  const double bw = load_hardware("h200").effective_bandwidth_Bps();
  const double S = 2048, V = 128000;
  const Json plain = run_text(one_device(128000, false)), fused = run_text(one_device(128000, false, 2048, ", loss_fusion: true"));
  // Forward: cast and max (2 + 4), subtract-exp-sum (8), divide (8) = 22; backward: scale in
  // place and cast back, 4 + 4 + 2 = 10.
  const double loss_ms = per_mb(fused)["loss"].get<double>();
  CHECK(loss_ms == doctest::Approx(32 * S * V / bw * 1e3).epsilon(1e-6));
  CHECK(fused["training"]["job"]["loss_fusion"] == true);
  CHECK(plain["training"]["job"]["loss_fusion"] == false);
  // The forward and backward differ from the unfused run's by the loss's own difference:
  // 38 - 22 and 14 - 10 bytes a logit; the fp32 softmax kept is the same memory.
  const double d_fwd = (38 - 22) * S * V / bw * 1e3, d_bwd = (14 - 10) * S * V / bw * 1e3;
  CHECK(per_mb(plain)["forward"].get<double>() - per_mb(fused)["forward"].get<double>() == doctest::Approx(d_fwd).epsilon(1e-4));
  CHECK(per_mb(plain)["backward"].get<double>() - per_mb(fused)["backward"].get<double>() == doctest::Approx(d_bwd).epsilon(1e-4));
  CHECK(fused["training"]["memory_per_device"]["total_bytes"] == plain["training"]["memory_per_device"]["total_bytes"]);
  // A tiny vocabulary: every kernel at a launch's floor, four of them against eight: three
  // forward against six, one backward against two.
  const Json tp = run_text(one_device(8, false)), tf = run_text(one_device(8, false, 2048, ", loss_fusion: true"));
  const double floor = per_mb(tp)["loss"].get<double>() / 8;
  CHECK(per_mb(tf)["loss"].get<double>() == doctest::Approx(4 * floor).epsilon(1e-3));
  CHECK(per_mb(tp)["forward"].get<double>() - per_mb(tf)["forward"].get<double>() == doctest::Approx(3 * floor).epsilon(1e-3));
  CHECK(per_mb(tp)["backward"].get<double>() - per_mb(tf)["backward"].get<double>() == doctest::Approx(floor).epsilon(1e-3));
}

TEST_CASE("Training loss: full recomputation repeats the decoder layers' forward, not the LM head's nor the loss") {
  const Json plain = run_text(one_device(128000, false)), rc = run_text(one_device(128000, true));
  const double f = per_mb(plain)["forward"].get<double>(), b = per_mb(plain)["backward"].get<double>();
  const double b_rc = per_mb(rc)["backward"].get<double>(), loss = per_mb(plain)["loss"].get<double>();
  CHECK(per_mb(rc)["forward"].get<double>() == doctest::Approx(f));
  const double bw = load_hardware("h200").effective_bandwidth_Bps();
  const double loss_f = 38 * 2048 * 128000.0 / bw * 1e3, loss_b = loss - loss_f;
  // Without recomputation the backward is twice the layers' and heads' forward plus the loss's own.
  CHECK(b == doctest::Approx(2 * (f - loss_f) + loss_b).epsilon(1e-6));
  // Recomputing adds the layers' forward once more, less the head's: the head's GEMM over the
  // 2048 x 128000 logits (2 S h V FLOPs) is what is not recomputed, at least its FLOPs' time at
  // the device's effective ceiling and a good part of this small model's forward.
  const double head = (f - loss_f) - (b_rc - b);
  const double head_flops_ms = 2 * 2048 * 4096 * 128000.0 / load_hardware("h200").effective_flops() * 1e3;
  CHECK(head >= head_flops_ms * (1 - 1e-6));
  CHECK(head <= 1.5 * head_flops_ms);
  CHECK(b_rc < 3 * (f - loss_f) + loss_b - 0.5 * head);
}

namespace {

// Two pipeline ranks of two replicas on the star (d0, d1 the first rank; d2, d3 the last), a
// `vocab`-token vocabulary, its LM head tied to the embedding or not.
std::string two_ranks(bool tied, const std::string& job = "") {
  return std::string(sluice::testing::kFourDeviceStar) +
         "workloads:\n  - {name: j, kind: training, sequence: 1024, cost_tables: none, iterations: 1" + job +
         ",\n     model: {name: flat, layers: 4, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 32000, max_context: 1024, "
         "tied_embeddings: " + (tied ? "true" : "false") + "},\n     parallel: {tp: 1, pp: 2, dp: 2, micro_batches: 2}}\n";
}

}  // namespace

TEST_CASE("Tied embeddings: the first and last pipeline ranks all-reduce the embedding's gradient after the data-parallel reduction") {
  const Json tied = run_text(two_ranks(true)), untied = run_text(two_ranks(false));
  const double B = 32000.0 * 4096 * 2;  // vocab x hidden, bf16
  CHECK(tied["training"]["embedding_grads_bytes_per_device"].get<double>() == B);
  CHECK(untied["training"]["embedding_grads_bytes_per_device"].get<double>() == 0);
  // The pairs (d0, d2) and (d1, d3) share no link: a two-rank ring moves B/2 each way twice at
  // 100 GB/s, after both ranks' own reductions and before the optimizer steps: B / 100 GB/s more.
  const double dt = tied["training"]["iteration_s_mean"].get<double>() - untied["training"]["iteration_s_mean"].get<double>();
  CHECK(dt == doctest::Approx(B / 100e9).epsilon(1e-6));
  CHECK(tied["training"]["dp_allreduce_ms"].get<double>() - untied["training"]["dp_allreduce_ms"].get<double>() ==
        doctest::Approx(B / 100e9 * 1e3).epsilon(1e-6));
  // MTP modules on the last rank read the embedding too (DeepSeek-V3's shared embedding): the
  // same all-reduce with an untied head.
  CHECK(run_text(two_ranks(false, ", mtp_layers: 1"))["training"]["embedding_grads_bytes_per_device"].get<double>() == B);
  // One pipeline rank holds the one table: nothing to all-reduce.
  const Json one = run_text(std::string(sluice::testing::kFourDeviceStar) +
                            "workloads:\n  - {name: j, kind: training, sequence: 1024, cost_tables: none, iterations: 1,\n"
                            "     model: {name: flat, layers: 4, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 32000, "
                            "max_context: 1024, tied_embeddings: true},\n     parallel: {tp: 1, pp: 1, dp: 4, micro_batches: 2}}\n");
  CHECK(one["training"]["embedding_grads_bytes_per_device"].get<double>() == 0);
}

TEST_CASE("Model FLOPs count the LM head's logits once: tied or not, the same FLOPs a token (the lookup is no GEMM)") {
  training::TrainingConfig c;
  c.model = load_model("llama3-8b");
  c.sequence = 8192;
  const double untied = training::model_flops_per_token(c);
  c.model.tied_embeddings = true;
  CHECK(training::model_flops_per_token(c) == doctest::Approx(untied).epsilon(1e-12));
  // Megatron's formula by hand: 6 a GEMM weight a token (the decoder layers and the logits,
  // V h), 12 L h s of attention.
  const ModelSpec& m = c.model;
  const double h = m.hidden, V = static_cast<double>(m.vocab);
  const double layers = m.parameters() - V * h - h;  // tied: one table; less the final norm
  CHECK(untied == doctest::Approx(6 * (layers + h + V * h) + 12.0 * m.layers * h * 8192).epsilon(1e-12));
}
