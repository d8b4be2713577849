// Mixture-of-experts models: their parameter counts against the published ones, the routed
// experts' grouped GEMMs on a hand case, expert parallelism's all-to-alls, skewed routing
// waiting for the busiest device, EPLB, the fabric path, and bad input at its key.
#include <doctest/doctest.h>

#include "test_support.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "config/error.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// A device with round ceilings and nothing measured: 1 PFLOP/s, 1 TB/s, 1 us per kernel.
HardwareSpec round_device(double flops = 1e15) {
  HardwareSpec h;
  h.name = "round";
  h.kind = "gpu";
  h.peak_bf16_flops = flops;
  h.flops_derate = 1;
  h.hbm_bandwidth_Bps = 1e12;
  h.bandwidth_derate = 1;
  h.hbm_bytes = h.hbm_physical_bytes = 80e9;
  h.kernel_launch_ns = 1000;
  h.interconnect_links = 1;
  h.interconnect_link_Bps = 100e9;
  h.interconnect_Bps = 100e9;
  h.interconnect_latency_ns = 500;
  return h;
}

// One MoE layer: 4 (or `experts`) experts of inner width 512, top-2, hidden 1024.
ModelSpec tiny_moe(int experts = 4, int layers = 1) {
  ModelSpec m;
  m.name = "tiny-moe";
  m.layers = layers;
  m.hidden = 1024;
  m.heads = m.kv_heads = 8;
  m.head_dim = 128;
  m.ffn = 4096;
  m.vocab = 1000;
  m.experts = experts;
  m.experts_per_token = 2;
  m.expert_ffn = 512;
  return m;
}

double op_ns(const IterationCost& it, const std::string& op) {
  double ns = 0;
  for (const auto& o : it.ops)
    if (o.op == op) ns += o.ns;
  return ns;
}
const OpCost* find_op(const IterationCost& it, const std::string& op) {
  for (const auto& o : it.ops)
    if (o.op == op) return &o;
  return nullptr;
}

std::vector<SeqWork> prefill(int tokens) { return {SeqWork{tokens, 0, true}}; }

}  // namespace

TEST_CASE("moe: the catalog's MoE models count the parameters their sources publish") {
  const ModelSpec mix = load_model("mixtral-8x7b");
  CHECK(mix.moe());
  CHECK(mix.parameters() / 1e9 == doctest::Approx(46.7).epsilon(0.005));         // Mixtral paper: 46.7B
  CHECK(mix.active_parameters() / 1e9 == doctest::Approx(12.9).epsilon(0.01));   // 12.9B active
  const ModelSpec qwen = load_model("qwen3-235b-a22b");
  CHECK(qwen.parameters() / 1e9 == doctest::Approx(235).epsilon(0.005));
  CHECK(qwen.active_parameters() / 1e9 == doctest::Approx(22).epsilon(0.015));
  const ModelSpec scout = load_model("llama4-scout");
  CHECK(scout.parameters() / 1e9 == doctest::Approx(109).epsilon(0.015));        // 109B with the vision encoder
  CHECK(scout.active_parameters() / 1e9 == doctest::Approx(17).epsilon(0.015));
  // A dense model is unchanged.
  const ModelSpec dense = load_model("llama3-8b");
  CHECK(dense.active_parameters() == dense.parameters());
  // dense_layers keep the dense MLP.
  ModelSpec m = tiny_moe(4, 4);
  m.dense_layers = 1;
  CHECK(m.moe_layers_in(0, 4) == 3);
  CHECK(m.moe_layers_in(0, 1) == 0);
  CHECK(m.moe_layers_in(2, 2) == 2);
}

TEST_CASE("moe: the routed experts cost the grouped GEMMs of the tokens each expert gets (hand case)") {
  // 64 tokens, top-2 of 4 experts, uniform: 32 tokens per expert, 128 assignments; every expert
  // is active (1 - 0.5^64). gate_up: 2*128*1024*1024 FLOPs, 2*(4*1024*1024 + 128*2048) bytes
  // = 8,912,896 B -> 8912.896 ns at 1 TB/s (memory-bound); down: 2*(4*512*1024 + 128*1536)
  // = 4,587,520 B -> 4587.52 ns; the SiLU*mul over 128 rows of 3*512*2 B is under the 1 us floor.
  const CostModel cm(round_device(), tiny_moe(), CostOptions{1, 1, ""});
  const IterationCost it = cm.iteration(prefill(64));
  const OpCost* ex = find_op(it, "moe.experts");
  REQUIRE(ex);
  CHECK(ex->ns == doctest::Approx(8912.896 + 4587.52 + 1000).epsilon(1e-9));
  CHECK(ex->flops == doctest::Approx(6.0 * 128 * 1024 * 512).epsilon(1e-12));  // sum over experts of 6 * tokens * h * F
  CHECK(ex->kernels == 3);
  // No dense MLP is costed on an MoE layer, and the router is a GEMM to 4 logits.
  CHECK(find_op(it, "gemm.gate_up") == nullptr);
  CHECK(find_op(it, "moe.router"));
  CHECK(cm.iteration_ns(prefill(64)) == doctest::Approx(it.total_ns).epsilon(1e-12));
  // One decode token reads only the weights of the two experts it goes to, on expectation:
  // each expert is active with probability 1/2, so half the weight bytes of the batch above.
  const OpCost* one = find_op(cm.iteration(std::vector<SeqWork>{SeqWork{1, 100, true}}), "moe.experts");
  REQUIRE(one);
  const double w_one = 2.0 * (2 * 1024 * 1024 + 2 * 2048) + 2.0 * (2 * 512 * 1024 + 2 * 1536);
  CHECK(one->ns == doctest::Approx(w_one / 1e3 + 1000).epsilon(1e-9));
}

TEST_CASE("moe: expert parallelism's dispatch and combine are two all-to-alls of tokens x top-k x hidden x bytes") {
  CostOptions o{4, 1, ""};
  o.moe.expert_parallel = true;
  o.moe.alltoall = true;
  const ModelSpec m = tiny_moe(8, 2);
  const CostModel cm(round_device(), m, o);
  // 256 tokens over 4 devices: 64 each, 2 hidden states of 1024 x 2 B per token out and back,
  // in each of the 2 MoE layers.
  CHECK(cm.moe_alltoall_bytes(256, 0) == doctest::Approx(2 * 2 * 64.0 * 2 * 1024 * 2));
  CHECK(cm.moe_alltoall_count(0) == 4);
  CHECK(cm.tp_allreduce_count(0) == 2);  // one per layer (after attention), not two
  const IterationCost it = cm.iteration(prefill(256));
  const OpCost* a2a = find_op(it, "alltoall.moe");
  REQUIRE(a2a);
  // Analytic: 3/4 of each all-to-all's 262,144 B leave the device at 100 GB/s, plus 0.5 us.
  const double one = 64.0 * 2 * 1024 * 2 * 0.75 / 100e9 * 1e9 + 500;
  CHECK(a2a->ns == doctest::Approx(4 * one).epsilon(1e-9));
  CHECK(op_ns(it, "allreduce") > 0);
  // Without all-to-all dispatch there is none, and two all-reduces a layer.
  CostOptions ar = o;
  ar.moe.alltoall = false;
  const CostModel cma(round_device(), m, ar);
  CHECK(find_op(cma.iteration(prefill(256)), "alltoall.moe") == nullptr);
  CHECK(cma.tp_allreduce_count(0) == 4);
  CHECK(cma.moe_alltoall_bytes(256, 0) == 0);
}

TEST_CASE("moe: skewed routing makes the step wait for the busiest device, and EPLB spreads it") {
  // Compute-bound (0.1 PFLOP/s): an expert's time follows its tokens.
  CostOptions o{4, 1, ""};
  o.moe.expert_parallel = true;
  const ModelSpec m = tiny_moe(8);
  const CostModel uni(round_device(1e14), m, o);
  CostOptions z = o;
  z.moe.routing = MoeOptions::Routing::Zipf;
  z.moe.zipf_s = 1.2;
  const CostModel zipf(round_device(1e14), m, z);
  const double M = 65536;
  const auto lu = uni.expert_tokens_per_device(M), lz = zipf.expert_tokens_per_device(M);
  REQUIRE(lu.size() == 4);
  REQUIRE(lz.size() == 4);
  // Every assignment lands on some device.
  CHECK(std::accumulate(lu.begin(), lu.end(), 0.0) == doctest::Approx(M * 2));
  CHECK(std::accumulate(lz.begin(), lz.end(), 0.0) == doctest::Approx(M * 2));
  const double mean = M * 2 / 4, busiest = *std::max_element(lz.begin(), lz.end());
  CHECK(busiest > 1.5 * mean);  // experts 0 and 1, the hottest, share device 0
  CHECK(busiest == doctest::Approx(lz[0]));
  const double tu = op_ns(uni.iteration(prefill(static_cast<int>(M))), "moe.experts");
  const double tz = op_ns(zipf.iteration(prefill(static_cast<int>(M))), "moe.experts");
  CHECK(tz / tu == doctest::Approx(busiest / mean).epsilon(0.03));
  // EPLB: 4 copies of the hottest experts, 3 slots per device, hottest first on the least
  // loaded: the busiest device comes within a fifth of the mean.
  CostOptions e = z;
  e.moe.eplb = true;
  e.moe.redundant_experts = 4;
  const CostModel lb(round_device(1e14), m, e);
  const auto le = lb.expert_tokens_per_device(M);
  CHECK(std::accumulate(le.begin(), le.end(), 0.0) == doctest::Approx(M * 2));
  CHECK(*std::max_element(le.begin(), le.end()) < 1.2 * mean);
  CHECK(op_ns(lb.iteration(prefill(static_cast<int>(M))), "moe.experts") < 0.75 * tz);
  // Expert parallelism that does not divide the experts is refused.
  CostOptions bad{3, 1, ""};
  bad.moe.expert_parallel = true;
  ModelSpec six = tiny_moe(8);
  six.heads = six.kv_heads = 6;
  CHECK_THROWS_WITH_AS(CostModel(round_device(), six, bad), doctest::Contains("does not divide the 8 experts"), std::invalid_argument);
}

namespace {
const char* kMixtral = R"(name: t
seed: 1
hardware: h200
model: mixtral-8x7b
topology: dgx-h200
deployment: {replicas: 1, tensor_parallel: 8, moe: {expert_parallel: true, dispatch: alltoall}}
scheduler: {kind: vllm_chunked}
workload: {kind: llmperf, requests: 40, input_tokens: {mean: 400, sd: 0}, output_tokens: {mean: 20, sd: 0},
           arrival: {kind: closed_loop, clients: 8}}
outputs: {trace: false}
)";
}  // namespace

TEST_CASE("moe: a deployment's all-to-alls run on the fabric every iteration, and a busier expert device slows decode") {
  const Json a2a = run_text(kMixtral)["serving"];
  REQUIRE(a2a.contains("moe"));
  const Json& mo = a2a["moe"];
  CHECK(mo["experts"] == 8);
  CHECK(mo["dispatch"] == "alltoall");
  int64_t iterations = 0;
  for (const auto& r : a2a["replicas"]) iterations += r["iterations"].get<int64_t>();
  if (iterations == 0) iterations = a2a["batching"]["iterations"].get<int64_t>();
  CHECK(mo["alltoalls"].get<int64_t>() == 2 * 32 * iterations);  // dispatch + combine, every layer, every iteration
  CHECK(mo["alltoall_ms_mean_per_iteration"].get<double>() > 0);
  CHECK(a2a["communication"]["tp_allreduces"].get<int64_t>() == iterations);
  CHECK(mo["active_parameters"].get<double>() / 1e9 == doctest::Approx(12.9).epsilon(0.01));
  // All-reduce dispatch: no all-to-all.
  const Json ar = run_text(kMixtral, {"deployment.moe.dispatch=allreduce"})["serving"];
  CHECK_FALSE(ar["moe"].contains("alltoalls"));
  // Skewed routing: device 0 holds the hottest expert and computes the most.
  const Json skew = run_text(kMixtral, {"deployment.moe.routing=zipf", "deployment.moe.zipf_s=1.5"})["serving"];
  CHECK(skew["moe"]["device_load_max_over_mean"].get<double>() > 2);
  CHECK(skew["latency_ms"]["tpot"]["mean"].get<double>() > a2a["latency_ms"]["tpot"]["mean"].get<double>());
}

TEST_CASE("moe: bad input is refused at its key before anything runs") {
  // Expert parallelism over 3 devices cannot split 8 experts (and 32 heads), the dense model has
  // no experts, all-to-all needs expert parallelism, EPLB's copies must divide too.
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.tensor_parallel=6"}), doctest::Contains("deployment.moe.expert_parallel"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"model=llama3-8b"}), doctest::Contains("dense model"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.moe.expert_parallel=false"}), doctest::Contains("deployment.moe.dispatch"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.moe.eplb=true", "deployment.moe.redundant_experts=3"}),
                       doctest::Contains("do not divide over 8 devices"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.moe.zipf_s=2"}), doctest::Contains("routing: zipf"), ConfigError);
  // An inline MoE model whose top-k exceeds its experts.
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"model={catalog: mixtral-8x7b, experts_per_token: 9}"}),
                       doctest::Contains("experts_per_token"), ConfigError);
  // Too few devices to hold the experts: Qwen3-235B's 470 GB of weights on two H200s.
  CHECK_THROWS_WITH(run_text(kMixtral, {"model=qwen3-235b-a22b", "deployment.tensor_parallel=2"}), doctest::Contains("does not fit"));
  // Training does not model experts yet: refused at the model, not costed as a dense model.
  const std::string training = R"(name: t
cluster: {topology: dgx-h200, hardware: h200}
workloads:
  - {name: j, kind: training, model: mixtral-8x7b, parallel: {tp: 8, pp: 1, dp: 1}, sequence: 2048, iterations: 1}
)";
  CHECK_THROWS_WITH_AS(run_text(training), doctest::Contains("training does not yet model experts"), ConfigError);
}
