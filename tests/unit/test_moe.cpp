// Mixture-of-experts models: their parameter counts against the published ones, the routed
// experts' grouped GEMMs on a hand case, expert parallelism's all-to-alls, skewed routing
// waiting for the busiest device, EPLB, the fabric path, and bad input at its key.
#include <doctest/doctest.h>

#include "test_support.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>

#include "config/error.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"
#include "engine/engine.h"
#include "network/collective.h"
#include "network/flow.h"
#include "network/generators.h"
#include "network/routing.h"

using namespace sluice;
using sluice::testing::round_device;
using sluice::testing::run_text;
using sluice::testing::tiny_moe;

namespace {


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

// One server of 4 GPUs on an NVSwitch (no host CPUs): all-to-all weights by hand.
net::Topology four_gpu_server() {
  net::ServerSpec s;
  s.gpus = 4;
  s.host_cpus = 0;
  net::Topology t("four");
  net::add_server(t, 0, s);
  return t;
}

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
  const IterationCost step = cm.iteration(std::vector<SeqWork>{SeqWork{1, 100, true}});
  const OpCost* one = find_op(step, "moe.experts");
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
  // 256 tokens over 4 devices: 64 each, a hidden state of 1024 x 2 B sent to each device its 2
  // experts are on, out and back, in each of the 2 MoE layers. Each device holds 1/4 of the
  // assignments: a token's two picks miss it with (3/4)^2, so it reaches 4 (1 - 9/16) = 1.75
  // devices on expectation (not 2: both experts may be on one device).
  CHECK(cm.moe_alltoall_bytes(256, 0) == doctest::Approx(2 * 2 * 64.0 * 1.75 * 1024 * 2));
  CHECK(cm.moe_alltoall_count(0) == 4);
  CHECK(cm.tp_allreduce_count(0) == 2);  // one per layer (after attention), not two
  const IterationCost it = cm.iteration(prefill(256));
  const OpCost* a2a = find_op(it, "alltoall.moe");
  REQUIRE(a2a);
  // Analytic: 3/4 of each all-to-all's 229,376 B leave the device at 100 GB/s, plus 0.5 us.
  const double one = 64.0 * 1.75 * 1024 * 2 * 0.75 / 100e9 * 1e9 + 500;
  CHECK(a2a->ns == doctest::Approx(4 * one).epsilon(1e-9));
  CHECK(op_ns(it, "allreduce") > 0);
  // Without all-to-all dispatch there is none, and two all-reduces a layer.
  CostOptions ar = o;
  ar.moe.alltoall = false;
  const CostModel cma(round_device(), m, ar);
  CHECK(find_op(cma.iteration(prefill(256)), "alltoall.moe") == nullptr);
  CHECK(cma.tp_allreduce_count(0) == 4);
  CHECK(cma.moe_alltoall_bytes(256, 0) == 0);
  // Megatron-Core's alltoall token dispatcher sends a row per token and expert: 2, not 1.75.
  CostOptions rows = o;
  rows.moe.rows_per_expert = true;
  CHECK(CostModel(round_device(), m, rows).moe_alltoall_bytes(256, 0) == doctest::Approx(2 * 2 * 64.0 * 2 * 1024 * 2));
  CHECK(cm.moe_dispatch_fraction() == 0.5);
}

TEST_CASE("moe: in FP8 a dispatch sends its rows in FP8 with their scales, and the combine comes back in BF16") {
  CostOptions o{4, 1, ""};
  o.moe.expert_parallel = true;
  o.moe.alltoall = true;
  HardwareSpec hw = round_device();
  hw.peak_fp8_flops = 2e15;
  ModelSpec m = tiny_moe(8, 2);
  m.weights = Precision::FP8;
  const CostModel cm(hw, m, o);
  // 64 tokens a device reach 1.75 devices each (as in BF16): a dispatch row is 1024 FP8 bytes and
  // 1024 / 128 fp32 scales (DeepEP's FP8 rows), the combine's 1024 x 2 B; two MoE layers.
  const double rows = 64.0 * 1.75;
  CHECK(cm.moe_alltoall_bytes(256, 0) == doctest::Approx(2 * rows * (1024 + 1024 / 128 * 4 + 1024 * 2)).epsilon(1e-12));
  CHECK(cm.moe_alltoall_count(0) == 4);
  CHECK(cm.moe_dispatch_fraction() == doctest::Approx(1.03125 / 3.03125).epsilon(1e-12));
  // Analytic: 3/4 of each layer's dispatch and combine leave the device at 100 GB/s, plus 0.5 us each.
  const IterationCost it = cm.iteration(prefill(256));  // (kept: find_op points into it)
  const OpCost* a2a = find_op(it, "alltoall.moe");
  REQUIRE(a2a);
  CHECK(a2a->ns == doctest::Approx(2 * (rows * 1024 * 3.03125 * 0.75 / 100e9 * 1e9 + 2 * 500)).epsilon(1e-9));
  // Under Zipf the busiest device sends f (n - w) + (1 - f)(n - 1) w over n - 1 of the even share:
  // its dispatch part follows the others' weights, its combine part its own.
  CostOptions zo = o;
  zo.moe.routing = MoeOptions::Routing::Zipf;
  const CostModel zipf(hw, m, zo);
  const double fz = zipf.moe_dispatch_fraction();
  double busiest = 1;
  for (double w : zipf.moe_alltoall_weights()) busiest = std::max(busiest, (fz * (4 - w) + (1 - fz) * 3 * w) / 3);
  CHECK(busiest > 1.1);
  const double zrows = zipf.moe_alltoall_bytes(256, 0) / 2 / (1024 * 3.03125);
  const IterationCost zit = zipf.iteration(prefill(256));
  const OpCost* za = find_op(zit, "alltoall.moe");
  REQUIRE(za);
  CHECK(za->ns == doctest::Approx(2 * (zrows * 1024 * 3.03125 * busiest * 0.75 / 100e9 * 1e9 + 2 * 500)).epsilon(1e-9));
  // On the fabric each pair's dispatch part is that share of its bytes: with hot experts on
  // device 0 (w_0 = 1.6), what it receives is f w_0 + (1 - f) w_j of a pair's even share from
  // each peer j (their tokens dispatched to it, its tokens' outputs combined back).
  const net::Topology t = four_gpu_server();
  const auto devs = t.devices();
  const std::vector<double> w = {1.6, 1.0, 0.8, 0.6};
  auto into_hot = [&](double f) {
    Engine e(1);
    net::Router r(t);
    net::FlowSim sim(e, t, r);
    net::CollectiveOptions co;
    co.a2a_weights = w;
    co.a2a_dispatch_fraction = f;
    net::Collective c(sim, net::CollectiveKind::AllToAll, devs, 4e9, co);
    c.start();
    e.run();
    const auto carried = sim.carried_link_bytes();
    for (int l = 0; l < t.link_count(); ++l)
      if (t.link(l).dst == devs[0]) return carried[static_cast<size_t>(l)];
    return -1.0;
  };
  const double f = cm.moe_dispatch_fraction();
  double expect = 0;
  for (int j = 1; j < 4; ++j) expect += 1e9 * (f * w[0] + (1 - f) * w[static_cast<size_t>(j)]);
  CHECK(into_hot(f) == doctest::Approx(expect).epsilon(1e-9));
  CHECK(into_hot(f) < into_hot(0.5));  // less of the hot device's weight rides on the lighter dispatch
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
  CHECK(mo["alltoall_ms_mean"].get<double>() > 0);
  CHECK(a2a["communication"]["tp_allreduces"].get<int64_t>() == iterations);
  CHECK(mo["active_parameters"].get<double>() / 1e9 == doctest::Approx(12.9).epsilon(0.01));
  // All-reduce dispatch: no all-to-all.
  const Json ar = run_text(kMixtral, {"deployment.moe.dispatch=allreduce"})["serving"];
  CHECK_FALSE(ar["moe"].contains("alltoalls"));
  // A row per token and expert (Megatron's alltoall dispatcher): 2 rows a token against 1.875
  // devices at top-2 of 8 over 8: the all-to-alls carry more and take longer.
  const Json rows = run_text(kMixtral, {"deployment.moe.token_dispatcher=alltoall"})["serving"];
  CHECK(rows["moe"]["dispatch"] == "alltoall (a row per token and expert)");
  CHECK(rows["moe"]["alltoall_ms_mean"].get<double>() > mo["alltoall_ms_mean"].get<double>());
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.moe.dispatch=allreduce", "deployment.moe.token_dispatcher=alltoall"}),
                       doctest::Contains("deployment.moe.token_dispatcher"), ConfigError);
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
  // Training DeepSeek-V3 (latent attention trains now) on one server: 671B parameters do not fit
  // on eight devices, refused at the parallelism before anything runs.
  const std::string training = R"(name: t
cluster: {topology: dgx-h200, hardware: h200}
workloads:
  - {name: j, kind: training, model: deepseek-v3, parallel: {tp: 8, pp: 1, dp: 1}, sequence: 2048, iterations: 1}
)";
  CHECK_THROWS_WITH_AS(run_text(training), doctest::Contains("deepseek-v3 does not fit"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(training), doctest::Contains("workloads[0].parallel"), ConfigError);
}

TEST_CASE("moe: no expert gets more than every token: a share over 1/k is capped and spread over the rest") {
  // Zipf s=2 over 8 experts with top-4: expert 0's share would be 0.65, and 4 x 0.65 of the
  // tokens is more than there are.
  CostOptions z{4, 1, ""};
  z.moe.expert_parallel = true;
  z.moe.routing = MoeOptions::Routing::Zipf;
  z.moe.zipf_s = 2;
  ModelSpec m = tiny_moe(8);
  m.experts_per_token = 4;
  const CostModel cm(round_device(), m, z);
  const double M = 1000;
  const auto loads = cm.expert_tokens_per_device(M);
  // Device 0 holds experts 0 and 1, each capped at all M tokens; every assignment still lands.
  CHECK(loads[0] == doctest::Approx(2 * M));
  CHECK(std::accumulate(loads.begin(), loads.end(), 0.0) == doctest::Approx(4 * M));
  // EPLB's copies split a capped expert's M tokens, never more.
  CostOptions e = z;
  e.moe.eplb = true;
  e.moe.redundant_experts = 4;
  const auto lb = CostModel(round_device(), m, e).expert_tokens_per_device(M);
  CHECK(std::accumulate(lb.begin(), lb.end(), 0.0) == doctest::Approx(4 * M));
}

TEST_CASE("moe: dense first layers are costed as dense, on the stage that holds them") {
  // 4 layers, the first 2 dense; two pipeline stages: stage 0 all dense, stage 1 all MoE.
  ModelSpec m = tiny_moe(4, 4);
  m.dense_layers = 2;
  const CostModel cm(round_device(), m, CostOptions{1, 2, ""});
  const std::vector<SeqWork> b = prefill(64);
  const IterationCost s0 = cm.stage_iteration(b, 0), s1 = cm.stage_iteration(b, 1);
  CHECK(find_op(s0, "gemm.gate_up"));
  CHECK(find_op(s0, "moe.experts") == nullptr);
  CHECK(find_op(s1, "moe.experts"));
  CHECK(find_op(s1, "gemm.gate_up") == nullptr);
  // The costed (last) stage of iteration() is stage 1's layers, and iteration_ns agrees with it.
  CHECK(find_op(cm.iteration(b), "moe.experts"));
  CHECK(cm.iteration_ns(b) == doctest::Approx(cm.iteration(b).total_ns).epsilon(1e-12));
}

TEST_CASE("precision: FP8 halves the weights' bytes and runs GEMMs at the FP8 peak, and an FP8 cache halves KV") {
  HardwareSpec hw = round_device();
  hw.peak_fp8_flops = 2e15;
  ModelSpec m = load_model("llama3-8b");
  const double P = m.parameters(), outer = 2.0 * m.vocab * m.hidden;
  m.weights = Precision::FP8;
  CHECK(m.weight_bytes() == doctest::Approx((P - outer) * 1 + outer * 2));  // embedding and LM head stay bf16
  m.weights = Precision::W4A16;
  CHECK(m.weight_bytes() == doctest::Approx((P - outer) * (0.5 + 2.0 / 128) + outer * 2));
  // One decode row: the qkv GEMM (K 4096, N 6144) reads its weights: 4096 x 6144 B in FP8
  // against twice that in bf16, at 1 TB/s.
  ModelSpec bf = load_model("llama3-8b"), f8 = bf;
  f8.weights = Precision::FP8;
  const std::vector<SeqWork> one{SeqWork{1, 100, true}};
  const IterationCost it16 = CostModel(hw, bf, CostOptions{1, 1, ""}).iteration(one);
  const IterationCost it8 = CostModel(hw, f8, CostOptions{1, 1, ""}).iteration(one);
  const OpCost* q16 = find_op(it16, "gemm.qkv");
  const OpCost* q8 = find_op(it8, "gemm.qkv");
  REQUIRE(q16);
  REQUIRE(q8);
  const double K = 4096, N = 6144, L = 32;
  CHECK(q16->ns == doctest::Approx(L * 2 * (K + K * N + N) / 1e3));
  CHECK(q8->ns == doctest::Approx(L * (K + K * N + 2 * N) / 1e3));
  // A compute-bound prefill: the FP8 GEMM takes half the bf16 one (twice the peak).
  const std::vector<SeqWork> big = prefill(16384);
  const IterationCost i16 = CostModel(hw, bf, CostOptions{1, 1, ""}).iteration(big);
  const IterationCost i8 = CostModel(hw, f8, CostOptions{1, 1, ""}).iteration(big);
  CHECK(op_ns(i8, "gemm.gate_up") == doctest::Approx(op_ns(i16, "gemm.gate_up") / 2).epsilon(1e-9));
  CHECK(op_ns(i8, "quantize") > 0);
  CHECK(find_op(i16, "quantize") == nullptr);
  // Weight-only INT4 computes in bf16: the same compute-bound time.
  ModelSpec w4 = bf;
  w4.weights = Precision::W4A16;
  CHECK(op_ns(CostModel(hw, w4, CostOptions{1, 1, ""}).iteration(big), "gemm.gate_up") ==
        doctest::Approx(op_ns(i16, "gemm.gate_up")).epsilon(1e-9));
  // FP8 KV: half the bytes per token, and a decode step's attention reads half the keys' bytes.
  ModelSpec kv = bf;
  kv.kv_fp8 = true;
  CHECK(kv.kv_bytes_per_token() == doctest::Approx(bf.kv_bytes_per_token() / 2));
  const std::vector<SeqWork> longs(64, SeqWork{1, 8000, true});
  const double a16 = op_ns(CostModel(hw, bf, CostOptions{1, 1, ""}).iteration(longs), "attention.decode");
  const double a8 = op_ns(CostModel(hw, kv, CostOptions{1, 1, ""}).iteration(longs), "attention.decode");
  CHECK(a8 / a16 == doctest::Approx(0.5).epsilon(0.01));
  // A device without FP8 refuses it.
  CHECK_THROWS_WITH_AS(CostModel(load_hardware("a100-80gb"), f8, CostOptions{1, 1, ""}), doctest::Contains("no fp8"), std::invalid_argument);
}

TEST_CASE("precision: a deployment in FP8 fits more KV and decodes faster, and a device without it is refused at the key") {
  const std::string text = R"(name: t
seed: 1
hardware: h100-sxm
model: mixtral-8x7b
deployment: {replicas: 1, tensor_parallel: 2}
scheduler: {kind: vllm_chunked}
workload: {kind: llmperf, requests: 30, input_tokens: {mean: 500, sd: 0}, output_tokens: {mean: 30, sd: 0},
           arrival: {kind: closed_loop, clients: 8}}
outputs: {trace: false}
)";
  const Json bf = run_text(text)["serving"];
  const Json f8 = run_text(text, {"deployment.precision=fp8", "deployment.kv_cache_dtype=fp8"})["serving"];
  CHECK(f8["memory_per_gpu"]["weights_bytes"].get<double>() < 0.55 * bf["memory_per_gpu"]["weights_bytes"].get<double>());
  CHECK(f8["kv_cache"]["tokens_per_replica"].get<double>() > 2 * bf["kv_cache"]["tokens_per_replica"].get<double>());
  CHECK(f8["latency_ms"]["tpot"]["mean"].get<double>() < 0.75 * bf["latency_ms"]["tpot"]["mean"].get<double>());
  CHECK_THROWS_WITH_AS(run_text(text, {"hardware=a100-80gb", "deployment.precision=fp8"}), doctest::Contains("deployment.precision"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(run_text(text, {"hardware=h100-sxm", "deployment.precision=fp4"}), doctest::Contains("bf16, fp8, w4a16"),
                       ConfigError);
}

TEST_CASE("moe: a replica that fails while its all-to-alls are on the fabric recovers, and every request is accounted for") {
  // Chip failures every few seconds on the all-to-all deployment: the iteration in flight is
  // voided with its collectives (their flows still land), the replica reloads and serves again.
  const std::string faults = std::string(kMixtral) +
                             "faults:\n  - {name: chips, kind: random, component: chip, ttf: {dist: exponential, mean: 3s}, "
                             "repair: {dist: fixed, mean: 0.2s}}\nrecovery: {reload: 0.2s, failover_timeout: 0s}\n";
  // Long prompts make the all-to-alls a tenth of an iteration: about 35 failures, some of them
  // during one (before the collective was kept until its flows landed, valgrind counted 22
  // reads of freed memory in this run; the sanitizer build of .ci/run fails on the first).
  const Json m = run_text(faults, {"workload.requests=200", "workload.input_tokens.mean=3000"})["serving"];
  REQUIRE(m.contains("faults"));
  CHECK(m["faults"]["replica_failures"].get<int64_t>() > 10);
  CHECK(m["requests"]["completed"].get<int64_t>() + m["requests"]["failed"].get<int64_t>() == 200);
  CHECK(m["moe"]["alltoalls"].get<int64_t>() > 0);
}

TEST_CASE("mla: DeepSeek-V3's latent attention caches one latent per token and layer, read once by every head") {
  const ModelSpec ds = load_model("deepseek-v3");
  CHECK(ds.mla());
  CHECK(ds.parameters() / 1e9 == doctest::Approx(671).epsilon(0.005));        // the technical report: 671B
  CHECK(ds.active_parameters() / 1e9 == doctest::Approx(37).epsilon(0.02));   // 37B active
  // 61 layers x (512 latent + 64 rotary key) x 2 B, whatever the tensor parallelism (the latent
  // is not split by heads): against 2 x 61 x 128 heads x 128 x 2 B for plain attention.
  CHECK(ds.kv_bytes_per_token() == doctest::Approx(61.0 * 576 * 2));
  CHECK(ds.kv_bytes_per_token_per_gpu(8, 1) == doctest::Approx(61.0 * 576 * 2));
  ModelSpec f8 = ds;
  f8.kv_fp8 = true;
  CHECK(f8.kv_bytes_per_token() == doctest::Approx(61.0 * 576));
  // A decode step's attention on the roofline: each sequence's latent read once (1 TB/s) and
  // 2 H (2 x 576 - 64) FLOPs a key.
  HardwareSpec hw = round_device();
  hw.peak_fp8_flops = 2e15;
  const CostModel cm(hw, ds, CostOptions{8, 1, ""});
  const std::vector<SeqWork> one{SeqWork{1, 9999, true}};
  const IterationCost it = cm.iteration(one);
  const OpCost* att = find_op(it, "attention.decode");
  REQUIRE(att);
  const double keys = 10000, H = 128 / 8;
  const double bytes = 2 * 576 * keys + 2 * 2 * H * 576, flops = 2 * H * (2 * 576 - 64) * keys;
  CHECK(att->bytes == doctest::Approx(61 * bytes));
  CHECK(att->flops == doctest::Approx(61 * flops));
  CHECK(att->ns == doctest::Approx(61 * std::max(bytes / 1e3, 1000.0)));
  // Its projections: the query's bottleneck and the latent's down and up projections, no qkv.
  for (const char* op : {"gemm.q_a", "gemm.q_b", "gemm.kv_a", "gemm.kv_b", "gemm.o"}) CHECK_MESSAGE(find_op(it, op), std::string(op));
  CHECK(find_op(it, "gemm.qkv") == nullptr);
  // The first 3 layers are dense (their MLP), the other 58 MoE.
  CHECK(ds.moe_layers_in(0, 61) == 58);
  CHECK(op_ns(it, "gemm.gate_up") > 0);
  CHECK(op_ns(it, "moe.experts") > 0);
  // A shape without its rotary width is refused at the key.
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"model={catalog: deepseek-v3, qk_rope_head_dim: 0}", "deployment.precision=fp8"}),
                       doctest::Contains("qk_rope_head_dim"), ConfigError);
}

TEST_CASE("precision: FP8 kernels moved to another device by derived tables are never faster than that device's FP8 roofline") {
  // The H100 derives its kernels from the H200's tables; an FP8 GEMM is moved between the two
  // devices' FP8 ceilings (not their bf16 ones, which left some sizes at the H200's bandwidth).
  const HardwareSpec h100 = load_hardware("h100-sxm"), h200 = load_hardware("h200");
  ModelSpec m = load_model("llama3-8b");
  m.weights = Precision::FP8;
  CostOptions o{1, 1, default_tables_dir(h200)};
  o.tables_device = std::make_shared<HardwareSpec>(h200);
  const CostModel cm(h100, m, o);
  const double F = h100.effective_flops(Precision::FP8), B = h100.effective_bandwidth_Bps();
  for (int M : {32, 96, 128, 192, 256, 384, 1024, 4096}) {
    const IterationCost it = cm.iteration(prefill(M));
    for (const char* op : {"gemm.qkv", "gemm.o", "gemm.gate_up", "gemm.down"}) {
      const OpCost* g = find_op(it, op);
      REQUIRE(g);
      CHECK_MESSAGE(g->ns >= 0.999 * 1e9 * std::max(g->flops / F, g->bytes / B), std::string(op), " M ", M);
    }
  }
  // An FP8 cache keeps a decode kernel's floor: one short sequence costs about the same.
  ModelSpec kv = load_model("llama3-8b");
  const CostModel base(h200, kv, CostOptions{1, 1, default_tables_dir(h200)});
  kv.kv_fp8 = true;
  const CostModel f8(h200, kv, CostOptions{1, 1, default_tables_dir(h200)});
  const std::vector<SeqWork> short_one{SeqWork{1, 16, true}};
  CHECK(op_ns(f8.iteration(short_one), "attention.decode") > 0.95 * op_ns(base.iteration(short_one), "attention.decode"));
}

TEST_CASE("mla: the query bottleneck and latent down projections are whole on every tensor-parallel GPU") {
  const ModelSpec ds = load_model("deepseek-v3");
  const CostModel tp1(round_device(), ds, CostOptions{1, 1, ""}), tp8(round_device(), ds, CostOptions{8, 1, ""});
  const IterationCost a = tp1.iteration(prefill(4096)), b = tp8.iteration(prefill(4096));
  for (const char* op : {"gemm.q_a", "gemm.kv_a"}) CHECK_MESSAGE(find_op(b, op)->flops == doctest::Approx(find_op(a, op)->flops), std::string(op));
  for (const char* op : {"gemm.q_b", "gemm.kv_b", "gemm.o"}) CHECK_MESSAGE(find_op(b, op)->flops == doctest::Approx(find_op(a, op)->flops / 8), std::string(op));
  // Training's sequence parallelism runs them on a rank's 1/tp of the rows, like the rest.
  CostOptions sp{8, 1, ""};
  sp.sequence_parallel = true;
  const IterationCost c = CostModel(round_device(), ds, sp).iteration(prefill(4096));
  for (const char* op : {"gemm.q_a", "gemm.kv_a", "gemm.q_b", "gemm.kv_b", "gemm.o"})
    CHECK_MESSAGE(find_op(c, op)->flops == doctest::Approx(find_op(a, op)->flops / 8), std::string(op));
  // The memory plan holds them whole too: (1536 x 7168 + 1536 + 7168 x 576 + 512) x 61 parameters.
  CHECK(ds.replicated_parameters() == doctest::Approx((1536.0 * 7168 + 1536 + 7168.0 * 576 + 512) * 61));
}

TEST_CASE("mla: the rotary turns only the rope part of each query head and the one shared key, and the two latent norms are costed") {
  // DeepSeek-V3 at TP 8 (16 query heads a GPU), 4096 tokens, bf16 activations, 61 layers.
  const ModelSpec ds = load_model("deepseek-v3");
  CostOptions fused{8, 1, ""};
  fused.implementation = Implementation::Fused;
  const IterationCost f = CostModel(round_device(), ds, fused).iteration(prefill(4096));
  const double T = 4096, L = 61, b = 2;
  // One rotary kernel over q_pe (16 heads x 64) and k_pe (64), read and written.
  CHECK(find_op(f, "elementwise.rope")->bytes == doctest::Approx(L * T * 2 * (16 * 64 + 64) * b));
  // The two fused add+RMSNorms (x and residual read, both written) and the query bottleneck's
  // (1536) and the latent's (512) norms (read, written): four kernels a layer.
  CHECK(find_op(f, "elementwise.rmsnorm")->bytes == doctest::Approx(L * (2 * T * 4 * 7168 * b + T * 2 * (1536 + 512) * b)));
  CHECK(find_op(f, "elementwise.rmsnorm")->kernels == doctest::Approx(4 * L));
  // PyTorch's profile: the rotary on q and on k (7 kernels each) at the same widths.
  const IterationCost lean = CostModel(round_device(), ds, CostOptions{8, 1, ""}).iteration(prefill(4096));
  CHECK(find_op(lean, "elementwise.rope")->bytes == doctest::Approx(L * T * 2 * (16 * 64 + 64) * b));
  CHECK(find_op(lean, "elementwise.rope")->kernels == doctest::Approx(14 * L));
}

TEST_CASE("mla: a prompt's keys (and under PyTorch its queries) and a decode's absorbed queries are assembled by a copy each") {
  // DeepSeek-V3 at TP 8: 16 heads a GPU, non-rope 128 and rope 64 wide, a latent of 512 + 64.
  const ModelSpec ds = load_model("deepseek-v3");
  CostOptions fused{8, 1, ""};
  fused.implementation = Implementation::Fused;
  const CostOptions lean{8, 1, ""};
  const double L = 61, b = 2, H = 16;
  const double key = H * (2 * 128 + 64) + 64, query = 2 * H * (128 + 64), absorbed = 2 * H * 576;  // elements a token
  auto concat = [](const IterationCost& it) {  // the op, and that it is charged once
    int n = 0;
    const OpCost* found = nullptr;
    for (const auto& o : it.ops)
      if (o.op == "elementwise.mla_concat") ++n, found = &o;
    CHECK(n <= 1);
    return found;
  };
  // A prompt of 4096 tokens: each head's key written whole from its non-rope part and the one
  // shared rotary key; under PyTorch the query's two parts as well (vLLM turns its rotary part in place).
  const IterationCost pf = CostModel(round_device(), ds, fused).iteration(prefill(4096));
  REQUIRE(concat(pf));
  CHECK(concat(pf)->bytes == doctest::Approx(L * 4096 * key * b));
  CHECK(concat(pf)->kernels == doctest::Approx(L));
  const IterationCost pl = CostModel(round_device(), ds, lean).iteration(prefill(4096));
  REQUIRE(concat(pl));
  CHECK(concat(pl)->bytes == doctest::Approx(L * 4096 * (key + query) * b));
  CHECK(concat(pl)->kernels == doctest::Approx(2 * L));
  // A decode of 32 sequences: each query head's latent part beside its rotary part, in every
  // profile (vLLM's FlashMLA path concatenates them); a verification of one draft doubles the queries.
  const std::vector<SeqWork> dec(32, SeqWork{1, 2048, true});
  for (const CostOptions& o : {lean, fused}) {
    const IterationCost d = CostModel(round_device(), ds, o).iteration(dec);
    REQUIRE(concat(d));
    CHECK(concat(d)->bytes == doctest::Approx(L * 32 * absorbed * b));
  }
  std::vector<SeqWork> verify = dec;
  for (SeqWork& s : verify) s.drafts = 1;
  CHECK(concat(CostModel(round_device(), ds, fused).iteration(verify))->bytes == doctest::Approx(L * 64 * absorbed * b));
  // A batch of both, under PyTorch: the three copies in one op, three kernels a layer; the hot
  // path's sum (iteration_ns) is the listing's total.
  std::vector<SeqWork> mixed = dec;
  mixed.push_back(SeqWork{512, 0, true});
  const CostModel cm(round_device(), ds, lean);
  const IterationCost m = cm.iteration(mixed);
  REQUIRE(concat(m));
  CHECK(concat(m)->bytes == doctest::Approx(L * (512 * (key + query) + 32 * absorbed) * b));
  CHECK(concat(m)->kernels == doctest::Approx(3 * L));
  CHECK(cm.iteration_ns(mixed) == doctest::Approx(m.total_ns).epsilon(1e-12));
  CHECK(cm.decode_ns(dec) == doctest::Approx(cm.iteration(dec).total_ns).epsilon(1e-12));
  // A dense model has no latent attention: nothing to assemble.
  CHECK(concat(CostModel(round_device(), load_model("llama2-7b"), CostOptions{1, 1, ""}).iteration(prefill(512))) == nullptr);
}

TEST_CASE("mla: a chunk's cached context is gathered, up-projected and assembled again, and its attention merged") {
  // DeepSeek-V3 at TP 8 (16 heads a GPU, non-rope 128, rope 64, value 128, latent 512 + 64): a
  // chunk of 1024 tokens after 3072 cached ones, and one of 512 after 1024, in one batch.
  const ModelSpec ds = load_model("deepseek-v3");
  CostOptions fused{8, 1, ""};
  fused.implementation = Implementation::Fused;
  const CostModel cm(round_device(), ds, fused);
  const double L = 61, b = 2, H = 16, C = 3072 + 1024, T = 1024 + 512;
  const std::vector<SeqWork> chunks{SeqWork{1024, 3072, true}, SeqWork{512, 1024, true}};
  const IterationCost it = cm.iteration(chunks);
  // One GEMM over both contexts through kv_b (512 -> 16 x (128 + 128)), every layer.
  const OpCost* up = find_op(it, "gemm.kv_b_context");
  REQUIRE(up);
  CHECK(up->flops == doctest::Approx(L * 2 * C * 512 * H * 256));
  CHECK(up->kernels == doctest::Approx(L));
  // The latent gathered (read and written), the context's keys assembled (as a prompt's), the
  // two attention outputs merged: three copies a layer.
  const OpCost* copies = find_op(it, "elementwise.mla_context");
  REQUIRE(copies);
  CHECK(copies->bytes == doctest::Approx(L * (C * 576 * 2 * b + C * (H * (2 * 128 + 64) + 64) * b + T * 3 * H * 128 * b)));
  CHECK(copies->kernels == doctest::Approx(3 * L));
  CHECK(cm.iteration_ns(chunks) == doctest::Approx(it.total_ns).epsilon(1e-12));
  // The same chunks with nothing cached before them cost neither; a longer context costs more.
  const IterationCost fresh = cm.iteration(std::vector<SeqWork>{SeqWork{1024, 0, true}, SeqWork{512, 0, true}});
  CHECK(find_op(fresh, "gemm.kv_b_context") == nullptr);
  CHECK(find_op(fresh, "elementwise.mla_context") == nullptr);
  const IterationCost longer = cm.iteration(std::vector<SeqWork>{SeqWork{1024, 30720, true}, SeqWork{512, 1024, true}});
  REQUIRE(find_op(longer, "gemm.kv_b_context"));
  CHECK(find_op(longer, "gemm.kv_b_context")->ns > up->ns);
  // A fresh prompt beside a chunk: its output is merged too (vLLM merges every prompt token of
  // the batch once one has a context), its keys are not rebuilt.
  const IterationCost mixed = cm.iteration(std::vector<SeqWork>{SeqWork{1024, 3072, true}, SeqWork{512, 0, true}});
  REQUIRE(find_op(mixed, "elementwise.mla_context"));
  CHECK(find_op(mixed, "elementwise.mla_context")->bytes ==
        doctest::Approx(L * (3072 * 576 * 2 * b + 3072 * (H * (2 * 128 + 64) + 64) * b + T * 3 * H * 128 * b)));
  CHECK(find_op(mixed, "gemm.kv_b_context")->flops == doctest::Approx(L * 2 * 3072 * 512 * H * 256));
  // In FP8 the latent rows are quantized for the GEMM: a fourth copy; the GEMM reads them at a byte.
  ModelSpec ds8 = ds;
  ds8.weights = Precision::FP8;
  const IterationCost q = CostModel(load_hardware("h200"), ds8, fused).iteration(chunks);
  REQUIRE(find_op(q, "elementwise.mla_context"));
  CHECK(find_op(q, "elementwise.mla_context")->kernels == doctest::Approx(4 * L));
  const IterationCost q16 = CostModel(load_hardware("h200"), ds, fused).iteration(chunks);
  REQUIRE(find_op(q16, "elementwise.mla_context"));
  CHECK(find_op(q16, "elementwise.mla_context")->kernels == doctest::Approx(3 * L));
  CHECK(find_op(q, "elementwise.mla_context")->bytes == doctest::Approx(find_op(q16, "elementwise.mla_context")->bytes + L * C * 512 * (b + 1)));
  // A training slice's prefix is kept whole, not paged: nothing is rebuilt. With one stage, a
  // slice after 3072 tokens costs what the same chunk lists without the two ops.
  const IterationCost train = cm.iteration(std::vector<SeqWork>{SeqWork{1024, 3072, false}});
  REQUIRE(find_op(train, "gemm.kv_b_context"));
  std::vector<double> stage(1);
  cm.slice_stage_ns(1, 1024, 3072, false, stage);
  CHECK(stage[0] == doctest::Approx(train.total_ns - find_op(train, "gemm.kv_b_context")->ns - find_op(train, "elementwise.mla_context")->ns)
                        .epsilon(1e-9));
  // A decode step has no chunk, and a dense model no latent.
  CHECK(find_op(cm.iteration(std::vector<SeqWork>(8, SeqWork{1, 4096, true})), "gemm.kv_b_context") == nullptr);
  CHECK(find_op(CostModel(round_device(), load_model("llama2-7b"), CostOptions{1, 1, ""}).iteration(std::vector<SeqWork>{SeqWork{512, 512, true}}),
                "elementwise.mla_context") == nullptr);
  // `sluice cost --tables` says where each GEMM's time comes from: this one's too, once.
  const auto sources = cm.gemm_sources();
  CHECK(std::count_if(sources.begin(), sources.end(), [](const std::string& s) { return s.rfind("gemm.kv_b_context (K 512, ", 0) == 0; }) == 1);
}

TEST_CASE("moe: measured routing takes each expert's logged count, from a list or a file, and refuses bad counts where they are") {
  // Counts in the Zipf shares' proportions give Zipf routing's step, device for device.
  std::string zipf_counts;
  for (int e = 0; e < 8; ++e) zipf_counts += fmt::format("{}{}", e ? ", " : "", 840.0 / (e + 1));
  const Json zipf = run_text(kMixtral, {"deployment.moe.routing=zipf", "deployment.tensor_parallel=4"})["serving"];
  const Json listed = run_text(kMixtral, {"deployment.moe.routing=measured", "deployment.tensor_parallel=4",
                                          "deployment.moe.expert_load=[" + zipf_counts + "]"})["serving"];
  CHECK(listed["moe"]["routing"] == "measured");
  CHECK(listed["moe"]["device_load"].size() == zipf["moe"]["device_load"].size());
  for (size_t d = 0; d < zipf["moe"]["device_load"].size(); ++d)
    CHECK(listed["moe"]["device_load"][d].get<double>() == doctest::Approx(zipf["moe"]["device_load"][d].get<double>()));
  CHECK(listed["latency_ms"]["tpot"]["mean"].get<double>() == doctest::Approx(zipf["latency_ms"]["tpot"]["mean"].get<double>()));
  // A file: one count per line or comma-separated, comments after #.
  const auto dir = std::filesystem::temp_directory_path() / "sluice-expert-load";
  std::filesystem::create_directories(dir);
  const auto good = dir / "load.csv";
  std::ofstream(good) << "# tokens per expert, from a router's log\n100, 100, 100, 100\n100\n100\n100\n900  # the hot one\n";
  const Json filed = run_text(kMixtral, {"deployment.moe.routing=measured", "deployment.moe.expert_load_file=" + good.string()})["serving"];
  CHECK(filed["moe"]["device_load_max_over_mean"].get<double>() > 1.5);  // the hot expert's device
  const auto bad = dir / "bad.csv";
  std::ofstream(bad) << "1\n2\nmany\n";
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.moe.routing=measured", "deployment.moe.expert_load_file=" + bad.string()}),
                       doctest::Contains("bad.csv:3"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.moe.routing=measured", "deployment.moe.expert_load=[1, 2, 3]"}),
                       doctest::Contains("3 counts for the 8 experts"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.moe.routing=measured", "deployment.moe.expert_load=[1, 2, 3, 4, 5, 6, 7, -8]"}),
                       doctest::Contains("expert_load[7]"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.moe.expert_load=[1, 2, 3, 4, 5, 6, 7, 8]"}),
                       doctest::Contains("only measured routing"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.moe.routing=measured"}), doctest::Contains("0 counts for the 8 experts"),
                       ConfigError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("moe: under skewed routing the all-to-alls carry more to and from the hot experts' device, the total unchanged") {
  // The cost model's per-device weights: all 1 under uniform routing, the hot device above 1
  // under Zipf, their mean 1 either way.
  MoeOptions mo;
  mo.expert_parallel = mo.alltoall = true;
  const HardwareSpec h = round_device();
  auto weights = [&](MoeOptions::Routing r) {
    mo.routing = r;
    CostOptions o{4, 1, ""};
    o.moe = mo;
    return CostModel(h, tiny_moe(8), o).moe_alltoall_weights();
  };
  const auto even = weights(MoeOptions::Routing::Uniform);
  const auto skew = weights(MoeOptions::Routing::Zipf);
  REQUIRE(even.size() == 4);
  REQUIRE(skew.size() == 4);
  for (double w : even) CHECK(w == doctest::Approx(1));
  CHECK(std::accumulate(skew.begin(), skew.end(), 0.0) == doctest::Approx(4));
  CHECK(skew[0] > 1.2);  // experts 0 and 1, the hottest, on device 0
  // On a 4-GPU switch: the pair i -> j carries its even share times (w_i + w_j) / 2, so the hot
  // device's link carries more and the all-to-all waits for it.
  const net::Topology t = four_gpu_server();
  const auto devs = t.devices();
  Engine e(1);
  net::Router r(t);
  net::FlowSim sim(e, t, r);
  net::CollectiveOptions o;
  o.a2a_weights = skew;
  net::Collective c(sim, net::CollectiveKind::AllToAll, devs, 4e9, o);
  c.start();
  e.run();
  REQUIRE(c.finished());
  const auto carried = sim.carried_link_bytes();
  double total = 0, into_hot = 0;
  for (int l = 0; l < t.link_count(); ++l) {
    total += carried[static_cast<size_t>(l)];
    if (t.link(l).dst == devs[0]) into_hot = carried[static_cast<size_t>(l)];
  }
  // A pair's even share is 4e9 / 4 = 1e9: device 0 receives (w_0 + w_j) / 2 of it from each peer.
  double expect_in = 0;
  for (int j = 1; j < 4; ++j) expect_in += 1e9 * (skew[0] + skew[static_cast<size_t>(j)]) / 2;
  CHECK(into_hot == doctest::Approx(expect_in).epsilon(1e-6));
  CHECK(into_hot > 3e9);
  // Every pair once, each over a link up to the switch and one down: as an even all-to-all's.
  CHECK(total == doctest::Approx(2 * 1e9 * 12).epsilon(1e-6));
  const double even_s = net::collective_time(t, net::CollectiveKind::AllToAll, devs, 4e9).to_seconds();
  CHECK(c.duration().to_seconds() > 1.1 * even_s);
}

TEST_CASE("moe: two-batch overlap hides the all-to-alls under the other micro-batch's compute, and each half reads the weights") {
  // DeepSeek-V3 with EP 16 across two servers: each iteration's all-reduces and all-to-alls cross
  // the NICs, so hiding them pays, though by less than they take (each micro-batch reads the
  // weights again).
  const std::string ep16 = testing::slurp(std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios/deepseek-v3-ep16.yaml");
  const std::vector<std::string> small = {"workloads.0.workload.requests=200"};
  auto ds = [&](bool overlap) {
    auto sets = small;
    sets.push_back(fmt::format("workloads.0.deployment.moe.two_batch_overlap={}", overlap));
    return run_text(ep16, sets)["serving"];
  };
  const Json off = ds(false), on = ds(true);
  CHECK(on["moe"]["two_batch_overlap"] == true);
  CHECK(on["moe"]["overlapped_iterations"].get<int64_t>() > 0);
  CHECK(on["requests"]["completed"] == off["requests"]["completed"]);
  const double tpot_off = off["latency_ms"]["tpot"]["mean"].get<double>(), tpot_on = on["latency_ms"]["tpot"]["mean"].get<double>();
  const double comm = off["communication"]["tp_allreduce_ms_mean"].get<double>() + off["moe"]["alltoall_ms_mean"].get<double>();
  CHECK(tpot_on < tpot_off);
  CHECK(tpot_on > tpot_off - comm);
  // Mixtral inside one NVSwitch server at small batches: little communication to hide, and the
  // second read of the experts' weights makes it slower.
  const Json mx_off = run_text(kMixtral)["serving"];
  const Json mx_on = run_text(kMixtral, {"deployment.moe.two_batch_overlap=true"})["serving"];
  CHECK(mx_on["latency_ms"]["tpot"]["mean"].get<double>() > mx_off["latency_ms"]["tpot"]["mean"].get<double>());
  // One sequence at a time: nothing to split, the same run.
  const Json one_off = run_text(kMixtral, {"workload.arrival.clients=1", "workload.requests=4"})["serving"];
  const Json one_on = run_text(kMixtral, {"workload.arrival.clients=1", "workload.requests=4", "deployment.moe.two_batch_overlap=true"})["serving"];
  CHECK(one_on["moe"]["overlapped_iterations"] == 0);
  CHECK(one_on["latency_ms"] == one_off["latency_ms"]);
  // Refused where it cannot apply, at its key.
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.moe.dispatch=allreduce", "deployment.moe.two_batch_overlap=true"}),
                       doctest::Contains("two_batch_overlap"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"model=llama3-8b", "deployment.moe={two_batch_overlap: true}"}), doctest::Contains("dense model"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kMixtral, {"deployment.tensor_parallel=4", "deployment.pipeline_parallel=2", "deployment.moe.two_batch_overlap=true"}),
                       doctest::Contains("single stage"), ConfigError);
}
