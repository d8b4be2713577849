// Data-parallel attention (deployment.moe.data_parallel_attention): each device attends over its
// own sequences with the attention and dense weights whole, the routed experts stay spread over
// the devices; the cost model's step against hand-built references, the memory plan, a
// disaggregated run against tensor-parallel decode, and bad input at its key.
#include <doctest/doctest.h>

#include "test_support.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/error.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// The test device of test_support.h, with FP8 tensor cores (2 PFLOP/s).
HardwareSpec round_device() {
  HardwareSpec h = testing::round_device();
  h.peak_fp8_flops = 2e15;
  return h;
}

CostOptions ep_options(int tp, bool dp) {
  CostOptions o{tp, 1, ""};
  o.moe.expert_parallel = true;
  o.moe.alltoall = true;
  o.moe.data_parallel_attention = dp;
  return o;
}

double op_ns(const IterationCost& it, const std::string& op) {
  double ns = 0;
  for (const auto& o : it.ops)
    if (o.op == op) ns += o.ns;
  return ns;
}
// Every op but the routed experts and their all-to-alls: a device's own part of the step.
double own_ns(const IterationCost& it) {
  double ns = 0;
  for (const auto& o : it.ops)
    if (o.op != "moe.experts" && o.op != "alltoall.moe") ns += o.ns;
  return ns;
}

}  // namespace

TEST_CASE("dp attention: each device's step is one device's whole attention and dense layers over its own sequences, then the experts") {
  const ModelSpec ds = load_model("deepseek-v3");
  const HardwareSpec hw = round_device();
  const int d = 8;
  const CostModel dp(hw, ds, ep_options(d, true)), tp(hw, ds, ep_options(d, false)), one(hw, ds, CostOptions{1, 1, ""});
  // d identical decodes: one on each device.
  const std::vector<SeqWork> batch(d, SeqWork{1, 4095, true});
  const IterationCost it = dp.iteration(batch);
  // Its own part is the single-device model's for one sequence, op for op.
  const IterationCost alone = one.iteration(std::vector<SeqWork>{SeqWork{1, 4095, true}});
  for (const char* op : {"attention.decode", "gemm.q_a", "gemm.q_b", "gemm.kv_a", "gemm.kv_b", "gemm.o", "gemm.gate_up",
                         "moe.shared_gate_up", "moe.router", "lm_head"})
    CHECK_MESSAGE(op_ns(it, op) == doctest::Approx(op_ns(alone, op)), std::string(op));
  CHECK(own_ns(it) == doctest::Approx(own_ns(alone)));
  // The experts: as expert parallelism over the d devices serves the whole batch's tokens.
  const IterationCost eps = tp.iteration(batch);
  CHECK(op_ns(it, "moe.experts") == doctest::Approx(op_ns(eps, "moe.experts")));
  CHECK(op_ns(it, "moe.experts") > 0);
  // No tensor-parallel all-reduce or logit gather; the all-to-alls carry what EP's do (each
  // device its 1/d of the tokens).
  CHECK(op_ns(it, "allreduce") == 0);
  CHECK(op_ns(it, "allgather.logits") == 0);
  CHECK(op_ns(eps, "allreduce") > 0);
  CHECK(dp.tp_allreduce_bytes(64.0, 0) == 0);
  CHECK(dp.moe_alltoall_bytes(64.0, 0) == doctest::Approx(tp.moe_alltoall_bytes(64.0, 0)));
  CHECK(op_ns(it, "alltoall.moe") == doctest::Approx(op_ns(eps, "alltoall.moe")));
  // The hot path's total is the breakdown's.
  CHECK(dp.iteration_ns(batch) == doctest::Approx(it.total_ns).epsilon(1e-9));
  CHECK(dp.decode_ns(batch) == doctest::Approx(it.total_ns).epsilon(1e-9));
  // Each device reads 1/d of the latent cache tensor parallelism reads whole on every device.
  CHECK(op_ns(it, "attention.decode") < op_ns(eps, "attention.decode") / 4);
}

TEST_CASE("dp attention: the step waits for the busiest device, whose share is dealt round-robin") {
  const ModelSpec ds = load_model("deepseek-v3");
  const HardwareSpec hw = round_device();
  const CostModel dp(hw, ds, ep_options(4, true)), one(hw, ds, CostOptions{1, 1, ""});
  // Eight sequences over four devices: device 1 gets positions 1 and 5, the long contexts.
  std::vector<SeqWork> batch(8, SeqWork{1, 1000, true});
  batch[1].context = batch[5].context = 60000;
  const IterationCost it = dp.iteration(batch);
  const IterationCost busiest = one.iteration(std::vector<SeqWork>{batch[1], batch[5]});
  CHECK(own_ns(it) == doctest::Approx(own_ns(busiest)));
  CHECK(dp.iteration_ns(batch) == doctest::Approx(own_ns(busiest) + op_ns(it, "moe.experts") + op_ns(it, "alltoall.moe")).epsilon(1e-9));
  // Spread over two devices instead, the same work is faster.
  std::swap(batch[5], batch[6]);
  CHECK(dp.iteration_ns(batch) < it.total_ns);
  // The devices given: the two long sequences on device 3 (the serving simulator passes each
  // sequence's device, where its KV cache is), the rest on 0, 1 and 2.
  const std::vector<int32_t> ranks{0, 3, 1, 2, 0, 3, 1, 2};
  std::swap(batch[5], batch[6]);  // (back: positions 1 and 5 long)
  const double on3 = dp.iteration_ns(batch, ranks);
  CHECK(on3 == doctest::Approx(dp.iteration_ns(batch)).epsilon(1e-12));  // the same shares as dealing by position
  const std::vector<int32_t> apart{0, 3, 1, 2, 0, 2, 1, 3};
  CHECK(dp.iteration_ns(batch, apart) < on3);
  // A sequence with no device yet (-1) is dealt by its position.
  const std::vector<int32_t> partly{0, -1, 1, 2, 0, 3, 1, 2};
  CHECK(dp.iteration_ns(batch, partly) < on3);  // position 1 goes to device 1: the long ones apart
  // Without data-parallel attention the ranks change nothing.
  const CostModel tp(hw, ds, ep_options(4, false));
  CHECK(tp.iteration_ns(batch, ranks) == tp.iteration_ns(batch));
}

TEST_CASE("dp attention: every device holds all but the routed experts whole, and its own sequences' cache") {
  ModelSpec ds = load_model("deepseek-v3");
  ds.weights = Precision::FP8;
  const double routed = ds.routed_expert_parameters() * ds.weight_element_bytes();
  CHECK(ds.weight_bytes_dp_attention(8) == doctest::Approx(ds.weight_bytes() - routed * 7 / 8));
  CHECK(ds.weight_bytes_dp_attention(8) > ds.weight_bytes_per_gpu(8, 1));
  // A run: the decode pool's cache holds 8 devices' worth of latents, each once.
  const Json tp = run_text(testing::kDeepSeekTwoServers)["serving"];
  const Json dp = run_text(testing::kDeepSeekTwoServers, {"workloads.0.deployment.moe.data_parallel_attention=true"})["serving"];
  CHECK(dp["moe"]["data_parallel_attention"] == true);
  CHECK_FALSE(tp["moe"].contains("data_parallel_attention"));
  const double gib = 1024.0 * 1024 * 1024;
  const double latent = 61.0 * 576 * 2;  // bytes a token on one device (bf16 cache)
  const double room_dp = dp["memory_per_gpu"]["kv_cache_bytes"].get<double>(), room_tp = tp["memory_per_gpu"]["kv_cache_bytes"].get<double>();
  CHECK(dp["kv_cache"]["tokens_per_replica"].get<double>() == doctest::Approx(8 * std::floor(room_dp / latent)));
  CHECK(tp["kv_cache"]["tokens_per_replica"].get<double>() == doctest::Approx(std::floor(room_tp / latent)));
  CHECK(dp["memory_per_gpu"]["weights_bytes"].get<double>() - tp["memory_per_gpu"]["weights_bytes"].get<double>() > 10 * gib);
  // The KV copy lands once, on one decode device (tensor-parallel decode holds it on all eight).
  CHECK(dp["disaggregation"]["kv_transfer_bytes"].get<double>() * 8 ==
        doctest::Approx(tp["disaggregation"]["kv_transfer_bytes"].get<double>()).epsilon(0.02));
  {
    // One request alone: its latents go to one decode GPU, the eight prefill GPUs each sending an
    // eighth. Into one GPU they take about as long as its NIC's 50 GB/s allows (the fabric routes
    // a piece through the receiving server's NVLink where that is as short, so a little less);
    // spread over the eight decode GPUs, as tensor-parallel decode gets them, an eighth of that.
    const std::vector<std::string> one = {"workloads.0.workload.requests=1", "workloads.0.workload.arrival.clients=1",
                                          "workloads.0.deployment.moe.data_parallel_attention=true"};
    const Json solo = run_text(testing::kDeepSeekTwoServers, one)["serving"]["disaggregation"];
    const double bytes = solo["kv_transfer_bytes"].get<double>(), ms = solo["kv_transfer_ms"]["mean"].get<double>();
    CHECK(bytes > 1e8);
    CHECK(ms > 0.8 * bytes / 50e9 * 1e3);
    CHECK(ms < 1.01 * bytes / 50e9 * 1e3);
  }
  // Long contexts: decode steps read 1/8 of the latents and no all-reduce: faster decode.
  CHECK(dp["latency_ms"]["tpot"]["mean"].get<double>() < tp["latency_ms"]["tpot"]["mean"].get<double>());
  CHECK(dp["requests"]["completed"] == tp["requests"]["completed"]);
}

TEST_CASE("dp attention: bad input is refused at its key before anything runs") {
  auto refused = [&](std::vector<std::string> sets, const char* why) {
    sets.push_back("workloads.0.deployment.moe.data_parallel_attention=true");
    CHECK_THROWS_WITH_AS(run_text(testing::kDeepSeekTwoServers, sets), doctest::Contains(why), ConfigError);
    CHECK_THROWS_WITH_AS(run_text(testing::kDeepSeekTwoServers, sets), doctest::Contains("data_parallel_attention"), ConfigError);
  };
  refused({"workloads.0.deployment.moe.dispatch=allreduce"}, "all-to-all");
  refused({"workloads.0.deployment.tensor_parallel=1", "workloads.0.deployment.replicas=9"}, "there is one");
  refused({"workloads.0.deployment.prefill_pool=null", "workloads.0.deployment.prefill_replicas=0", "workloads.0.deployment.replicas=1"},
          "prefill_pool");
  refused({"workloads.0.deployment.moe.expert_parallel=false", "workloads.0.deployment.moe.dispatch=allreduce"}, "all-to-all");
  // Pipeline stages: refused at the deployment's pipeline_parallel (the check sluice cost shares).
  refused({"workloads.0.deployment.pipeline_parallel=2"}, "pipeline stages are not modelled");
  CHECK_THROWS_WITH_AS(run_text(testing::kDeepSeekTwoServers, {"workloads.0.deployment.pipeline_parallel=2", "workloads.0.deployment.moe.data_parallel_attention=true"}),
                       doctest::Contains("pipeline_parallel = "), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(testing::kDeepSeekTwoServers, {"workloads.0.model=llama3-8b", "workloads.0.deployment.moe={data_parallel_attention: true}",
                                          "workloads.0.deployment.precision=bf16"}),
                       doctest::Contains("dense model"), ConfigError);
}

TEST_CASE("data-parallel attention: a decode pool's MoE layer crosses the network at the NIC's line rate (DeepEP's low-latency set-up)") {
  // scenarios/deepep-low-latency-ep16.yaml: 16 H800s decoding with EP 16 over two servers, a row
  // per token and expert, adaptive routing. A GPU's b tokens send 8 rows each, half of them to the
  // other server's 8 GPUs: b x 8 x 1/2 rows of 7168 FP8 bytes and their 56 fp32 scales out and
  // 7168 BF16 pairs back, over its 50 GB/s NIC, plus a layer's two route latencies.
  const std::string yaml = testing::slurp(std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios/deepep-low-latency-ep16.yaml");
  const Json s = run_text(yaml)["serving"];
  const Json& mo = s["moe"];
  const double b = s["batching"]["mean_batch"].get<double>() / 16;
  CHECK(b > 120);  // about 128 a GPU
  const double line = b * 8 / 2 * 7168 * (1 + 4.0 / 128 + 2) / 50e9 * 1e6;  // us
  const double decode = mo["decode_alltoall_us_per_layer"].get<double>();
  CHECK(decode > line);
  CHECK(decode < line * 1.04);
  // Every pass's figure also counts the prefill pool's few long passes (8 thousand tokens each).
  CHECK(mo["alltoall_us_per_layer"].get<double>() > decode);
  // Without a prefill pool there is no decode pool's figure apart.
  const Json one = run_text(testing::slurp(std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios/deepseek-v3-ep16.yaml"),
                            {"workloads.0.workload.requests=50"})["serving"]["moe"];
  CHECK(one.contains("alltoall_us_per_layer"));
  CHECK_FALSE(one.contains("decode_alltoall_us_per_layer"));
}

TEST_CASE("data-parallel attention: a decode step's all-to-all waits for the device holding the most sequences") {
  // A decode pool of 8 devices under data-parallel attention, n sequences dealt round-robin as
  // their KV arrives. Each device dispatches its own sequences' tokens, so the step's all-to-all
  // goes as the busiest device's: 9 sequences put two on one device, as 16 put two on every one.
  // (Sized by the mean, 9 would cost about 8's: 1.19 against 1.17 and 1.34 us a layer.)
  const auto a2a = [](int n) {
    return run_text(testing::kDeepSeekTwoServers,
                    {"workloads.0.deployment.moe={expert_parallel: true, dispatch: alltoall, data_parallel_attention: true}",
                     fmt::format("workloads.0.workload={{kind: llmperf, requests: {0}, input_tokens: {{mean: 512, sd: 0}}, "
                                 "output_tokens: {{mean: 256, sd: 0}}, arrival: {{kind: closed_loop, clients: {0}}}}}",
                                 n)})["serving"]["moe"]["decode_alltoall_us_per_layer"]
        .get<double>();
  };
  const double a8 = a2a(8), a9 = a2a(9), a16 = a2a(16);
  CHECK(a16 > 1.1 * a8);
  CHECK(a9 == doctest::Approx(a16).epsilon(0.01));
}
