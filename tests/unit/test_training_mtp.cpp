// Training DeepSeek-V3's multi-token prediction modules (job key mtp_layers), checked by hand on
// small models: what the last stage costs (one more layer, a 2h -> h projection, the LM head
// again), what it holds, the all-to-alls and all-reduces its layer adds, and the FLOPs MFU counts.
#include <doctest/doctest.h>

#include "test_support.h"

#include <algorithm>

#include "config/error.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"
#include "run/runner.h"
#include "workloads/training/training.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// Two layers, hidden 1024, 8 heads of 128, a gated MLP of 4096; a vocabulary of 32000.
ModelSpec tiny(bool moe) {
  ModelSpec m;
  m.name = "tiny", m.layers = 2, m.hidden = 1024, m.heads = 8, m.kv_heads = 8, m.head_dim = 128, m.ffn = 4096, m.vocab = 32000;
  m.max_context = 4096;
  if (moe) m.experts = 4, m.experts_per_token = 2, m.expert_ffn = 2048;
  return m;
}

constexpr double kH = 1024, kV = 32000, kS = 512;
const double kAttention = 4 * kH * kH + 2 * kH;  // q, k, v, o and the layer's two norms
const double kDenseLayer = kAttention + 3 * kH * 4096;

double op_flops(const IterationCost& it, const std::string& name) {
  double f = 0;
  for (const OpCost& o : it.ops)
    if (o.op == name) f += o.flops;
  return f;
}

const std::string kMoeStar = std::string(sluice::testing::kFourDeviceStar) + R"(workloads:
  - {name: j, kind: training, sequence: 512, iterations: 2, cost_tables: none,
     model: {name: tiny-moe, layers: 2, hidden: 1024, heads: 8, kv_heads: 8, ffn: 4096, vocab: 8, max_context: 512,
             experts: 4, experts_per_token: 2, expert_ffn: 2048},
     parallel: {tp: 1, pp: 1, dp: 4, micro_batches: 2, expert_parallel: 4}}
)";

}  // namespace

TEST_CASE("mtp training: the last stage runs one more layer, the module's projection and the LM head again") {
  const HardwareSpec hw = load_hardware("h100-sxm");
  CostOptions o{2, 2, ""};
  o.sequence_parallel = true;
  const CostModel plain(hw, tiny(false), o);
  o.mtp_layers = 1;
  const CostModel mtp(hw, tiny(false), o);
  // Stage 1 of 2 (one layer) gains a module: its layer, so every layer GEMM's FLOPs double.
  REQUIRE(mtp.stage_range(1).mtp == 1);
  CHECK(mtp.stage_range(0).mtp == 0);
  const long M = 4 * 512;
  const IterationCost a = plain.slice(4, 512, 0, plain.stage_range(1)), b = mtp.slice(4, 512, 0, mtp.stage_range(1));
  CHECK(op_flops(b, "gemm.o") == doctest::Approx(2 * op_flops(a, "gemm.o")).epsilon(1e-12));
  CHECK(op_flops(b, "gemm.down") == doctest::Approx(2 * op_flops(a, "gemm.down")).epsilon(1e-12));
  // Its projection, 2h -> h split over tp 2, over every token; and an LM head over every token
  // (the vocabulary split over tp 2; the plain slice samples no rows, so it has none).
  CHECK(op_flops(a, "gemm.mtp_proj") == 0);
  CHECK(op_flops(b, "gemm.mtp_proj") == doctest::Approx(2.0 * M * 2 * kH * kH / 2).epsilon(1e-12));
  CHECK(op_flops(b, "lm_head") - op_flops(a, "lm_head") == doctest::Approx(2.0 * M * kH * kV / 2).epsilon(1e-12));
  CHECK(b.total_ns > a.total_ns);
  // The first stage is untouched.
  CHECK(mtp.slice(4, 512, 0, mtp.stage_range(0)).total_ns == plain.slice(4, 512, 0, plain.stage_range(0)).total_ns);
  // Its layer's two tensor-parallel all-reduces.
  CHECK(mtp.tp_allreduce_count(1) == plain.tp_allreduce_count(1) + 2);
  CHECK(mtp.tp_allreduce_count(0) == plain.tp_allreduce_count(0));
}

TEST_CASE("mtp training: the last rank holds the module and a copy of the embedding, and MFU counts its FLOPs") {
  training::TrainingConfig c;
  c.model = tiny(false);
  c.tp = 2, c.pp = 2, c.dp = 1, c.sequence = 512;
  const double table = kV * kH;
  const double plain = training::rank_parameters(c, 1).total();
  CHECK(plain == doctest::Approx((kDenseLayer + table + kH) / 2).epsilon(1e-12));
  c.mtp_layers = 1;
  // The module: a layer, its 2h x h projection and three norms; the embedding beside the head.
  const double module = kDenseLayer + 2 * kH * kH + 3 * kH;
  CHECK(training::rank_parameters(c, 1).total() == doctest::Approx(plain + (module + table) / 2).epsilon(1e-12));
  CHECK(training::rank_parameters(c, 0).total() == doctest::Approx((kDenseLayer + table) / 2).epsilon(1e-12));
  // On one rank the embedding is there already.
  c.pp = 1;
  c.mtp_layers = 0;
  const double one = training::rank_parameters(c, 0).total();
  c.mtp_layers = 2;
  CHECK(training::rank_parameters(c, 0).total() == doctest::Approx(one + 2 * module / 2).epsilon(1e-12));
  // FLOPs a token: 6 x (each module's layer, projection and LM head) more, and its attention.
  c.mtp_layers = 0;
  const double f0 = training::model_flops_per_token(c);
  c.mtp_layers = 1;
  CHECK(training::model_flops_per_token(c) - f0 == doctest::Approx(6 * (kDenseLayer + 2 * kH * kH + kV * kH) + 12 * kH * kS).epsilon(1e-12));
  // An MoE module counts the experts a token passes through (2 of 4 here), not all of them.
  c.model = tiny(true);
  c.mtp_layers = 0;
  const double m0 = training::model_flops_per_token(c);
  c.mtp_layers = 1;
  const double moe_active = kAttention + kH * 4 + 2 * 3 * kH * 2048;
  CHECK(training::model_flops_per_token(c) - m0 == doctest::Approx(6 * (moe_active + 2 * kH * kH + kV * kH) + 12 * kH * kS).epsilon(1e-12));
}

TEST_CASE("mtp training: an MoE module's layer adds its dispatch and combine, and the job runs it end to end") {
  const Json plain = run_text(kMoeStar)["training"];
  const Json mtp = run_text(kMoeStar, {"workloads.0.mtp_layers=1"})["training"];
  CHECK(mtp["job"]["mtp_layers"] == 1);
  // Two MoE layers and the module's: three layers' all-to-alls where there were two.
  CHECK(mtp["moe"]["alltoall_bytes_per_device"].get<double>() ==
        doctest::Approx(1.5 * plain["moe"]["alltoall_bytes_per_device"].get<double>()).epsilon(1e-12));
  CHECK(mtp["iteration_s_mean"].get<double>() > plain["iteration_s_mean"].get<double>());
  CHECK(mtp["memory_per_device"]["weights_bytes"].get<double>() > plain["memory_per_device"]["weights_bytes"].get<double>());
  // Activations: the module's layer as a third, and its head's fp32 softmax of the logits (512
  // tokens x vocab 8 x 4 bytes) beside the main head's.
  const double loss = 512 * 8 * 4;
  const auto act = [](const Json& t) { return t["memory_per_device"]["activations_bytes"].get<double>(); };
  CHECK(act(mtp) == doctest::Approx(1.5 * (act(plain) - loss) + 2 * loss).epsilon(1e-12));
  // The module's work makes each iteration longer: fewer tokens a second.
  CHECK(mtp["tokens_per_s"].get<double>() < plain["tokens_per_s"].get<double>());
  CHECK_THROWS_WITH_AS(run_text(kMoeStar, {"workloads.0.mtp_layers=9"}), doctest::Contains("workloads[0].mtp_layers"), ConfigError);
  // The same bytes with the fast-forward on and off, through GPU failures and restarts.
  std::string yaml = kMoeStar;
  yaml.replace(yaml.find("iterations: 2"), 13, "iterations: 40, mtp_layers: 1");
  sluice::testing::same_with_and_without_fast_forward(yaml + R"(faults:
  - {name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 2s}, repair: {dist: fixed, mean: 100ms}}
)");
}
