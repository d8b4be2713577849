// DeepSeek's own decode deployment, as its inference-system overview gives it: data-parallel
// attention over more GPUs than the model has heads (144), EPLB's redundant experts making the
// slots divide where the experts alone do not (256 + 32 over 144), two-batch overlap with each
// GPU splitting its own sequences, and the H800 it runs on. Each piece by hand, then a run.
#include <doctest/doctest.h>

#include "test_support.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/error.h"
#include "hardware/cost_model.h"
#include "hardware/cost_model_experts.h"
#include "hardware/spec.h"
#include "workloads/serving/serving_sim.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// DeepSeek-V3 FP8 on four 8 x H800 servers: two prefill at TP 16, two decode as one
// data-parallel-attention replica over 16 GPUs (its experts over the same 16).
const char* kH800 = R"(name: t
seed: 5
cluster:
  topology: {catalog: rail-optimized, servers: 4, nvlink_bandwidth: 200GB/s}
  hardware: h800
workloads:
  - name: dsv3
    kind: serving
    model: deepseek-v3
    deployment:
      replicas: 2
      prefill_replicas: 1
      tensor_parallel: 16
      prefill_pool: {tensor_parallel: 16}
      implementation: fused
      precision: fp8
      moe: {expert_parallel: true, dispatch: alltoall, routing: uniform, data_parallel_attention: true}
    scheduler: {kind: vllm, max_num_seqs: 1024}
    workload:
      kind: llmperf
      requests: 400
      input_tokens: {mean: 1024, sd: 256}
      output_tokens: {mean: 128, sd: 32}
      arrival: {kind: closed_loop, clients: 256}
    outputs: {trace: false}
)";

Scenario load(const std::vector<std::string>& sets) { return load_scenario_text(kH800, "t.yaml", sets, testing::registry()); }

}  // namespace

TEST_CASE("deepseek deployment: the H800 is the H100 SXM's compute and memory with NVLink cut to 400 GB/s") {
  const HardwareSpec h800 = load_hardware("h800"), h100 = load_hardware("h100-sxm");
  CHECK(h800.peak_bf16_flops == doctest::Approx(989e12));
  CHECK(h800.peak_fp8_flops == doctest::Approx(1979e12));
  CHECK(h800.effective_flops() == doctest::Approx(h100.effective_flops()));
  CHECK(h800.effective_bandwidth_Bps() == doctest::Approx(h100.effective_bandwidth_Bps()));
  CHECK(h800.hbm_bytes == doctest::Approx(h100.hbm_bytes));
  CHECK(h800.interconnect_links == 8);
  CHECK(h800.interconnect_Bps == doctest::Approx(200e9));  // per direction: 400 GB/s both ways
  CHECK(h800.supports(Precision::FP8));
  CHECK_FALSE(h800.supports(Precision::FP4));
}

TEST_CASE("deepseek deployment: EPLB's slots divide the devices where the experts alone do not (256 + 32 over 144)") {
  const ModelSpec ds = load_model("deepseek-v3");
  MoeOptions mo;
  mo.expert_parallel = true;
  mo.alltoall = true;
  CHECK(moe_problem(ds, mo, 144).has_value());  // 256 experts over 144 GPUs, no copies
  CHECK(moe_problem(ds, mo, 144)->problem.find("does not divide") != std::string::npos);
  mo.eplb = true;
  CHECK(moe_problem(ds, mo, 144).has_value());  // EPLB without copies: 256 slots still do not divide
  CHECK(moe_problem(ds, mo, 144)->key == "redundant_experts");
  mo.redundant_experts = 32;
  CHECK_FALSE(moe_problem(ds, mo, 144).has_value());
  // Two slots a device, every expert placed once and the 32 copied ones twice, each copy with
  // half its expert's share: the devices' shares sum to the whole, and uniform routing leaves
  // every device within a copy's share of the mean.
  const ExpertPlacement p = ExpertPlacement::plan(ds, mo, 144);
  REQUIRE(p.dev_share.size() == 144);
  double total = 0, most = 0, least = 1;
  for (const auto& sh : p.dev_share) {
    CHECK(sh.size() == 2);
    double d = 0;
    for (double q : sh) d += q;
    total += d;
    most = std::max(most, d);
    least = std::min(least, d);
  }
  CHECK(total == doctest::Approx(1.0));
  CHECK(most - least <= 0.5 / 256 + 1e-12);
  // Each GPU holds its two slots' experts on every MoE layer: the 32 copies cost 32/144 of an
  // expert's weights a layer more than 256/144 alone.
  const double one_expert_layers = 3.0 * ds.hidden * ds.expert_ffn * ds.weight_element_bytes() * ds.moe_layers_in(0, ds.layers);
  CHECK(ds.weight_bytes_dp_attention(144, 32) - ds.weight_bytes_dp_attention(144, 0) == doctest::Approx(32 * one_expert_layers / 144));
}

TEST_CASE("deepseek deployment: data-parallel attention runs wider than the heads, tensor parallelism does not") {
  // DeepSeek's decode: 18 nodes, 144 GPUs, each with its own sequences and all 128 heads.
  const std::vector<std::string> wide = {"cluster.topology.servers=20", "workloads.0.deployment.tensor_parallel=144",
                                         "workloads.0.deployment.moe.eplb=true", "workloads.0.deployment.moe.redundant_experts=32",
                                         "workloads.0.deployment.moe.two_batch_overlap=true"};
  CHECK_NOTHROW(load(wide));
  // Tensor-parallel attention over 144 GPUs would split 128 heads: refused at the key.
  auto tp = wide;
  tp.push_back("workloads.0.deployment.moe.data_parallel_attention=false");
  CHECK_THROWS_WITH_AS(load(tp), doctest::Contains("heads"), ConfigError);
  CHECK_THROWS_WITH_AS(load(tp), doctest::Contains("tensor_parallel"), ConfigError);
  // Without the copies, 256 experts over 144 GPUs: refused, naming EPLB as the way out.
  auto bare = wide;
  bare.push_back("workloads.0.deployment.moe.eplb=false");
  bare.push_back("workloads.0.deployment.moe.redundant_experts=0");
  CHECK_THROWS_WITH_AS(load(bare), doctest::Contains("eplb"), ConfigError);
  // Beyond the key's range, at the key.
  CHECK_THROWS_WITH_AS(load({"workloads.0.deployment.tensor_parallel=2048"}), doctest::Contains("tensor_parallel"), ConfigError);
}

TEST_CASE("deepseek deployment: two-batch overlap with data-parallel attention hides the all-to-alls, and each half reads the experts") {
  // On H200s (so the prefill replica fits on one server and a slow NIC slows only the decode
  // replica's all-to-alls between its two servers) with 25 Gb/s NICs and 32 sequences a decode
  // GPU: hiding the all-to-alls under the other half's compute pays, by less than they take
  // (what neither half hides is paid, and each half reads the weights again).
  const std::vector<std::string> slow = {"cluster.hardware=h200", "cluster.topology.servers=3", "cluster.topology.nvlink_bandwidth=450GB/s",
                                         "cluster.topology.nic_bandwidth=25Gb/s", "workloads.0.deployment.prefill_pool.tensor_parallel=8",
                                         "workloads.0.workload.input_tokens={mean: 256, sd: 64}"};
  auto with = [&](std::vector<std::string> sets, bool overlap) {
    sets.push_back(fmt::format("workloads.0.deployment.moe.two_batch_overlap={}", overlap));
    return run_text(kH800, sets)["serving"];
  };
  auto busy = slow;
  busy.push_back("workloads.0.workload.arrival.clients=512");
  busy.push_back("workloads.0.workload.requests=800");
  const Json off = with(busy, false), on = with(busy, true);
  CHECK(on["moe"]["two_batch_overlap"] == true);
  CHECK(on["moe"]["data_parallel_attention"] == true);
  CHECK(on["moe"]["overlapped_iterations"].get<int64_t>() > 0);
  CHECK(on["requests"]["completed"] == off["requests"]["completed"]);
  const double tpot_off = off["latency_ms"]["tpot"]["mean"].get<double>(), tpot_on = on["latency_ms"]["tpot"]["mean"].get<double>();
  const double a2a = off["moe"]["alltoall_ms_mean"].get<double>();
  CHECK(a2a > 0.2 * tpot_off);
  CHECK(tpot_on < 0.9 * tpot_off);
  CHECK(tpot_on > tpot_off - a2a);
  // Fewer sequences than decode GPUs (and prefills one at a time): no GPU holds two, so there is
  // nothing to split (a half would be empty and the communication hidden for nothing): the same
  // run as without overlap.
  auto few = slow;
  for (const char* k : {"workloads.0.workload.arrival.clients=8", "workloads.0.workload.requests=24",
                        "workloads.0.deployment.prefill_pool.scheduler={kind: vllm, max_num_seqs: 1}"})
    few.push_back(k);
  const Json few_off = with(few, false), few_on = with(few, true);
  CHECK(few_on["moe"]["overlapped_iterations"].get<int64_t>() == 0);
  CHECK(few_on["latency_ms"] == few_off["latency_ms"]);
  CHECK(few_on["throughput"] == few_off["throughput"]);
  // On the H800s' own 400 Gb/s NICs at the fixture's load: the second read of each GPU's 16
  // experts a layer (about 41 GB over the 58 MoE layers) costs more than the all-to-alls hidden.
  const Json fast_off = with({}, false), fast_on = with({}, true);
  CHECK(fast_on["latency_ms"]["tpot"]["mean"].get<double>() > fast_off["latency_ms"]["tpot"]["mean"].get<double>());
}

TEST_CASE("deepseek deployment: why a two-batch-overlap half splits each GPU's own sequences, not the batch by position") {
  // The cost of the two halves, each GPU's sequences split between them, against the halves a
  // split by batch position would give: 2 GPUs with their sequences alternating in the batch
  // (GPU 0 at even positions), every sequence of GPU 0 long and of GPU 1 short. Split by GPU,
  // each half carries half of GPU 0's long sequences; split by position, one half would hold
  // them all (and the step would wait for it).
  const HardwareSpec h = load_hardware("h800");
  CostOptions o{2, 1, ""};
  o.moe.expert_parallel = true;
  o.moe.alltoall = true;
  o.moe.data_parallel_attention = true;
  o.implementation = Implementation::Fused;
  ModelSpec m = load_model("deepseek-v3");
  m.weights = Precision::FP8;
  const CostModel cost(h, m, o);
  std::vector<SeqWork> all;
  std::vector<int32_t> ranks;
  for (int i = 0; i < 16; ++i) {
    all.push_back(SeqWork{1, i % 2 == 0 ? 32000 : 100, true});
    ranks.push_back(i % 2);
  }
  // By GPU (the simulator's split, serving::two_batch_halves): each half 4 long on GPU 0 and
  // 4 short on GPU 1.
  std::vector<SeqWork> halves[2];
  std::vector<int32_t> half_ranks[2];
  std::vector<uint32_t> parity;
  REQUIRE(serving::two_batch_halves(all, ranks, 2, halves, half_ranks, parity));
  CHECK(halves[0].size() == 8);
  CHECK(std::count(half_ranks[0].begin(), half_ranks[0].end(), 0) == 4);
  const double by_gpu = cost.iteration_ns(halves[0], half_ranks[0]) + cost.iteration_ns(halves[1], half_ranks[1]);
  // By position (even, odd): one half all GPU 0's long sequences, the other GPU 1's short ones.
  std::vector<SeqWork> e, od;
  std::vector<int32_t> re, ro;
  for (size_t i = 0; i < all.size(); ++i) {
    (i % 2 == 0 ? e : od).push_back(all[i]);
    (i % 2 == 0 ? re : ro).push_back(ranks[i]);
  }
  const double by_position = cost.iteration_ns(e, re) + cost.iteration_ns(od, ro);
  CHECK(by_gpu < by_position);
  // And a half's cost is its busiest GPU's own part plus the experts over all its tokens: the
  // ranks decide which GPU a sequence is on (the same half, dealt round-robin instead, differs).
  CHECK(cost.iteration_ns(e, re) != doctest::Approx(cost.iteration_ns(e)));
}

TEST_CASE("deepseek deployment: two-batch overlap's halves, by position or each device's own sequences alternately") {
  auto seqs = [](int n) {
    std::vector<SeqWork> w;
    for (int i = 0; i < n; ++i) w.push_back(SeqWork{1, 100 + i, true});
    return w;
  };
  std::vector<SeqWork> halves[2];
  std::vector<int32_t> half_ranks[2];
  std::vector<uint32_t> parity;
  auto contexts = [&](int h) {
    std::vector<int> c;
    for (const SeqWork& w : halves[h]) c.push_back(w.context);
    return c;
  };
  // Tensor-parallel attention (no ranks): alternately by position.
  CHECK(serving::two_batch_halves(seqs(5), {}, 8, halves, half_ranks, parity));
  CHECK(contexts(0) == std::vector<int>{100, 102, 104});
  CHECK(contexts(1) == std::vector<int>{101, 103});
  CHECK(half_ranks[0].empty());
  // Two devices, their sequences alternating in the batch: by position, one half would hold
  // device 0's and the other device 1's; by device, each half holds two of each.
  const std::vector<int32_t> alternating = {0, 1, 0, 1, 0, 1, 0, 1};
  CHECK(serving::two_batch_halves(seqs(8), alternating, 2, halves, half_ranks, parity));
  CHECK(contexts(0) == std::vector<int>{100, 101, 104, 105});
  CHECK(contexts(1) == std::vector<int>{102, 103, 106, 107});
  CHECK(half_ranks[0] == std::vector<int32_t>{0, 1, 0, 1});
  CHECK(half_ranks[1] == std::vector<int32_t>{0, 1, 0, 1});
  // A padding row (-1) or a rank out of range is on device position mod dp, as the cost model
  // deals it.
  CHECK(serving::two_batch_halves(seqs(4), std::vector<int32_t>{0, 0, 1, -1}, 2, halves, half_ranks, parity));
  CHECK(half_ranks[0] == std::vector<int32_t>{0, 1});
  CHECK(half_ranks[1] == std::vector<int32_t>{0, 1});  // position 3 -> device 1, its second sequence: half 1
  CHECK(contexts(1) == std::vector<int>{101, 103});
  // No device holds two: the second half is empty, and the step does not overlap.
  CHECK_FALSE(serving::two_batch_halves(seqs(4), std::vector<int32_t>{0, 1, 2, 3}, 4, halves, half_ranks, parity));
  CHECK(halves[1].empty());
  CHECK(halves[0].size() == 4);
}

TEST_CASE("deepseek deployment: a hierarchical all-to-all sends a token to another server once, then over NVLink (DeepEP's internode kernels)") {
  // By hand: DeepSeek-V3's 256 experts over 16 GPUs (1/16 of the assignments each), a server of
  // 8 of them: a token reaches 8 (1 - (15/16)^8) = 3.23 of its GPUs on expectation but the
  // server with 1 - (1/2)^8, so what crosses to it is 0.309 of the flat all-to-all's. (Without its
  // group-limited routing; test_moe_groups.cpp has the figure with it.)
  CostOptions o{16, 1, ""};
  o.moe.expert_parallel = true;
  o.moe.alltoall = true;
  ModelSpec m = load_model("deepseek-v3");
  m.expert_groups = m.groups_per_token = 0;
  const std::vector<int> server{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(CostModel(load_hardware("h800"), m, o).moe_alltoall_server_share(server) ==
        doctest::Approx((1 - std::pow(0.5, 8)) / (8 * (1 - std::pow(15.0 / 16, 8)))));
  o.moe.rows_per_expert = true;  // a row an expert: nothing to share
  CHECK(CostModel(load_hardware("h800"), m, o).moe_alltoall_server_share(server) == 1.0);
  // The fixture's decode replica (16 GPUs on two servers): fewer flows (16 x 1 across and 16 x 7
  // inside an all-to-all, not 16 x 15) and a shorter all-to-all, the network carrying 0.31 of
  // the bytes and NVLink the rest.
  auto run = [](const char* algorithm) {
    return run_text(kH800, {fmt::format("workloads.0.deployment.moe.alltoall_algorithm={}", algorithm)});
  };
  const Json flat = run("flat"), hier = run("hierarchical");
  CHECK(hier["serving"]["moe"]["dispatch"].get<std::string>().find("hierarchical") != std::string::npos);
  CHECK(flat["serving"]["moe"]["dispatch"] == "alltoall");
  CHECK(hier["serving"]["requests"]["completed"] == flat["serving"]["requests"]["completed"]);
  CHECK(hier["serving"]["moe"]["alltoall_ms_mean"].get<double>() < 0.8 * flat["serving"]["moe"]["alltoall_ms_mean"].get<double>());
  CHECK(hier["world"]["flows"]["started"].get<double>() < flat["world"]["flows"]["started"].get<double>());
  // Only where an all-to-all dispatch runs, before anything does.
  CHECK_THROWS_WITH(load({"workloads.0.deployment.moe={expert_parallel: true, dispatch: allreduce, alltoall_algorithm: hierarchical}"}),
                    doctest::Contains("alltoall_algorithm"));
  // A decode replica of 12 GPUs on 8-GPU servers (8 and 4: no rail for 4 of the local ranks):
  // refused when the deployment is placed, naming the key.
  CHECK_THROWS_WITH(run_text(kH800, {"workloads.0.deployment.tensor_parallel=12",
                                     "workloads.0.deployment.moe={expert_parallel: true, dispatch: alltoall, data_parallel_attention: true, "
                                     "eplb: true, redundant_experts: 32, alltoall_algorithm: hierarchical}"}),
                    doctest::Contains("deployment.moe.alltoall_algorithm hierarchical: the group's servers hold 8 and 4"));
}
