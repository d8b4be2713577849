// Mixture-of-experts training with expert parallelism over data-parallel replicas (Megatron-
// Core's EP): each pass's dispatch and combine all-to-alls on the fabric, checked by hand on a
// star of four devices; the expert gradients reduced over the expert-data-parallel group; the
// cost model's pooled expert GEMMs; skewed routing making every step wait; bad input at its key.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>

#include "config/error.h"
#include "engine/run_control.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"
#include "workloads/training/training.h"
#include "run/runner.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// Four devices (four servers) on one switch, each link 100 GB/s with no latency, and an MoE
// model of two layers with four experts of width 2048, top-2.
const std::string kStar = sluice::testing::moe_training_on_star();

constexpr double kHidden = 1024, kTokens = 512, kLayers = 2, kMicroBatches = 2;

// kStar with each `from` replaced by its `to`, run with the fast-forward on and off through GPU
// failures and restarts: the same bytes either way.
void same_through_failures(std::initializer_list<std::pair<std::string, std::string>> edits) {
  std::string yaml = kStar;
  for (const auto& [from, to] : edits) {
    REQUIRE(yaml.find(from) != std::string::npos);
    yaml.replace(yaml.find(from), from.size(), to);
  }
  sluice::testing::same_with_and_without_fast_forward(yaml + R"(faults:
  - {name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 2s}, repair: {dist: fixed, mean: 100ms}}
)");
}

}  // namespace

TEST_CASE("moe training: each pass's all-to-alls carry tokens x distinct expert devices x hidden x bytes, timed on the fabric") {
  const Json t = run_text(kStar)["training"];
  const Json& mo = t["moe"];
  CHECK(mo["expert_parallel"] == 4);
  // One expert a device, top-2 of 4: a token reaches 4 (1 - (3/4)^2) = 1.75 devices (itself
  // among them). Dispatch and combine of both layers, forward and backward, both micro-batches.
  const double dest = 4 * (1 - 0.75 * 0.75);
  const double per_pass = kTokens * dest * kHidden * 2 * 2 * kLayers;
  CHECK(mo["alltoall_bytes_per_device"].get<double>() == doctest::Approx(per_pass * 2 * kMicroBatches).epsilon(1e-12));
  // Each exchange sends 3/4 of a pass's bytes off the device (a quarter is its own experts'),
  // every device at once over its own 100 GB/s link: 4 exchanges an iteration.
  const double exchange_ms = per_pass * 0.75 / 100e9 * 1e3;
  CHECK(mo["alltoall_ms"].get<double>() == doctest::Approx(4 * exchange_ms).epsilon(0.01));
  CHECK(mo["alltoall_share"].get<double>() > 0);
  CHECK(mo["alltoall_share"].get<double>() < 1);
  // EP = dp: every expert lives on one replica, so its gradients need no reduction.
  CHECK(mo["expert_dp_bytes_per_device"] == 0);
  // The same job without expert parallelism sends nothing by all-to-all and holds every expert.
  const Json d = run_text(kStar, {"workloads.0.parallel.expert_parallel=1"})["training"];
  CHECK(d["moe"]["alltoall_ms"] == 0);
  CHECK(d["moe"]["alltoall_bytes_per_device"] == 0);
  CHECK(d["memory_per_device"]["weights_bytes"].get<double>() > t["memory_per_device"]["weights_bytes"].get<double>());
  // Full recomputation runs each forward's exchange again in its backward: 3 exchanges' bytes a unit, not 2.
  const Json r = run_text(kStar, {"workloads.0.recompute=true"})["training"];
  CHECK(r["moe"]["alltoall_bytes_per_device"].get<double>() == doctest::Approx(per_pass * 3 * kMicroBatches).epsilon(1e-12));
  CHECK(r["moe"]["alltoall_ms"].get<double>() == doctest::Approx(6 * exchange_ms).epsilon(0.01));
}

TEST_CASE("moe training: Megatron's alltoall dispatcher sends a row per token and expert, k rows a token") {
  const Json t = run_text(kStar, {"workloads.0.moe.token_dispatcher=alltoall"})["training"];
  const Json& mo = t["moe"];
  CHECK(mo["token_dispatcher"] == "alltoall");
  // Top-2: 2 rows a token (1.75 distinct devices with flex), a quarter of them to the device's own expert.
  const double per_pass = kTokens * 2 * kHidden * 2 * 2 * kLayers;
  CHECK(mo["alltoall_bytes_per_device"].get<double>() == doctest::Approx(per_pass * 2 * kMicroBatches).epsilon(1e-12));
  const double exchange_ms = per_pass * 0.75 / 100e9 * 1e3;
  CHECK(mo["alltoall_ms"].get<double>() == doctest::Approx(4 * exchange_ms).epsilon(0.01));
  const Json f = run_text(kStar)["training"];
  CHECK(f["moe"]["token_dispatcher"] == "flex");
  CHECK(mo["alltoall_bytes_per_device"].get<double>() == doctest::Approx(f["moe"]["alltoall_bytes_per_device"].get<double>() * 2 / 1.75).epsilon(1e-12));
  CHECK(t["iteration_s_mean"].get<double>() > f["iteration_s_mean"].get<double>());
  // Skewed routing: each device receives rows in proportion to its experts' share (not 1 - (1 - share)^k),
  // so the total stays k rows a token while the hot device's part grows.
  const Json z = run_text(kStar, {"workloads.0.moe.token_dispatcher=alltoall", "workloads.0.moe.routing=zipf"})["training"];
  CHECK(z["moe"]["alltoall_bytes_per_device"].get<double>() == doctest::Approx(mo["alltoall_bytes_per_device"].get<double>()).epsilon(1e-12));
  CHECK(z["moe"]["alltoall_ms"].get<double>() > mo["alltoall_ms"].get<double>());
  // Without expert parallelism nothing is dispatched: the key is refused there.
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.parallel.expert_parallel=1", "workloads.0.moe.token_dispatcher=alltoall"}),
                       doctest::Contains("workloads[0].moe.token_dispatcher"), ConfigError);
}

TEST_CASE("moe training: the all-to-all time reported is the slowest expert-parallel group's") {
  // EP2 over dp 4: groups {d0, d1} and {d2, d3}. With d2's and d3's links at a quarter of the
  // speed, the second group's exchanges take four times as long, and every step waits for them.
  std::string slow = kStar;
  for (const char* d : {"{a: d2, b: s, bandwidth: 100GB/s", "{a: d3, b: s, bandwidth: 100GB/s"}) {
    const size_t at = slow.find(d);
    REQUIRE(at != std::string::npos);
    slow.replace(at, std::string(d).size(), std::string(d).replace(std::string(d).find("100GB/s"), 7, "25GB/s"));
  }
  const std::vector<std::string> ep2{"workloads.0.parallel.expert_parallel=2"};
  const Json fast = run_text(kStar, ep2)["training"], thin = run_text(slow, ep2)["training"];
  CHECK(thin["moe"]["alltoall_ms"].get<double>() == doctest::Approx(4 * fast["moe"]["alltoall_ms"].get<double>()).epsilon(1e-4));
}

TEST_CASE("moe training: expert gradients are all-reduced over the replicas holding the same experts, the rest over all") {
  // EP2 over dp 4: replicas {0,1} and {2,3} each hold all four experts, two a device; the
  // expert-data-parallel groups are {0,2} and {1,3}.
  const Json t = run_text(kStar, {"workloads.0.parallel.expert_parallel=2"})["training"];
  const double routed = 4 * 3 * kHidden * 2048 * kLayers;  // every routed expert's gate, up and down
  CHECK(t["moe"]["expert_dp_bytes_per_device"].get<double>() == doctest::Approx(routed / 2 * 2).epsilon(1e-12));
  // Each device holds half the experts: the routed parameters it does not hold are missing from its weights.
  const Json all = run_text(kStar, {"workloads.0.parallel.expert_parallel=1"})["training"];
  CHECK(all["memory_per_device"]["weights_bytes"].get<double>() - t["memory_per_device"]["weights_bytes"].get<double>() ==
        doctest::Approx(routed / 2 * 2).epsilon(1e-9));
}

TEST_CASE("moe training: ZeRO shards dense state over every replica and a device's experts over its expert-data-parallel group") {
  // EP2 over dp 4 (expert-data-parallel groups {0,2} and {1,3}): a device holds half the routed
  // experts, E parameters, and the dense rest, D. ZeRO-1 keeps Adam's 12 bytes a parameter of
  // D / 4 + E / 2; ZeRO-2 the bf16 gradients of the same; Megatron-Core's distributed optimizer.
  const std::vector<std::string> ep2{"workloads.0.parallel.expert_parallel=2"};
  auto with = [&](const char* z) {
    std::vector<std::string> s = ep2;
    s.emplace_back(z);
    return run_text(kStar, s)["training"];
  };
  const Json z0 = run_text(kStar, ep2)["training"], z1 = with("workloads.0.parallel.zero=1"), z2 = with("workloads.0.parallel.zero=2");
  const double E = 4 * 3 * kHidden * 2048 * kLayers / 2;
  const double held = z0["memory_per_device"]["weights_bytes"].get<double>() / 2, D = held - E;
  CHECK(z0["memory_per_device"]["optimizer_bytes"].get<double>() == doctest::Approx(12 * held).epsilon(1e-12));
  CHECK(z1["memory_per_device"]["optimizer_bytes"].get<double>() == doctest::Approx(12 * (D / 4 + E / 2)).epsilon(1e-12));
  CHECK(z1["memory_per_device"]["gradients_bytes"].get<double>() == doctest::Approx(2 * held).epsilon(1e-12));
  CHECK(z2["memory_per_device"]["gradients_bytes"].get<double>() == doctest::Approx(2 * (D / 4 + E / 2)).epsilon(1e-12));
  // The step: the dense gradients reduce-scattered over all four and the experts' over each pair
  // at once, then after Adam the same bytes all-gathered back. Each device's link carries 3/4 of
  // the dense bytes and 1/2 of its experts' in each: ZeRO-0's all-reduce carries twice that.
  const double each_ms = (0.75 * 2 * D + 0.5 * 2 * E) / 100e9 * 1e3;
  CHECK(z1["dp_allreduce_ms"].get<double>() == doctest::Approx(each_ms).epsilon(1e-4));
  CHECK(z0["dp_allreduce_ms"].get<double>() == doctest::Approx(2 * each_ms).epsilon(1e-4));
  // The iteration: ZeRO-0's without its all-reduce and step, plus ZeRO-1's reduce-scatter, its
  // sharded step (Adam over D / 4 + E / 2 parameters) and the all-gather.
  const double compute_ms = z0["iteration_s_mean"].get<double>() * 1e3 - z0["dp_allreduce_ms"].get<double>() - z0["optimizer_ms"].get<double>();
  CHECK(z1["optimizer_ms"].get<double>() == doctest::Approx(z0["optimizer_ms"].get<double>() * (D / 4 + E / 2) / held).epsilon(1e-4));
  CHECK(z1["iteration_s_mean"].get<double>() * 1e3 ==
        doctest::Approx(compute_ms + z1["dp_allreduce_ms"].get<double>() + z1["optimizer_ms"].get<double>() + each_ms).epsilon(1e-4));
  // Flows per iteration: ZeRO-1 adds the gathers, a ring of 4 over every replica and one of 2 per pair.
  CHECK(z1["flows"].get<int>() - z0["flows"].get<int>() == 2 * (4 + 2 * 2));
  // EP = dp: each expert is on one replica, updated whole and gathered by no one; the dense rest shards over 4.
  const Json z1all = run_text(kStar, {"workloads.0.parallel.zero=1"})["training"];
  const double held4 = z1all["memory_per_device"]["weights_bytes"].get<double>() / 2, E4 = 4 * 3 * kHidden * 2048 * kLayers / 4;
  CHECK(z1all["memory_per_device"]["optimizer_bytes"].get<double>() == doctest::Approx(12 * ((held4 - E4) / 4 + E4)).epsilon(1e-12));
  // The same outputs with the fast-forward on and off.
  std::vector<std::string> six = ep2;
  six.emplace_back("workloads.0.parallel.zero=1");
  six.emplace_back("workloads.0.iterations=6");
  const RunControl::FastForward off(false);
  const Json slow = run_text(kStar, six);
  const RunControl::FastForward on(true);
  CHECK(run_text(kStar, six).dump() == slow.dump());
}

TEST_CASE("moe training: ZeRO-3 gathers and reduce-scatters each op's dense parameters over all replicas and its experts over their group") {
  // EP2 over dp 4, as above: D dense parameters sharded over 4, E expert ones over each pair.
  auto run = [&](const char* ep, const char* z) { return run_text(kStar, {ep, z})["training"]; };
  const char* ep2 = "workloads.0.parallel.expert_parallel=2";
  const Json z2 = run(ep2, "workloads.0.parallel.zero=2"), z3 = run(ep2, "workloads.0.parallel.zero=3");
  const double E = 4 * 3 * kHidden * 2048 * kLayers / 2;
  const double held = run(ep2, "workloads.0.parallel.zero=0")["memory_per_device"]["weights_bytes"].get<double>() / 2, D = held - E;
  // The bf16 shard, D / 4 + E / 2, and FSDP's two layers (of the stage's two) gathered whole.
  CHECK(z3["memory_per_device"]["weights_bytes"].get<double>() == doctest::Approx(2 * (D / 4 + E / 2) + 2 * held).epsilon(1e-12));
  CHECK(z3["memory_per_device"]["gradients_bytes"] == z2["memory_per_device"]["gradients_bytes"]);
  CHECK(z3["memory_per_device"]["optimizer_bytes"] == z2["memory_per_device"]["optimizer_bytes"]);
  // Flows an iteration: each of the 4 ops (2 micro-batches, forward and backward) gathers each of
  // its 2 layers, each of the 2 backward ops reduce-scatters each layer's gradients, each over a
  // ring of 4 (dense) and two rings of 2 (the pairs' experts): 2 x 6 x (4 + 2 x 2); ZeRO-2
  // reduce-scatters and gathers once: 2 x (4 + 2 x 2).
  CHECK(z3["flows"].get<int>() - z2["flows"].get<int>() == 2 * (2 * 6 - 2) * (4 + 2 * 2));
  CHECK(z3["iteration_s_mean"].get<double>() > z2["iteration_s_mean"].get<double>());  // this small job's gathers do not hide
  // EP = dp: every expert on one replica, whole, gathered by no one: rings of 4 only.
  const char* ep4 = "workloads.0.parallel.expert_parallel=4";
  const Json a2 = run(ep4, "workloads.0.parallel.zero=2"), a3 = run(ep4, "workloads.0.parallel.zero=3");
  const double E4 = 4 * 3 * kHidden * 2048 * kLayers / 4;
  const double held4 = run(ep4, "workloads.0.parallel.zero=0")["memory_per_device"]["weights_bytes"].get<double>() / 2;
  CHECK(a3["memory_per_device"]["weights_bytes"].get<double>() == doctest::Approx(2 * ((held4 - E4) / 4 + E4) + 2 * held4).epsilon(1e-12));
  CHECK(a3["flows"].get<int>() - a2["flows"].get<int>() == 2 * (2 * 6 - 2) * 4);
  // The same bytes with the fast-forward on and off, through GPU failures and restarts; and so
  // with the all-to-alls overlapped (an op's layers then count their work as it runs).
  same_through_failures({{"expert_parallel: 4}", "expert_parallel: 2, zero: 3}"}, {"iterations: 2", "iterations: 40"}});
  same_through_failures({{"expert_parallel: 4}", "expert_parallel: 2, zero: 3}"},
                         {"cost_tables: none,", "cost_tables: none, moe: {alltoall_overlap: true},"},
                         {"iterations: 2", "iterations: 40"}});
  const Json over = run_text(kStar, {ep2, "workloads.0.parallel.zero=3", "workloads.0.moe.alltoall_overlap=true"})["training"];
  CHECK(over["iteration_s_mean"].get<double>() <= z3["iteration_s_mean"].get<double>());
  CHECK(over["bubble_fraction"].get<double>() >= 0);
  CHECK(over["bubble_fraction"].get<double>() < 1);
}

TEST_CASE("moe training: an MoE layer keeps a dispatched copy and the expert's gated MLP for each expert a token visits") {
  // tiny-moe, one micro-batch of 512 tokens in flight: attention 11sbh + 4asb, layer norms 4sbh,
  // the layer's input and mask 3sbh, and per each of the 2 experts a token goes to, its copy 2sbh
  // and the expert's gate, up and down inputs 6·s·2048 (uniform routing: a device's experts
  // receive as many rows as its tokens send).
  const double s = 512, sbh = s * kHidden;
  const double layer = 11 * sbh + 4 * 8 * s + 4 * sbh + 3 * sbh + 2 * (2 * sbh + 6 * s * 2048);
  const double loss = s * 8 * 4;  // the last rank's fp32 softmax of the logits (vocab 8)
  CHECK(run_text(kStar)["training"]["memory_per_device"]["activations_bytes"].get<double>() == doctest::Approx(kLayers * layer + loss).epsilon(1e-12));
  // At TP2 everything is split but the dispatched copies, which the experts' tensor-parallel
  // group gathers whole onto each rank before its GEMMs.
  const std::string tp2 = sluice::testing::kTwoServersOfTwo + R"(workloads:
  - {name: j, kind: training, sequence: 512, iterations: 1, cost_tables: none,
     model: {name: tiny-moe, layers: 2, hidden: 1024, heads: 8, kv_heads: 8, ffn: 4096, vocab: 8, max_context: 512,
             experts: 4, experts_per_token: 2, expert_ffn: 2048},
     parallel: {tp: 2, pp: 1, dp: 2, micro_batches: 2, expert_parallel: 2}}
)";
  CHECK(run_text(tp2)["training"]["memory_per_device"]["activations_bytes"].get<double>() ==
        doctest::Approx(kLayers * ((layer - 2 * 2 * sbh) / 2 + 2 * 2 * sbh) + loss / 2).epsilon(1e-12));
  // One shared expert every token also passes through: its gated MLP's 6·s·2048 more a layer.
  CHECK(run_text(kStar, {"workloads.0.model.shared_experts=1"})["training"]["memory_per_device"]["activations_bytes"].get<double>() ==
        doctest::Approx(kLayers * (layer + 6 * s * 2048) + loss).epsilon(1e-12));
}

TEST_CASE("moe training: a device's experts compute the rows every replica of its group routes to them") {
  // Four replicas pooled: uniform routing gives each device M x k rows (the FLOPs of every
  // expert on M tokens), over a quarter of the weights.
  const ModelSpec m = load_model("mixtral-8x7b");  // 8 experts, top-2, hidden 4096, 32 MoE layers
  const HardwareSpec h = load_hardware("h200");  // on the roofline: no tables named
  CostOptions one, pooled;
  pooled.moe.data_parallel_ep = 4;
  const std::vector<SeqWork> batch{SeqWork{4096, 0, true}};
  auto experts = [&](const CostOptions& o) {
    for (const auto& op : CostModel(h, m, o).iteration(batch).ops)
      if (op.op == "moe.experts") return op;
    FAIL("no moe.experts");
    return OpCost{};
  };
  const OpCost a = experts(one), b = experts(pooled);
  CHECK(b.flops == doctest::Approx(a.flops).epsilon(1e-12));
  CHECK(b.bytes < a.bytes);
  const CostModel cm(h, m, pooled);
  // Two experts a device: a token reaches 4 (1 - (3/4)^2) = 1.75 devices; dispatch and combine of 32 layers.
  CHECK(cm.moe_alltoall_count(0) == 64);
  CHECK(cm.moe_alltoall_bytes(4096, 0) == doctest::Approx(64 * 4096 * 1.75 * 4096 * 2).epsilon(1e-12));
  for (double rows : cm.expert_tokens_per_device(4096)) CHECK(rows == doctest::Approx(4096 * 2).epsilon(1e-12));
}

TEST_CASE("moe training: with tensor parallelism an MoE layer's MLP all-reduce moves the rows its experts receive") {
  // Experts split over tp as the dense MLP is: the MLP's all-reduce of the M tokens becomes the
  // all-gather over tp of the k M rows the device's experts receive and the reduce-scatter of
  // their outputs (an all-reduce's bytes of those rows). Mixtral: 32 layers, all MoE, top-2, no
  // shared expert: the attention's M and the experts' 2 M a layer.
  const HardwareSpec h = load_hardware("h200");
  CostOptions o;
  o.tensor_parallel = 2;
  o.moe.data_parallel_ep = 4;
  const double row = 4096 * 4096 * 2.0;  // M x hidden x bf16
  CHECK(CostModel(h, load_model("mixtral-8x7b"), o).tp_allreduce_bytes(4096, 0) == doctest::Approx((32 + 32 * 2) * row).epsilon(1e-12));
  // Without expert parallelism the experts' MLP is a dense one's: two all-reduces of M a layer.
  CostOptions dense;
  dense.tensor_parallel = 2;
  CHECK(CostModel(h, load_model("mixtral-8x7b"), dense).tp_allreduce_bytes(4096, 0) == doctest::Approx(64 * row).epsilon(1e-12));
  // Skewed routing: the hottest device's rows (the step waits for it, as for its compute).
  CostOptions hot = o;
  hot.moe.routing = MoeOptions::Routing::Zipf;
  CHECK(CostModel(h, load_model("mixtral-8x7b"), hot).tp_allreduce_bytes(4096, 0) > 100 * row);
  // DeepSeek-V3: 3 dense layers (two all-reduces each), 58 MoE ones with 8 rows a token and the
  // shared expert's output all-reduced besides the attention's: 6 + 58 x (1 + 8 + 1) (hidden 7168).
  CostOptions ds = o;
  ds.moe.data_parallel_ep = 8;
  const double row7 = 4096 * 7168 * 2.0;
  CHECK(CostModel(h, load_model("deepseek-v3"), ds).tp_allreduce_bytes(4096, 0) == doctest::Approx((6 + 58 * 10) * row7).epsilon(1e-12));
}

TEST_CASE("moe training: skewed routing makes every step wait for the hot experts' replica") {
  const Json u = run_text(kStar)["training"];
  const Json z = run_text(kStar, {"workloads.0.moe.routing=zipf", "workloads.0.moe.zipf_s=1.2"})["training"];
  CHECK(z["moe"]["routing"] == "zipf");
  CHECK(z["iteration_s_mean"].get<double>() > 1.05 * u["iteration_s_mean"].get<double>());
  CHECK(z["moe"]["alltoall_ms"].get<double>() > u["moe"]["alltoall_ms"].get<double>());
  // The bytes each device sends in total are the routing's distinct destinations: fewer when
  // routing concentrates on a few experts.
  CHECK(z["moe"]["alltoall_bytes_per_device"].get<double>() < u["moe"]["alltoall_bytes_per_device"].get<double>());
  // Memory is the fullest device's: d0 holds the hottest expert, at zipf_s 1 a share of
  // 1 / (1 + 1/2 + 1/3 + 1/4) of the rows (under the 1/k cap), f = 4 times the mean device's.
  // Its dispatched copies and expert MLPs (2sbh + 6sbf a row, k rows a token) grow f-fold, in
  // each of the two MoE layers of the one micro-batch in flight.
  const Json z1 = run_text(kStar, {"workloads.0.moe.routing=zipf"})["training"];
  const double f = 4 / (1 + 1.0 / 2 + 1.0 / 3 + 1.0 / 4);
  const double more = kLayers * 2 * (f - 1) * (2 * kTokens * kHidden + 6 * kTokens * 2048);
  CHECK(z1["memory_per_device"]["activations_bytes"].get<double>() - u["memory_per_device"]["activations_bytes"].get<double>() ==
        doctest::Approx(more).epsilon(1e-9));
  CHECK(z1["memory_per_device"]["weights_bytes"] == u["memory_per_device"]["weights_bytes"]);
}

TEST_CASE("moe training: bad expert parallelism is refused at its key before anything runs") {
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.parallel.expert_parallel=3"}),
                       doctest::Contains("workloads[0].parallel.expert_parallel"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.parallel.expert_parallel=3"}), doctest::Contains("a divisor of dp"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.parallel.dp=3", "workloads.0.parallel.expert_parallel=3"}),
                       doctest::Contains("does not divide the 4 experts"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.model=tinyllama-1.1b"}), doctest::Contains("dense model"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.parallel.expert_parallel=1", "workloads.0.moe.routing=zipf"}),
                       doctest::Contains("workloads[0].moe.routing"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.parallel.schedule=gpipe", "workloads.0.slicing.policy=uniform", "workloads.0.slicing.slices=2"}),
                       doctest::Contains("token slicing plans slices"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.model=tinyllama-1.1b", "workloads.0.parallel.expert_parallel=1",
                                        "workloads.0.moe.routing=zipf"}),
                       doctest::Contains("workloads[0].moe.routing"), ConfigError);
}

namespace {
// A run's metrics and whether the fast-forward counted iterations without simulating them.
struct Ran {
  Json metrics;
  bool skipped = false;
};
Ran run_ff(bool ff, const std::vector<std::string>& sets) {
  const RunControl::FastForward f(ff);
  Scenario sc = load_scenario_text(kStar, "t.yaml", sets, sluice::testing::registry());
  Recorder rec;
  run_into(sc, rec, {});
  Ran r{rec.metrics(), false};
  for (const auto& l : rec.summary_lines()) r.skipped = r.skipped || l.find("were counted without being simulated") != std::string::npos;
  return r;
}
}  // namespace

TEST_CASE("moe training: with alltoall_overlap a backward's all-to-alls run under the next forward, slowed by the SMs they take") {
  // One stage, order F0 B0 F1 B1. F0's exchange must end before B0 (the loss needs it); B0's
  // runs while F1 computes (3/4 of 3.67 MB over 100 GB/s, 27.5 us, under F1's 175 us), and for
  // those 27.5 us F1 computes at 124 / 132 of its speed (an H200 keeps 8 SMs for
  // communication): B0's exchange costs 8 / 132 of itself instead of all of it. F1's and B1's
  // exchanges stay exposed (nothing of the other direction follows them in time).
  const std::vector<std::string> one{"workloads.0.iterations=1"};
  std::vector<std::string> over = one;
  over.emplace_back("workloads.0.moe.alltoall_overlap=true");
  const Json a = run_text(kStar, one)["training"], b = run_text(kStar, over)["training"];
  const double F = a["per_micro_batch_ms"]["forward"].get<double>(), X = a["moe"]["alltoall_ms"].get<double>() / 4;
  CHECK(X < F);
  CHECK(b["moe"]["alltoall_overlap"] == true);
  CHECK(a["moe"]["alltoall_overlap"] == false);
  CHECK((a["iteration_s_mean"].get<double>() - b["iteration_s_mean"].get<double>()) * 1e3 ==
        doctest::Approx(X * 124.0 / 132).epsilon(1e-4));
  CHECK(b["moe"]["alltoall_ms"].get<double>() == doctest::Approx(a["moe"]["alltoall_ms"].get<double>()));
  // The stage never idles beside its own all-to-alls: waiting for them counts as busy, as without overlap.
  CHECK(b["bubble_fraction"].get<double>() == doctest::Approx(a["bubble_fraction"].get<double>()));
  // With communication free of SMs (comm_sms 0) the whole of B0's exchange is saved.
  std::vector<std::string> free = over;
  free.emplace_back("cluster.hardware={catalog: h200, comm_sms: 0}");
  const Json c = run_text(kStar, free)["training"];
  CHECK((a["iteration_s_mean"].get<double>() - c["iteration_s_mean"].get<double>()) * 1e3 == doctest::Approx(X).epsilon(1e-4));
  // Two pipeline stages, eight micro-batches: the steady 1F1B pairs hide more, and the outputs
  // are the same with the fast-forward on and off.
  std::vector<std::string> pp2{"workloads.0.parallel.pp=2", "workloads.0.parallel.dp=2", "workloads.0.parallel.expert_parallel=2",
                               "workloads.0.parallel.micro_batches=8", "workloads.0.iterations=5"};
  const Json p0 = run_text(kStar, pp2)["training"];
  pp2.emplace_back("workloads.0.moe.alltoall_overlap=true");
  const Ran fast = run_ff(true, pp2), slow = run_ff(false, pp2);
  CHECK(fast.skipped);
  CHECK(fast.metrics["training"].dump() == slow.metrics["training"].dump());
  CHECK(fast.metrics["training"]["iteration_s_mean"].get<double>() < p0["iteration_s_mean"].get<double>());
  // Refused without expert parallelism, and on a dense model.
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.parallel.expert_parallel=1", "workloads.0.moe.alltoall_overlap=true"}),
                       doctest::Contains("workloads[0].moe.alltoall_overlap"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.model=tinyllama-1.1b", "workloads.0.parallel.expert_parallel=1",
                                        "workloads.0.moe.alltoall_overlap=true"}),
                       doctest::Contains("workloads[0].moe.alltoall_overlap"), ConfigError);
}

TEST_CASE("moe training: repeated iterations fast-forwarded give the same outputs as simulating each") {
  const std::vector<std::string> sets{"workloads.0.iterations=6", "workloads.0.parallel.expert_parallel=2"};
  const Ran fast = run_ff(true, sets), slow = run_ff(false, sets);
  CHECK(fast.skipped);
  CHECK_FALSE(slow.skipped);
  CHECK(fast.metrics["training"]["moe"].dump() == slow.metrics["training"]["moe"].dump());
  CHECK(fast.metrics["training"]["iteration_s"].dump() == slow.metrics["training"]["iteration_s"].dump());
  CHECK(fast.metrics["world"].dump() == slow.metrics["world"].dump());
}

TEST_CASE("moe training: pipeline stages, interleaving and a dense first layer keep every replica's exchange on the same op") {
  // Four layers (the first dense) over 2 stages x 2 chunks, 2 replicas in one EP group: every
  // exchange pairs the two replicas' same op, or the job would hang (a stall is an error).
  const std::vector<std::string> sets{
      "workloads.0.model={name: tiny-moe, layers: 4, hidden: 1024, heads: 8, kv_heads: 8, ffn: 4096, vocab: 8, max_context: 512, "
      "experts: 4, experts_per_token: 2, expert_ffn: 2048, dense_layers: 1}",
      "workloads.0.parallel={tp: 1, pp: 2, dp: 2, micro_batches: 4, expert_parallel: 2, virtual_stages: 2}", "workloads.0.iterations=5"};
  const Ran fast = run_ff(true, sets), slow = run_ff(false, sets);
  const Json& t = fast.metrics["training"];
  CHECK(t["iterations"] == 5);
  CHECK(t["moe"]["alltoall_ms"].get<double>() > 0);
  // Rank 0 holds virtual stages 0 (the dense layer) and 2, rank 1 stages 1 and 3: the busiest
  // rank's bytes are its two MoE layers' for each of 4 units, forward and backward; a token
  // reaches 2 (1 - (1/2)^2) = 1.5 devices when each holds two of the four experts.
  const double per_layer = 512 * 1.5 * 1024 * 2 * 2;
  CHECK(t["moe"]["alltoall_bytes_per_device"].get<double>() == doctest::Approx(per_layer * 2 * 4 * 2).epsilon(1e-12));
  CHECK(t.dump() == slow.metrics["training"].dump());
}

TEST_CASE("moe training: a device failing while its group's all-to-alls are on the fabric recovers, the same with or without the fast-forward") {
  // A failure about every 20 ms of a job whose iterations take about 2 ms: many land inside an
  // exchange, whose collectives then wait in the graveyard while their flows drain. Also with
  // the all-to-alls overlapped, where a failure can land while one op's are out beside the next.
  for (const bool overlap : {false, true}) {
    CAPTURE(overlap);
    const std::vector<std::string> sets{
        "workloads.0.iterations=200", "workloads.0.recovery={checkpoint_interval: 5ms, checkpoint_write: 100us, restart: 1ms}",
        "faults=[{name: gpus, kind: random, component: chip, ttf: {dist: exponential, mean: 20ms}, repair: {dist: fixed, mean: 1ms}}]",
        std::string("workloads.0.moe.alltoall_overlap=") + (overlap ? "true" : "false")};
    auto run = [&](bool ff) {
      const RunControl::FastForward f(ff);
      Scenario sc = load_scenario_text(kStar, "t.yaml", sets, sluice::testing::registry());
      Recorder rec;
      run_into(sc, rec, {});
      return rec.metrics();
    };
    const Json fast = run(true), slow = run(false);
    const Json& f = fast["training"]["faults"];
    CHECK(f["failures"].get<int>() > 50);
    CHECK(fast["training"]["iterations"] == 200);
    CHECK(fast["training"].dump() == slow["training"].dump());
  }
}

TEST_CASE("moe training: with context parallelism the EP groups are cut from the dp x cp ranks, context-parallel fastest") {
  // dp 2 x cp 2 on four devices: replica d's CP ranks are devices 2d and 2d + 1 (u = 2d + c).
  const std::vector<std::string> cp2{"workloads.0.parallel.dp=2", "workloads.0.parallel.cp=2"};
  auto with = [&](const std::string& yaml, std::vector<std::string> sets, std::initializer_list<const char*> more) {
    for (const char* m : more) sets.emplace_back(m);
    return run_text(yaml, sets)["training"];
  };
  // EP2 = cp: the groups are each replica's two CP ranks, {d0, d1} and {d2, d3}; each rank sends
  // its s / cp = 256 tokens, half of what dp 4's ranks send in the same groups.
  const Json flat = with(kStar, {"workloads.0.parallel.expert_parallel=2"}, {});
  const Json ep2 = with(kStar, cp2, {"workloads.0.parallel.expert_parallel=2"});
  CHECK(ep2["moe"]["alltoall_bytes_per_device"].get<double>() ==
        doctest::Approx(flat["moe"]["alltoall_bytes_per_device"].get<double>() / 2).epsilon(1e-12));
  CHECK(ep2["moe"]["alltoall_ms"].get<double>() == doctest::Approx(flat["moe"]["alltoall_ms"].get<double>() / 2).epsilon(1e-3));
  // Those pairs are the two servers of kTwoServersOfTwo, joined by 400 GB/s links: the exchanges
  // go four times as fast there (across replicas, {d0, d2}, they would cross the 100 GB/s switch).
  const Json near = with(sluice::testing::kTwoServersOfTwo + kStar.substr(kStar.find("workloads:")), cp2,
                         {"workloads.0.parallel.expert_parallel=2"});
  CHECK(near["moe"]["alltoall_ms"].get<double>() == doctest::Approx(ep2["moe"]["alltoall_ms"].get<double>() / 4).epsilon(1e-3));
  // The ranks holding the same experts are u = 0, 2 and u = 1, 3 ({d0, d2}, {d1, d3}): ZeRO-1
  // shards and reduces exactly as over dp 4 (dense over all four ranks, experts over pairs).
  const Json z1 = with(kStar, cp2, {"workloads.0.parallel.expert_parallel=2", "workloads.0.parallel.zero=1"});
  const Json z1flat = with(kStar, {"workloads.0.parallel.expert_parallel=2", "workloads.0.parallel.zero=1"}, {});
  CHECK(z1["moe"]["expert_dp_bytes_per_device"] == z1flat["moe"]["expert_dp_bytes_per_device"]);
  CHECK(z1["memory_per_device"]["optimizer_bytes"] == z1flat["memory_per_device"]["optimizer_bytes"]);
  CHECK(z1["dp_allreduce_ms"].get<double>() == doctest::Approx(z1flat["dp_allreduce_ms"].get<double>()).epsilon(1e-4));
  // On kTwoServersOfTwo the expert groups {d0, d2} and {d1, d3} cross the switch: their reduce
  // takes as long as on the star (the pairs {d0, d1}, {d2, d3} would take the fast links).
  const std::string two = sluice::testing::kTwoServersOfTwo + kStar.substr(kStar.find("workloads:"));
  const Json z1dense = with(two, {"workloads.0.parallel.expert_parallel=2", "workloads.0.parallel.zero=1"}, {});
  const Json z1near = with(two, cp2, {"workloads.0.parallel.expert_parallel=2", "workloads.0.parallel.zero=1"});
  CHECK(z1near["dp_allreduce_ms"].get<double>() == doctest::Approx(z1dense["dp_allreduce_ms"].get<double>()).epsilon(1e-4));
  // EP2 under cp 4 (one replica): two groups in the slot, {d0, d1} and {d2, d3}, both on the fast
  // links, each rank sending s / 4; the experts' holders {d0, d2}, {d1, d3} reduce over the switch.
  const std::vector<std::string> cp4{"workloads.0.parallel.dp=1", "workloads.0.parallel.cp=4", "workloads.0.parallel.expert_parallel=2"};
  const Json star4 = with(kStar, cp4, {}), near4 = with(two, cp4, {});
  CHECK(star4["moe"]["alltoall_bytes_per_device"].get<double>() ==
        doctest::Approx(flat["moe"]["alltoall_bytes_per_device"].get<double>() / 4).epsilon(1e-12));
  CHECK(star4["moe"]["alltoall_ms"].get<double>() == doctest::Approx(flat["moe"]["alltoall_ms"].get<double>() / 4).epsilon(1e-3));
  CHECK(near4["moe"]["alltoall_ms"].get<double>() == doctest::Approx(star4["moe"]["alltoall_ms"].get<double>() / 4).epsilon(1e-3));
  // EP4 = 2 cp: one group of both replicas' ranks, every expert on one device (nothing to reduce).
  const Json all = with(kStar, {}, {});
  const Json ep4 = with(kStar, cp2, {"workloads.0.parallel.expert_parallel=4"});
  CHECK(ep4["moe"]["alltoall_bytes_per_device"].get<double>() ==
        doctest::Approx(all["moe"]["alltoall_bytes_per_device"].get<double>() / 2).epsilon(1e-12));
  CHECK(ep4["moe"]["alltoall_ms"].get<double>() == doctest::Approx(all["moe"]["alltoall_ms"].get<double>() / 2).epsilon(1e-3));
  CHECK(ep4["moe"]["expert_dp_bytes_per_device"] == 0);
  // A group larger than the dp x cp ranks, and overlap with context parallelism, are refused at their keys.
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.parallel.dp=1", "workloads.0.parallel.cp=2", "workloads.0.parallel.expert_parallel=4"}),
                       doctest::Contains("dp x cp = 1 x 2"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kStar, {"workloads.0.parallel.dp=1", "workloads.0.parallel.cp=4", "workloads.0.parallel.expert_parallel=4",
                                        "workloads.0.moe.alltoall_overlap=true"}),
                       doctest::Contains("workloads[0].moe.alltoall_overlap"), ConfigError);
  // The same bytes with the fast-forward on and off, through GPU failures and restarts, with ZeRO-3.
  same_through_failures({{"dp: 4,", "dp: 2, cp: 2,"}, {"expert_parallel: 4}", "expert_parallel: 2, zero: 3}"}, {"iterations: 2", "iterations: 40"}});
}

TEST_CASE("moe training: each pipeline rank holds its own layers and their experts, the first the embedding, the last the LM head") {
  // tiny-moe by hand: a layer's attention 4h^2 and two norms 2h; a dense MLP 3h x 4096; a MoE
  // layer's router h x 4 and 4 routed experts of 3h x 2048; a vocabulary of 8 rows of h.
  const double h = kHidden, attn = 4 * h * h + 2 * h, dense = attn + 3 * h * 4096, routed = 4 * 3 * h * 2048;
  const double moe = attn + h * 4 + routed, table = 8 * h;
  const std::vector<std::string> dense1{"workloads.0.model.dense_layers=1", "workloads.0.parallel.expert_parallel=2"};
  auto with = [&](std::initializer_list<const char*> more) {
    std::vector<std::string> s = dense1;
    for (const char* m : more) s.emplace_back(m);
    return run_text(kStar, s)["training"];
  };
  // pp 1: the one rank holds both layers, half the experts (ep 2), the embedding and the head.
  const Json one = with({});
  CHECK(one["memory_per_device"]["weights_bytes"].get<double>() == doctest::Approx(2 * (dense + moe - routed / 2 + 2 * table + h)).epsilon(1e-12));
  // pp 2: rank 0 the dense layer and the embedding, two micro-batches' activations; rank 1 the
  // MoE layer with half its experts, the head and the final norm, one micro-batch's. Rank 1
  // holds more parameters, rank 0 more memory: memory is the fuller rank's.
  const Json two = with({"workloads.0.parallel.pp=2", "workloads.0.parallel.dp=2"});
  const double rank0 = dense + table, rank1 = moe - routed / 2 + table + h;
  REQUIRE(rank1 > rank0);
  CHECK(two["memory_per_device"]["weights_bytes"].get<double>() == doctest::Approx(2 * rank0).epsilon(1e-12));
  // (rank 0: one layer, two micro-batches in flight; pp 1's rank: two layers, one, and the
  // loss's softmax of its logits, s x vocab 8 x 4 bytes.)
  CHECK(two["memory_per_device"]["activations_bytes"].get<double>() ==
        doctest::Approx(one["memory_per_device"]["activations_bytes"].get<double>() - 512 * 8 * 4).epsilon(1e-12));
  // With one micro-batch each rank keeps one micro-batch of one layer: rank 1's parameters win.
  const Json m1 = with({"workloads.0.parallel.pp=2", "workloads.0.parallel.dp=2", "workloads.0.parallel.micro_batches=1"});
  CHECK(m1["memory_per_device"]["weights_bytes"].get<double>() == doctest::Approx(2 * rank1).epsilon(1e-12));
  CHECK(m1["memory_per_device"]["optimizer_bytes"].get<double>() == doctest::Approx(12 * rank1).epsilon(1e-12));
}

TEST_CASE("moe training: expert bytes and ZeRO's shard are the most over the ranks, not the rank with the most parameters") {
  // tiny-moe with its first layer dense over pp 2, ep = dp = 4: rank 0 holds the dense layer
  // (16.8M parameters, no expert), rank 1 the MoE layer (4.2M and a quarter of its 25.2M of
  // experts). Rank 0 holds more; rank 1's experts, unsharded (ep = dp), make the larger shard.
  training::TrainingConfig c;
  ModelSpec& m = c.model;
  m.name = "t", m.layers = 2, m.hidden = 1024, m.heads = 8, m.kv_heads = 8, m.head_dim = 128, m.ffn = 4096, m.vocab = 8;
  m.experts = 4, m.experts_per_token = 2, m.expert_ffn = 2048, m.dense_layers = 1;
  c.tp = 1, c.pp = 2, c.dp = 4, c.ep = 4;
  const double h = kHidden, routed = 4 * 3 * h * 2048;
  REQUIRE(training::heaviest_rank(c) == 0);
  CHECK(training::rank_parameters(c, 0).experts == 0);
  CHECK(training::expert_params_per_device(c) == doctest::Approx(routed / 4).epsilon(1e-12));
  const training::RankParameters r1 = training::rank_parameters(c, 1);
  CHECK(training::sharded_params_per_device(c) == doctest::Approx(r1.dense / 4 + r1.experts).epsilon(1e-12));
  CHECK(training::sharded_params_per_device(c) > training::sharded_params_per_device(training::rank_parameters(c, 0), c));
}
