// Training a model with multi-head latent attention (DeepSeek-V2/V3's MLA), checked by hand on
// a small one: the activations each layer keeps, the latent down projections held whole on every
// tensor-parallel rank, the keys and values context parallelism moves, and the FLOPs MFU counts.
#include <doctest/doctest.h>

#include "test_support.h"

#include "config/error.h"
#include "run/runner.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// Two layers, hidden 1024, 8 heads of 64 (+ a 32-wide rotary key, values of 64), a query
// bottleneck of 256 and a key-value latent of 128; a dense MLP of 4096.
const std::string kJob = R"(workloads:
  - {name: j, kind: training, sequence: 512, iterations: 2, cost_tables: none,
     model: {name: tiny-mla, layers: 2, hidden: 1024, heads: 8, kv_heads: 8, head_dim: 64, ffn: 4096, vocab: 8, max_context: 512,
             q_lora_rank: 256, kv_lora_rank: 128, qk_rope_head_dim: 32, v_head_dim: 64},
     parallel: {tp: 1, pp: 1, dp: 4, micro_batches: 2}}
)";
const std::string kStar = std::string(sluice::testing::kFourDeviceStar) + kJob;
const std::string kTwo = sluice::testing::kTwoServersOfTwo + kJob;

constexpr double kS = 512, kH = 1024, kA = 8, kD = 64, kR = 32, kV = 64, kQl = 256, kKvl = 128, kF = 4096, kL = 2;

}  // namespace

TEST_CASE("mla training: a layer keeps the up-projected queries, keys and values per head and the latents") {
  const Json t = run_text(kStar)["training"];
  // Attention: input and mask 3sbh, queries and keys a(d + r) wide, values and output a v wide
  // (2sb each), each row's fp32 log-sum-exp 4as; the two latents as their norms' and up
  // projections' inputs 4s(q_lora + kv_lora); the two layer norms 4sbh; a gated MLP 3sbh + 6sf.
  // One micro-batch in flight (pp 1), two layers.
  const double qk = kA * (kD + kR), v = kA * kV;
  const double attention = 3 * kS * kH + 2 * kS * (2 * qk + 2 * v) + 4 * kA * kS + 4 * kS * (kQl + kKvl);
  const double layer = attention + 4 * kS * kH + 3 * kS * kH + 6 * kS * kF;
  const double loss = kS * 8 * 4;  // the loss's fp32 softmax of the logits (vocab 8)
  CHECK(t["memory_per_device"]["activations_bytes"].get<double>() == doctest::Approx(kL * layer + loss).epsilon(1e-12));
  // Trained without dropout (as DeepSeek-V3 is), a layer keeps neither one-byte mask: the
  // attention output projection's and the MLP's, sbh each.
  const Json nd = run_text(kStar, {"workloads.0.dropout=false"})["training"];
  CHECK(nd["memory_per_device"]["activations_bytes"].get<double>() == doctest::Approx(kL * (layer - 2 * kS * kH) + loss).epsilon(1e-12));
  // Under TP2 (sequence parallel) all of it splits.
  const Json t2 = run_text(kTwo, {"workloads.0.parallel.tp=2", "workloads.0.parallel.dp=2"})["training"];
  CHECK(t2["memory_per_device"]["activations_bytes"].get<double>() == doctest::Approx((kL * layer + loss) / 2).epsilon(1e-12));
  // Weights under TP2: half of every parameter but the down projections (query bottleneck and
  // latent with its rotary key, and their norms), which every rank holds whole.
  const double down = kL * (kH * kQl + kQl + kH * (kKvl + kR) + kKvl);
  const double whole = t["memory_per_device"]["weights_bytes"].get<double>() / 2;
  CHECK(t2["memory_per_device"]["weights_bytes"].get<double>() / 2 == doctest::Approx(whole / 2 + down / 2).epsilon(1e-12));
}

TEST_CASE("mla training: MFU counts attention at latent attention's own widths") {
  // The parameters a token passes through (the model's, by hand): per layer the query bottleneck
  // down and up (with its norm), the latent down (with the rotary key) and its norm, the latent's
  // up projection to keys and values, the output projection, a gated MLP and two RMSNorms; then
  // the LM head (vocab 8; the untied embedding's lookup is no GEMM: not counted) and the final norm.
  const double attn = kH * kQl + kQl * kA * (kD + kR) + kQl + kH * (kKvl + kR) + kKvl + kKvl * kA * (kD + kV) + kA * kV * kH;
  const double params = kL * (attn + 3 * kH * kF + 2 * kH) + 8 * kH + kH;
  // MFU x devices x peak = model FLOPs per second = tokens/s x (6 params + 6 L s a (d + r + v)).
  const Json t = run_text(kStar)["training"];
  const double per_token = 6 * params + 6 * kL * kS * kA * (kD + kR + kV);
  CHECK(t["mfu"].get<double>() * 4 * 989e12 == doctest::Approx(t["tokens_per_s"].get<double>() * per_token).epsilon(1e-9));
}

TEST_CASE("mla training: context parallelism moves each rank's heads' keys (head_dim + rope) and values (v_head_dim)") {
  // (Every query head has its keys and values: kv_heads, a plain-attention field, plays no part.)
  const Json t = run_text(kStar, {"workloads.0.parallel.dp=2", "workloads.0.parallel.cp=2", "workloads.0.model.kv_heads=2"})["training"];
  // Per op, the keys and values of the stage's layers go around the ring: (cp - 1) / cp of
  // s x a x (d + r + v) x 2 bytes x L; forward once, backward twice: 3 per micro-batch.
  const double kv = kS * kA * (kD + kR + kV) * 2 * kL;
  CHECK(t["context_parallel"]["ring_bytes_per_device"].get<double>() == doctest::Approx(2 * 3 * kv / 2).epsilon(1e-12));
}
