// The parallelism of large training jobs beyond TP x PP x DP: ZeRO's sharded optimizer state
// and gradients (memory and traffic), and interleaved 1F1B's virtual stages, checked by hand.
#include <doctest/doctest.h>

#include "test_support.h"

#include "config/error.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"
#include "workloads/training/training.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// Four devices on one switch, each link 100 GB/s with no latency: a 4-way data-parallel ring
// crosses each device's link once per step.
const std::string kStar = std::string(sluice::testing::kFourDeviceStar) + R"(workloads:
  - {name: j, kind: training, sequence: 512, iterations: 2, cost_tables: none,
     model: {name: flat, layers: 4, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: 512},
     parallel: {tp: 1, pp: 1, dp: 4, micro_batches: 2, zero: )";

// The same model at TP2 x DP2 on two servers of two devices.
const char* const kTwoByTwoJob = R"(workloads:
  - {name: j, kind: training, sequence: 512, iterations: 1, cost_tables: none,
     model: {name: flat, layers: 4, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: 512},
     parallel: {tp: 2, pp: 1, dp: 2, micro_batches: 2}}
)";

Json run_zero(int zero) { return run_text(std::string(kStar) + std::to_string(zero) + "}}\n")["training"]; }

}  // namespace

TEST_CASE("ZeRO shards the optimizer state (stage 1) and the gradients (stage 2) over the data-parallel replicas") {
  const Json z0 = run_zero(0), z1 = run_zero(1), z2 = run_zero(2);
  const auto mem = [](const Json& t, const char* k) { return t["memory_per_device"][k].get<double>(); };
  // flat: 4 layers of 4·h² (attention) + 3·h·ffn (a gated MLP, the default) parameters, plus
  // 2·8·h (embeddings and head).
  const double h = 4096, P = 4 * (4 * h * h + 3 * h * 16384) + 2 * 8 * h;
  CHECK(mem(z0, "weights_bytes") == doctest::Approx(2 * P).epsilon(0.01));
  CHECK(mem(z0, "optimizer_bytes") == doctest::Approx(12 * P).epsilon(0.01));
  CHECK(mem(z1, "optimizer_bytes") == doctest::Approx(mem(z0, "optimizer_bytes") / 4));
  CHECK(mem(z1, "gradients_bytes") == doctest::Approx(mem(z0, "gradients_bytes")));
  CHECK(mem(z2, "gradients_bytes") == doctest::Approx(mem(z0, "gradients_bytes") / 4));
  CHECK(mem(z2, "weights_bytes") == doctest::Approx(mem(z0, "weights_bytes")));
  CHECK(z1["job"]["zero"] == 1);
  // Adam's step streams a quarter of the state.
  CHECK(z1["optimizer_ms"].get<double>() == doctest::Approx(z0["optimizer_ms"].get<double>() / 4).epsilon(1e-3));
}

TEST_CASE("activation memory: Korthikanti's accounting with FlashAttention's kernels, by the MLP's kind and width, by hand") {
  // flat: 4 layers, h 4096, 32 heads, a gated MLP of 16384; one micro-batch of 512 tokens in
  // flight (1F1B, one stage). Per layer: attention 11sbh + the log-sum-exp 4asb (no s x s scores),
  // layer norms 4sbh, the MLP's input and mask 3sbh and, gated, 6sbf (plain: 4sbf). The one
  // rank is the last: the loss keeps the fp32 softmax of one micro-batch's logits, s x vocab x 4.
  const double s = 512, h = 4096, a = 32, f = 16384, sbh = s * h, loss = s * 8 * 4;
  const auto act = [](const Json& t) { return t["memory_per_device"]["activations_bytes"].get<double>(); };
  CHECK(act(run_zero(0)) == doctest::Approx(4 * (18 * sbh + 6 * s * f + 4 * a * s) + loss).epsilon(1e-12));
  const std::string plain = std::string(kStar) + "0}}\n";
  const Json p = run_text(plain, {"workloads.0.model.gated_ffn=false", "workloads.0.model.ffn=16384"})["training"];
  CHECK(act(p) == doctest::Approx(4 * (18 * sbh + 4 * s * f + 4 * a * s) + loss).epsilon(1e-12));
  // Grouped-query attention: 8 key/value heads of 128 keep a quarter of the keys and values
  // (2sb x 1024 each instead of 2sbh): the attention's 11sbh becomes 7sbh + 2 x 2sb x 1024.
  const Json g = run_text(plain, {"workloads.0.model.kv_heads=8"})["training"];
  CHECK(act(g) == doctest::Approx(4 * (7 * sbh + 4 * s * 1024 + 4 * sbh + 3 * sbh + 6 * s * f + 4 * a * s) + loss).epsilon(1e-12));
  // Full recomputation keeps each layer's input, 2sbh.
  CHECK(act(run_text(plain, {"workloads.0.recompute=true"})["training"]) == doctest::Approx(4 * 2 * sbh + loss).epsilon(1e-12));
  // Tensor parallelism (two devices a server) splits all of it, the vocabulary too.
  CHECK(act(run_text(sluice::testing::kTwoServersOfTwo + kTwoByTwoJob)["training"]) ==
        doctest::Approx((4 * (18 * sbh + 6 * s * f + 4 * a * s) + loss) / 2).epsilon(1e-12));
  // GPipe keeps every micro-batch's activations and softmax until the backwards (two here).
  const Json gp = run_text(std::string(kStar) + "0, schedule: gpipe}}\n")["training"];
  CHECK(act(gp) == doctest::Approx(2 * (4 * (18 * sbh + 6 * s * f + 4 * a * s) + loss)).epsilon(1e-12));
  // Without dropout (dropout: false) neither output's one-byte mask is kept: sbh less in the
  // attention and in the MLP, each layer; the job says so.
  const Json nd = run_text(plain, {"workloads.0.dropout=false"})["training"];
  CHECK(act(nd) == doctest::Approx(4 * (16 * sbh + 6 * s * f + 4 * a * s) + loss).epsilon(1e-12));
  CHECK(nd["job"]["dropout"] == false);
  CHECK(p["job"]["dropout"] == true);
  // The same two masks a layer on an MoE model (four experts, two a token): its MLP's mask is
  // its MoE block's input mask.
  const std::vector<std::string> moe{"workloads.0.model.experts=4", "workloads.0.model.experts_per_token=2", "workloads.0.model.expert_ffn=2048"};
  auto with = [&](const char* d) {
    auto sets = moe;
    sets.push_back(std::string("workloads.0.dropout=") + d);
    return act(run_text(plain, sets)["training"]);
  };
  CHECK(with("true") - with("false") == doctest::Approx(4 * 2 * sbh).epsilon(1e-12));
  // The model's default: a catalog-style model without dropout keeps none unless the job says.
  CHECK(act(run_text(plain, {"workloads.0.model.dropout=false"})["training"]) == act(nd));
  CHECK(act(run_text(plain, {"workloads.0.model.dropout=false", "workloads.0.dropout=true"})["training"]) == act(run_text(plain)["training"]));
}

TEST_CASE("ZeRO's reduce-scatter and all-gather move what the ring all-reduce moves: the iteration differs by the optimizer's step") {
  const Json z0 = run_zero(0), z1 = run_zero(1);
  // The gradients' all-reduce, 2·3/4·S over each 100 GB/s link, against the reduce-scatter's
  // 3/4·S before the optimizer and the all-gather's 3/4·S after it.
  const double S = z0["memory_per_device"]["weights_bytes"].get<double>();
  const double ring_ms = 2 * 0.75 * S / 100e9 * 1e3;
  CHECK(z0["dp_allreduce_ms"].get<double>() == doctest::Approx(ring_ms).epsilon(1e-3));
  CHECK(z1["dp_allreduce_ms"].get<double>() == doctest::Approx(ring_ms / 2).epsilon(1e-3));
  const double it0 = z0["iteration_s_mean"].get<double>() * 1e3, it1 = z1["iteration_s_mean"].get<double>() * 1e3;
  CHECK(it1 - it0 == doctest::Approx(z1["optimizer_ms"].get<double>() - z0["optimizer_ms"].get<double>()).epsilon(1e-3));
  CHECK(it1 < it0);
}

TEST_CASE("a ZeRO stage past 3 is refused where it is declared") {
  CHECK_THROWS_WITH_AS(run_zero(4), doctest::Contains("parallel.zero"), std::exception);
}

namespace {

// Equal stages and free transfers (links of 1 PB/s on one switch): the pipeline's own bubble.
Json run_pipeline(int pp, int v, int m, const std::string& extra = "") {
  std::string y = R"(name: t
cluster:
  topology:
    kind: explicit
    nodes:
      - {name: s, kind: switch}
)";
  std::string links;
  for (int i = 0; i < pp; ++i) {
    y += "      - {name: d" + std::to_string(i) + ", kind: device, group: " + std::to_string(i) + "}\n";
    links += "      - {a: d" + std::to_string(i) + ", b: s, bandwidth: 1000000GB/s, latency: 0ns}\n";
  }
  y += "    links:\n" + links + "  hardware: h200\nworkloads:\n";
  y += "  - {name: j, kind: training, sequence: 512, iterations: 1, cost_tables: none, " + extra + "\n"
       "     model: {name: flat, layers: 16, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: 512},\n"
       "     parallel: {tp: 1, pp: " + std::to_string(pp) + ", dp: 1, micro_batches: " + std::to_string(m) +
       ", virtual_stages: " + std::to_string(v) + "}}\n";
  return run_text(y)["training"];
}

}  // namespace

TEST_CASE("interleaved 1F1B: the bubble is (K-1)/(v m + K-1) with equal stages and free transfers") {
  // K = 4 ranks, m = 8 micro-batches: 3/11 in plain 1F1B; 2 chunks a rank halve the fill and
  // drain (3/19), 4 chunks quarter it (3/35). The flat model's LM head (vocab 8) is negligible.
  for (const auto& [v, expect] : {std::pair{1, 3.0 / 11}, {2, 3.0 / 19}, {4, 3.0 / 35}}) {
    CAPTURE(v);
    const Json t = run_pipeline(4, v, 8);
    CHECK(t["bubble_textbook"].get<double>() == doctest::Approx(expect));
    CHECK(t["bubble_fraction"].get<double>() == doctest::Approx(expect).epsilon(5e-3));
    // Every rank does the same work whatever v: the iteration is that work over (1 - bubble).
    const double work_ms = 8 * (t["per_micro_batch_ms"]["forward"].get<double>() + t["per_micro_batch_ms"]["backward"].get<double>());
    CHECK(t["iteration_s_mean"].get<double>() * 1e3 == doctest::Approx(work_ms / (1 - expect) + t["optimizer_ms"].get<double>()).epsilon(5e-3));
  }
}

TEST_CASE("interleaved 1F1B: a shape that cannot interleave is refused at parallel.virtual_stages") {
  CHECK_THROWS_WITH_AS(run_pipeline(4, 2, 6), doctest::Contains("virtual_stages"), std::exception);   // 6 micro-batches, groups of 4
  CHECK_THROWS_WITH_AS(run_pipeline(4, 8, 8), doctest::Contains("virtual_stages"), std::exception);   // 32 stages, 16 layers
  CHECK_THROWS_WITH_AS(run_pipeline(1, 2, 8), doctest::Contains("virtual_stages"), std::exception);   // no pipeline
  // Token slicing runs GPipe-style, so it is refused with interleaving too (at parallel.schedule).
  CHECK_THROWS_WITH_AS(run_pipeline(4, 2, 8, "slicing: {policy: uniform, slices: 2},"), doctest::Contains("gpipe"), std::exception);
}

TEST_CASE("training: a pipeline rank holds its own layers, the first the embedding, the last the LM head and final norm") {
  training::TrainingConfig c;
  ModelSpec& m = c.model;
  m.name = "t", m.layers = 6, m.hidden = 256, m.heads = 4, m.kv_heads = 4, m.head_dim = 64, m.ffn = 1024, m.vocab = 32000;
  const double h = 256, layer = 4 * h * h + 3 * h * 1024 + 2 * h, table = 32000 * h;
  c.tp = 2, c.pp = 4, c.dp = 1;
  // Megatron's split of 6 layers over 4 ranks: 2, 2, 1, 1; everything over tp 2.
  CHECK(training::rank_parameters(c, 0).total() == doctest::Approx((2 * layer + table) / 2).epsilon(1e-12));
  CHECK(training::rank_parameters(c, 1).total() == doctest::Approx(2 * layer / 2).epsilon(1e-12));
  CHECK(training::rank_parameters(c, 2).total() == doctest::Approx(layer / 2).epsilon(1e-12));
  CHECK(training::rank_parameters(c, 3).total() == doctest::Approx((layer + table + h) / 2).epsilon(1e-12));
  CHECK(training::heaviest_rank(c) == 0);
  CHECK(training::params_per_device(c) == training::rank_parameters(c, 0).total());
  CHECK(training::rank_parameters(c, 0).experts == 0);
  // Together the ranks hold the model once; a tied embedding twice when the first and last
  // ranks differ (the last keeps a copy for the logits), once on one rank.
  auto sum = [&] {
    double t = 0;
    for (int r = 0; r < c.pp; ++r) t += training::rank_parameters(c, r).total() * c.tp;
    return t;
  };
  CHECK(sum() == doctest::Approx(m.parameters()).epsilon(1e-12));
  m.tied_embeddings = true;
  CHECK(sum() == doctest::Approx(m.parameters() + table).epsilon(1e-12));
  c.pp = 1;
  CHECK(sum() == doctest::Approx(m.parameters()).epsilon(1e-12));
  // Interleaved, 12 layers over 4 ranks of 2 chunks (8 stages: 2, 2, 2, 2, 1, 1, 1, 1): rank 0
  // holds stages 0 and 4, three layers and the embedding; rank 3 stages 3 and 7 and the head.
  m.tied_embeddings = false, m.layers = 12, c.pp = 4, c.virtual_stages = 2;
  CHECK(training::rank_parameters(c, 0).total() == doctest::Approx((3 * layer + table) / 2).epsilon(1e-12));
  CHECK(training::rank_parameters(c, 3).total() == doctest::Approx((3 * layer + table + h) / 2).epsilon(1e-12));
  CHECK(training::heaviest_rank(c) == 3);
  CHECK(sum() == doctest::Approx(m.parameters()).epsilon(1e-12));
}

TEST_CASE("training: the pipeline's end stages take the layers a job gives them, the stages between split the rest") {
  // 61 layers over 16 stages: evenly, 13 stages of 4 and 3 of 3; with one on the last, 60 over 15.
  auto counts = [](int first, int last) {
    std::vector<int> n;
    int next = 0;
    for (int s = 0; s < 16; ++s) {
      const LayerRange r = pipeline_stage_layers(61, 16, s, first, last);
      CHECK(r.first == next);  // contiguous, in order
      next += r.count;
      n.push_back(r.count);
    }
    CHECK(next == 61);
    return n;
  };
  CHECK(counts(0, 0) == std::vector<int>{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 3, 3});
  CHECK(counts(0, 1) == std::vector<int>{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1});
  CHECK(counts(2, 3) == std::vector<int>{2, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3});
  CHECK(counts(3, 3) == std::vector<int>{3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 3});  // 55 over 14: 13 of 4, 1 of 3
  CHECK(pipeline_stage_layers(61, 16, 15, 0, 1).lm_head);
  CHECK(pipeline_stage_layers(61, 16, 0, 2, 3).embedding);
  CHECK_THROWS(pipeline_stage_layers(61, 16, 0, 0, 47));  // 14 left for 15 stages
  CHECK_THROWS(pipeline_stage_layers(8, 2, 0, 3, 4));     // two stages: the ends are all of it
  CHECK(pipeline_stage_layers(8, 2, 1, 3, 5).count == 5);

  // A job's memory and report follow the split: 4 layers over pp 2 with 1 on the last.
  std::string y = kStar + "0}}\n";
  y.replace(y.find("pp: 1, dp: 4"), 12, "pp: 2, dp: 2, last_stage_layers: 1");
  const Json t = run_text(y)["training"];
  CHECK(t["job"]["stage_layers"] == Json::array({3, 1}));
  std::string even = kStar + "0}}\n";
  even.replace(even.find("pp: 1, dp: 4"), 12, "pp: 2, dp: 2");
  const Json e = run_text(even)["training"];
  CHECK(e["job"]["stage_layers"] == Json::array({2, 2}));
  // Rank 0 now holds three layers: 3/2 of the even split's weights (the vocabulary of 8 aside).
  CHECK(t["memory_per_device"]["weights_bytes"].get<double>() ==
        doctest::Approx(1.5 * e["memory_per_device"]["weights_bytes"].get<double>()).epsilon(1e-4));
  CHECK(t["iteration_s_mean"].get<double>() > e["iteration_s_mean"].get<double>());
  // Refused at its key: no layer left for a stage between, a single stage, interleaving.
  std::string bad = kStar + "0}}\n";
  bad.replace(bad.find("pp: 1, dp: 4"), 12, "pp: 2, dp: 2, first_stage_layers: 1, last_stage_layers: 1");
  CHECK_THROWS_WITH_AS(run_text(bad), doctest::Contains("last_stage_layers"), ConfigError);
  std::string one = kStar + "0}}\n";
  one.replace(one.find("dp: 4"), 5, "dp: 4, first_stage_layers: 2");
  CHECK_THROWS_WITH_AS(run_text(one), doctest::Contains("first_stage_layers"), ConfigError);
}
