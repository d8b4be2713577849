// Training in FP8 (DeepSeek-V3's recipe, Transformer Engine's): the linear layers' GEMMs forward
// and backward at the device's FP8 rate, the MoE dispatch in FP8 with its scales and the combine
// in bf16, memory unchanged (master weights, gradients and optimizer state keep their types),
// MFU against the FP8 peak; a device without FP8 refused at the key.
#include <doctest/doctest.h>

#include "test_support.h"

#include <string>

#include "config/error.h"
#include "hardware/spec.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// Four H200s on a star, an MoE model of two layers with four experts (top-2), EP 4, and a
// dense model of the same shape without experts.
const std::string kMoe = sluice::testing::moe_training_on_star();
const std::string kDense = std::string(sluice::testing::kFourDeviceStar) + R"(workloads:
  - {name: j, kind: training, sequence: 4096, iterations: 2, cost_tables: none,
     model: {name: tiny-dense, layers: 4, hidden: 8192, heads: 64, kv_heads: 8, ffn: 28672, vocab: 8, max_context: 4096},
     parallel: {tp: 1, pp: 1, dp: 4, micro_batches: 2}}
)";

Json fp8(const std::string& yaml) { return run_text(yaml, {"workloads.0.precision=fp8"})["training"]; }

}  // namespace

TEST_CASE("training fp8: the GEMMs run at the FP8 rate forward and backward, memory and gradient traffic unchanged") {
  const Json b = run_text(kDense)["training"], f = fp8(kDense);
  CHECK(b["precision"] == "bf16");
  CHECK(f["precision"] == "fp8");
  // Big GEMMs (8,192 x 28,672 over 4,096 tokens) are compute-bound: H200's FP8 peak is twice its
  // bf16, so each pass's time falls well below the bf16 one but not under half of it (attention,
  // norms and the quantizing of activations stay).
  for (const char* pass : {"forward", "backward"}) {
    const double rb = b["per_micro_batch_ms"][pass].get<double>(), rf = f["per_micro_batch_ms"][pass].get<double>();
    CHECK(rf < 0.75 * rb);
    CHECK(rf > 0.5 * rb);
  }
  CHECK(f["iteration_s_mean"].get<double>() < b["iteration_s_mean"].get<double>());
  CHECK(f["memory_per_device"] == b["memory_per_device"]);
  CHECK(f["dp_allreduce_ms"] == b["dp_allreduce_ms"]);  // gradients reduced in their own type
  // MFU counts the same model FLOPs against the FP8 peak (about twice the bf16 one on an H200):
  // the faster FP8 iteration reports a lower MFU.
  const HardwareSpec h200 = load_hardware("h200");
  CHECK(f["mfu"].get<double>() == doctest::Approx(b["mfu"].get<double>() * b["iteration_s_mean"].get<double>() /
                                                  f["iteration_s_mean"].get<double>() * h200.peak_bf16_flops / h200.peak_fp8_flops)
                                      .epsilon(1e-9));
  CHECK(f["mfu"].get<double>() < b["mfu"].get<double>());
}

TEST_CASE("training fp8: pipeline hand-offs and ZeRO-3's gathers and reduce-scatters carry the same bytes as in bf16") {
  std::string yaml = kDense;
  yaml.replace(yaml.find("parallel: {tp: 1, pp: 1, dp: 4, micro_batches: 2}"), 49, "parallel: {tp: 1, pp: 2, dp: 2, micro_batches: 2, zero: 3}");
  const Json b = run_text(yaml), f = run_text(yaml, {"workloads.0.precision=fp8"});
  CHECK(f["world"]["flows"]["started"] == b["world"]["flows"]["started"]);
  REQUIRE(b["world"]["fabric"]["hottest_links"].size() > 0);
  for (size_t i = 0; i < b["world"]["fabric"]["hottest_links"].size(); ++i)
    CHECK(f["world"]["fabric"]["hottest_links"][i]["bytes"] == b["world"]["fabric"]["hottest_links"][i]["bytes"]);
  CHECK(f["training"]["iteration_s_mean"].get<double>() < b["training"]["iteration_s_mean"].get<double>());
}

TEST_CASE("training fp8: an MoE dispatch crosses in FP8 with its scales and the combine in bf16") {
  const Json b = run_text(kMoe)["training"]["moe"], f = fp8(kMoe)["moe"];
  // bf16: 2 + 2 bytes an element of a dispatched row and its combine; FP8: 1 + 4/128 and 2.
  CHECK(f["alltoall_bytes_per_device"].get<double>() ==
        doctest::Approx(b["alltoall_bytes_per_device"].get<double>() * (1 + 4.0 / 128 + 2) / 4).epsilon(1e-12));
  CHECK(f["alltoall_ms"].get<double>() < b["alltoall_ms"].get<double>());
}

TEST_CASE("training fp8: a device without FP8 tensor cores is refused at the key, before anything runs") {
  std::string yaml = kDense;
  yaml.replace(yaml.find("hardware: h200"), 14, "hardware: a100-80gb");
  CHECK_NOTHROW(run_text(yaml));
  CHECK_THROWS_WITH_AS(run_text(yaml, {"workloads.0.precision=fp8"}), doctest::Contains("workloads[0].precision = 'fp8': a100-80gb has no fp8 tensor cores"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(yaml, {"workloads.0.precision=fp4"}), doctest::Contains("precision"), ConfigError);
}
