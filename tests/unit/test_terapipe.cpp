// Token-level pipelines: per-stage costing (Megatron's split), the cost of a slice after a
// prefix, TeraPipe's slicing DP, and sliced training pipelines.
#include <doctest/doctest.h>

#include "test_support.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "hardware/cost_model.h"
#include "network/generators.h"
#include "network/routing.h"
#include "run/runner.h"
#include "workloads/serving/serving_sim.h"
#include "world/world_study.h"
#include "workloads/training/terapipe.h"

using namespace sluice;
using namespace sluice::training;
using sluice::testing::registry;
using sluice::testing::run_text;

namespace {

// The best slicing by enumerating every one (2^(N-1) of them for N units of g tokens).
SlicePlan brute_force(int S, int g, int K, const SliceCostFn& t) {
  const int N = (S + g - 1) / g;
  SlicePlan best;
  best.latency_ns = 1e300;
  for (long mask = 0; mask < (1L << (N - 1)); ++mask) {
    std::vector<int> lengths;
    int prev = 0;
    for (int u = 1; u <= N; ++u)
      if (u == N || (mask >> (u - 1) & 1)) {
        lengths.push_back(std::min(S, u * g) - prev);
        prev = std::min(S, u * g);
      }
    const SlicePlan p = evaluate_slices(lengths, K, t);
    if (p.latency_ns < best.latency_ns) best = p;
  }
  return best;
}

double best_uniform(int S, int g, int K, const SliceCostFn& t) {
  double best = 1e300;
  for (int k = 1; k <= (S + g - 1) / g; ++k) best = std::min(best, evaluate_slices(uniform_slices(S, k, g), K, t).latency_ns);
  return best;
}

// Eight devices, each its own server, on one switch with links of 1 PB/s: transfers are free.
std::string free_fabric() {
  std::string s = "  topology:\n    kind: explicit\n    nodes:\n      - {name: sw, kind: switch}\n";
  for (int i = 0; i < 8; ++i) s += "      - {name: d" + std::to_string(i) + ", kind: device, group: " + std::to_string(i) + "}\n";
  s += "    links:\n";
  for (int i = 0; i < 8; ++i) s += "      - {a: d" + std::to_string(i) + ", b: sw, bandwidth: 1000000GB/s, latency: 0ns}\n";
  return s;
}

std::string sliced_job(const std::string& slicing, int pp = 8, int micro_batches = 1) {
  return "name: t\ncluster:\n" + free_fabric() +
         "  hardware: h200\nworkloads:\n"
         "  - {name: j, kind: training, sequence: 4096, iterations: 1, cost_tables: none,\n"
         "     model: {name: flat, layers: 16, hidden: 2048, heads: 16, kv_heads: 16, ffn: 8192, vocab: 8, max_context: 4096},\n"
         "     parallel: {tp: 1, pp: " + std::to_string(pp) + ", dp: 1, micro_batches: " + std::to_string(micro_batches) +
         ", schedule: gpipe},\n     slicing: " + slicing + "}\n";
}

}  // namespace

TEST_CASE("terapipe stages: Megatron's split spreads the remainder over the first stages") {
  int first = 0, total = 0;
  for (int s = 0; s < 6; ++s) {
    const LayerRange r = pipeline_stage_layers(40, 6, s);
    CHECK(r.first == first);
    CHECK(r.count == (s < 4 ? 7 : 6));  // 40 = 4 x 7 + 2 x 6
    CHECK(r.embedding == (s == 0));
    CHECK(r.lm_head == (s == 5));
    CHECK(r.send == (s < 5));
    first += r.count;
    total += r.count;
  }
  CHECK(total == 40);
  CHECK(pipeline_stage_layers(96, 48, 47).count == 2);
  CHECK_THROWS(pipeline_stage_layers(4, 8, 0));
}

TEST_CASE("terapipe stages: each stage costed as its own layers, embedding first, LM head last") {
  const HardwareSpec hw = load_hardware("h200");
  const ModelSpec m = load_model("llama3-8b");  // 32 layers
  const std::vector<SeqWork> batch{SeqWork{512, 0, true}, SeqWork{1, 700, true}};
  // pp = 1: the one stage is the whole model, exactly the iteration.
  const CostModel one(hw, m, CostOptions{1, 1, default_tables_dir(hw)});
  CHECK(one.stage_ns(batch, 0) == doctest::Approx(one.iteration_ns(batch)).epsilon(1e-12));
  // pp = 3: 11, 11, 10 layers; the last carries the LM head, the first the embedding.
  const CostModel three(hw, m, CostOptions{1, 3, default_tables_dir(hw)});
  CHECK(three.stage_range(0).count == 11);
  CHECK(three.stage_range(2).count == 10);
  const IterationCost s0 = three.stage_iteration(batch, 0), s1 = three.stage_iteration(batch, 1), s2 = three.stage_iteration(batch, 2);
  auto has = [](const IterationCost& it, const std::string& op) {
    return std::any_of(it.ops.begin(), it.ops.end(), [&](const OpCost& o) { return o.op == op; });
  };
  CHECK(has(s0, "embedding"));
  CHECK(!has(s1, "embedding"));
  CHECK(!has(s0, "lm_head"));
  CHECK(!has(s1, "lm_head"));
  CHECK(has(s2, "lm_head"));
  CHECK(s0.total_ns > s1.total_ns);  // the same 11 layers plus the embedding
  CHECK(s0.total_ns < s1.total_ns * 1.01);
  // The hot path agrees with the breakdown; the legacy costed stage (ceil layers + LM head) bounds them all.
  for (int s = 0; s < 3; ++s) {
    CHECK(three.stage_ns(batch, s) == doctest::Approx(three.stage_iteration(batch, s).total_ns).epsilon(1e-9));
    CHECK(three.stage_ns(batch, s) <= three.iteration_ns(batch) * (1 + 1e-12));
  }
  // The layers add up: three stages' decoder work is the whole model's once.
  CostOptions o1{1, 1, ""}, o4{1, 4, ""};
  o1.comm_on_fabric = o4.comm_on_fabric = true;  // no hand-off in the stage times
  const CostModel none(hw, m, o1);
  const CostModel split(hw, m, o4);
  const std::vector<SeqWork> pre{SeqWork{1024, 0, false}};
  double sum = 0;
  for (int s = 0; s < 4; ++s) sum += split.stage_ns(pre, s);
  CHECK(sum == doctest::Approx(none.iteration_ns(pre)).epsilon(1e-3));
}

TEST_CASE("terapipe slice cost: attention over the prefix makes a later slice dearer, and slices add up") {
  const HardwareSpec hw = load_hardware("h200");
  for (const std::string& dir : {default_tables_dir(hw), std::string()}) {
    CAPTURE(dir);
    const CostModel cm(hw, load_model("llama3-8b"), CostOptions{1, 2, dir});
    std::vector<double> at0(2), at4k(2), at8k(2);
    cm.slice_stage_ns(1, 512, 0, true, at0);
    cm.slice_stage_ns(1, 512, 4096, true, at4k);
    cm.slice_stage_ns(1, 512, 8192, true, at8k);
    for (int s = 0; s < 2; ++s) {
      CHECK(at4k[static_cast<size_t>(s)] > at0[static_cast<size_t>(s)]);
      CHECK(at8k[static_cast<size_t>(s)] > at4k[static_cast<size_t>(s)]);
    }
    CHECK(at0[1] > at0[0]);  // the LM head over all 512 rows on the last stage
    // The per-stage figures are the breakdowns' totals (plus the LM head over every row on the last).
    const IterationCost b = cm.slice(1, 512, 4096, cm.stage_range(0));
    CHECK(at4k[0] == doctest::Approx(b.total_ns).epsilon(1e-9));
    CHECK(at4k[1] == doctest::Approx(cm.slice(1, 512, 4096, cm.stage_range(1)).total_ns + cm.lm_head_ns(512)).epsilon(1e-9));
  }
  // `sluice cost --slices` (sliced_prefill) is the sum of slice() over the costed stage.
  const CostModel cm(hw, load_model("llama3-8b"), CostOptions{1, 1, default_tables_dir(hw)});
  double sum = 0;
  for (int k = 0; k < 4; ++k) sum += cm.slice(1, 1024, k * 1024, LayerRange{0, 32, true, true, false}).total_ns;
  CHECK(cm.sliced_prefill(1, 4096, 4).total_ns == doctest::Approx(sum).epsilon(1e-12));
}

TEST_CASE("terapipe DP: a hand-checked case beats every uniform slicing and its slices shrink") {
  // t(l, c) = 4 + l + l c / 16 (a fixed cost, a linear one, causal attention over the prefix),
  // 64 tokens in steps of 8 over K = 8 stages. By hand: [32, 8, 8, 8, 8] costs 36 + 28 + 32 +
  // 36 + 40 = 172 with max 40, T = 172 + 7 x 40 = 452; the best uniform one, [16, 16, 8, 8, 8,
  // 8], costs 20 + 36 + 28 + 32 + 36 + 40 = 192, T = 192 + 280 = 472; one slice: 68 x 8 = 544.
  const SliceCostFn t = [](int l, int c) { return 4.0 + l + l * c / 16.0; };
  for (double gap : {0.0, 1e-3}) {
    CAPTURE(gap);
    TeraPipeOptions o;
    o.candidate_gap = gap;
    const SlicePlan p = terapipe_slices(64, 8, t, o);
    CHECK(p.lengths == std::vector<int>{32, 8, 8, 8, 8});
    CHECK(p.sum_ns == doctest::Approx(172));
    CHECK(p.max_ns == doctest::Approx(40));
    CHECK(p.latency_ns == doctest::Approx(452));
  }
  CHECK(best_uniform(64, 8, 8, t) == doctest::Approx(472));
  CHECK(evaluate_slices(uniform_slices(64, 6, 8), 8, t).latency_ns == doctest::Approx(472));
  CHECK(evaluate_slices({64}, 8, t).latency_ns == doctest::Approx(544));
}

TEST_CASE("terapipe DP: optimal against brute force, slices non-increasing under causal attention") {
  for (int K : {2, 4, 8, 16})
    for (double a : {1.0, 8.0, 40.0})
      for (double d : {8.0, 64.0}) {
        CAPTURE(K);
        CAPTURE(a);
        CAPTURE(d);
        const SliceCostFn t = [&](int l, int c) { return a + l + l * c / d; };
        const int S = 92;  // 12 units, the last of 4 tokens
        TeraPipeOptions exact;
        exact.candidate_gap = 0;
        const SlicePlan dp = terapipe_slices(S, K, t, exact);
        const SlicePlan bf = brute_force(S, 8, K, t);
        CHECK(dp.latency_ns == doctest::Approx(bf.latency_ns).epsilon(1e-12));
        CHECK(std::accumulate(dp.lengths.begin(), dp.lengths.end(), 0) == S);
        CHECK(dp.latency_ns <= best_uniform(S, 8, K, t) + 1e-9);
        // With the default gap: within its factor of the optimum.
        CHECK(terapipe_slices(S, K, t).latency_ns <= bf.latency_ns * (1 + 1e-3) + 1e-9);
        // Causal attention: a later slice attends to more keys, so the DP never lengthens
        // one (the last may end the sequence short of a whole granule).
        for (size_t i = 0; i + 2 < dp.lengths.size(); ++i) CHECK(dp.lengths[i] >= dp.lengths[i + 1]);
      }
  CHECK_THROWS(terapipe_slices(0, 4, [](int, int) { return 1.0; }));
  CHECK_THROWS(uniform_slices(64, 9, 8));
  CHECK(uniform_slices(60, 3, 8) == std::vector<int>{24, 24, 12});  // 8 units (the last of 4 tokens) as 3 + 3 + 2
}

TEST_CASE("terapipe training: sliced GPipe bubbles match the formula with free transfers, and slicing shortens the pass") {
  const Json none = run_text(sliced_job("{policy: none}"));
  const Json uni = run_text(sliced_job("{policy: uniform, slices: 8}"));
  const Json dp = run_text(sliced_job("{policy: terapipe}"));
  const auto it = [](const Json& m) { return m["training"]["iteration_s_mean"].get<double>(); };
  // One micro-batch through 8 stages: unsliced, 7 of 8 stage-times are bubble.
  CHECK(none["training"]["bubble_fraction"].get<double>() == doctest::Approx(7.0 / 8).epsilon(1e-2));
  CHECK(uni["training"]["slicing"]["slices"] == 8);
  CHECK(it(uni) < 0.5 * it(none));
  CHECK(it(dp) <= it(uni) * 1.001);
  for (const Json* m : {&none, &uni, &dp}) {
    const Json& t = (*m)["training"];
    CAPTURE(t["slicing"].dump());
    // Stages of equal layers, transfers free: the pass is the formula's T, the bubble its (K-1) max t / T.
    CHECK(t["bubble_fraction"].get<double>() == doctest::Approx(t["slicing"]["bubble_model"].get<double>()).epsilon(2e-2));
    CHECK(it(*m) * 1e3 == doctest::Approx(t["slicing"]["model_pass_ms"].get<double>() + t["optimizer_ms"].get<double>()).epsilon(2e-2));
  }
  // The DP's slices shrink along the sequence (attention over a longer prefix).
  const Json& tok = dp["training"]["slicing"]["tokens"];
  REQUIRE(tok.size() >= 2);
  CHECK(tok.front().get<int>() > tok.back().get<int>());
  CHECK(dp["training"]["slicing"]["model_speedup"].get<double>() > 1.5);
}

TEST_CASE("terapipe training: the slicing section's keys reach the job's slicing config") {
  const Json uni = run_text(sliced_job("{policy: uniform, slices: 4, granularity: 64}"))["training"]["slicing"];
  CAPTURE(uni.dump());
  CHECK(uni["policy"] == "uniform");
  CHECK(uni["slices"] == 4);
  CHECK(uni["granularity"] == 64);
  CHECK(uni["tokens"] == Json::array({1024, 1024, 1024, 1024}));
  const Json def = run_text(sliced_job("{policy: terapipe, granularity: 128}"))["training"]["slicing"];
  const Json every = run_text(sliced_job("{policy: terapipe, granularity: 128, candidate_gap: 0}"))["training"]["slicing"];
  CAPTURE(def.dump());
  CAPTURE(every.dump());
  CHECK(def["policy"] == "terapipe");
  CHECK(def["granularity"] == 128);
  for (const Json& t : def["tokens"]) CHECK(t.get<int>() % 128 == 0);
  // candidate_gap 0: a DP for every t_max candidate; the default gap shares one among near ones.
  CHECK(every["dp_evaluated"].get<long>() > def["dp_evaluated"].get<long>());
}

TEST_CASE("terapipe training: slicing needs GPipe, uniform slices fit the sequence, terapipe chooses its own") {
  CHECK_THROWS_WITH_AS(run_text(sliced_job("{policy: uniform, slices: 4}"), {"workloads.0.parallel.schedule=1f1b"}),
                       doctest::Contains("GPipe"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(sliced_job("{policy: uniform, slices: 600}")), doctest::Contains("at most 512 slices"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(sliced_job("{policy: terapipe, slices: 4}")), doctest::Contains("chooses its own"), ConfigError);
  CHECK_THROWS_AS(run_text(sliced_job("{policy: dp}")), ConfigError);
}

TEST_CASE("terapipe cluster: a p3.16xlarge's GPUs share one 25 Gb/s NIC, V100s have 16 GB") {
  const net::Topology t = net::load_topology_by_name("p3-16xlarge-48", registry());
  CHECK(t.devices().size() == 384);
  int nics = 0;
  for (int l = 0; l < t.link_count(); ++l)
    if (t.link(l).label == "nic") {
      ++nics;
      CHECK(t.link(l).bandwidth_Bps == doctest::Approx(25e9 / 8));
    }
  CHECK(nics == 2 * 48);  // one full-duplex NIC per server
  // GPU 0 of server 0 to GPU 0 of server 1 and GPU 7 to GPU 7 leave through the same NIC link.
  net::Router r(t);
  const auto a = r.route(t.devices()[0], t.devices()[8]), b = r.route(t.devices()[7], t.devices()[15]);
  int shared = 0;
  for (int x : a)
    for (int y : b) shared += x == y && t.link(x).label == "nic" ? 1 : 0;
  CHECK(shared == 2);  // out of server 0, into server 1
  const HardwareSpec v100 = load_hardware("v100-16gb");
  CHECK(v100.peak_bf16_flops == doctest::Approx(125e12));
  CHECK(v100.hbm_bandwidth_Bps == doctest::Approx(900e9));
  CHECK(v100.interconnect_Bps == doctest::Approx(150e9));
  CHECK(v100.hbm_bytes < 16.0 * (1 << 30));
  // The 175B setting fits 16 GB per device with 8 x 48-way model parallelism and no recompute.
  const Json m = run_text("name: t\ncluster: {topology: p3-16xlarge-48, hardware: v100-16gb}\nworkloads:\n"
                          "  - {name: j, kind: training, model: gpt3-175b, sequence: 2048, iterations: 1,\n"
                          "     parallel: {tp: 8, pp: 48, micro_batches: 2, schedule: gpipe}}\n");
  CHECK(m["training"]["memory_per_device"]["total_bytes"].get<double>() < v100.hbm_bytes);
}

TEST_CASE("terapipe trace: one sliced iteration has a track per stage and every slice's passes on each") {
  Scenario sc = load_scenario_text(sliced_job("{policy: uniform, slices: 4}, trace: true"), "t.yaml", {}, registry());
  Recorder rec;
  run_into(sc, rec, {});
  const Json t = Json::parse(rec.trace().dump());
  const Json& ev = t.is_object() ? t["traceEvents"] : t;
  std::vector<int> per_stage(8, 0);
  int named = 0;
  for (const auto& e : ev) {
    if (e["ph"] == "M" && e.value("name", "") == "thread_name") ++named;
    if (e["ph"] != "X") continue;
    const int tid = e["tid"].get<int>();
    REQUIRE(tid >= 0);
    REQUIRE(tid < 8);
    ++per_stage[static_cast<size_t>(tid)];
  }
  CHECK(named == 8);
  for (int n : per_stage) CHECK(n == 2 * 4);  // F0.0..F0.3 and B0.3..B0.0
}

namespace {

// One prompt of `prompt` tokens (one output token) on a pp-stage deployment of TinyLlama
// (22 layers: pp 2) with free last-mile costs; `slicing` is deployment.prefill_slicing.
serving::ServingConfig one_prompt(int prompt, const std::string& slicing) {
  const Node n = load_yaml_string("model: {catalog: tinyllama-1.1b, max_context: 8192}\n"
                                  "deployment: {pipeline_parallel: 2, cost_tables: none, prefill_slicing: " + slicing + "}\n"
                                  "workload: {kind: llmperf, requests: 1, input_tokens: {mean: " + std::to_string(prompt) +
                                  ", sd: 0}, output_tokens: {mean: 1, sd: 0}, arrival: {kind: closed_loop, clients: 1}, tokenizer: llama}\n"
                                  "scheduler: {kind: vllm, max_num_batched_tokens: 8192}\n"
                                  "last_mile: {d2h: fixed, d2h_latency: 0us, detokenize_per_token: 0us, stream_per_token: 0us}\n"
                                  "outputs: {trace: false}\n", "t.yaml");
  auto parsed = registry().parse(n, "study", "", "serving");
  return serving::build_serving_config(parsed.params, registry(), 1, nullptr);
}

}  // namespace

TEST_CASE("terapipe serving: a sliced prefill's first token comes after the slices' flow shop, checked by hand") {
  serving::ServingConfig none_cfg = one_prompt(4096, "{policy: none}");
  serving::ServingConfig cfg = one_prompt(4096, "{policy: uniform, slices: 4, granularity: 64}");
  const CostModel cost(cfg.hardware, cfg.model, serving::cost_options(cfg));
  // Uniform: 4 slices of 1024 tokens, slice k after 1024 k cached; the last samples the token.
  // Two stages, a flow shop: stage 0 runs slices back to back, stage 1 starts slice k when both
  // stage 0 has finished it and stage 1 has finished slice k - 1.
  int64_t s0 = 0, s1 = 0;
  for (int k = 0; k < 4; ++k) {
    const SeqWork w{1024, 1024 * k, k == 3};
    s0 += std::llround(cost.stage_ns(std::span<const SeqWork>(&w, 1), 0));
    s1 = std::max(s0, s1) + std::llround(cost.stage_ns(std::span<const SeqWork>(&w, 1), 1));
  }
  const SeqWork whole{4096, 0, true};
  const int64_t unsliced = std::llround(cost.stage_ns(std::span<const SeqWork>(&whole, 1), 0)) +
                           std::llround(cost.stage_ns(std::span<const SeqWork>(&whole, 1), 1));
  Engine e1(1), e2(1);
  serving::ServingSim plain(std::move(none_cfg), e1, nullptr), sliced(std::move(cfg), e2, nullptr);
  plain.run({});
  sliced.run({});
  REQUIRE(plain.completed() == 1);
  REQUIRE(sliced.completed() == 1);
  CHECK(plain.requests()[0].first_token_ns == unsliced);
  CHECK(sliced.requests()[0].first_token_ns == s1);
  CHECK(s1 < unsliced * 0.9);  // two stages overlap: the later slices (longer prefix) cost more
  CHECK(sliced.replica_stats()[0].sliced_prefills == 1);
  CHECK(sliced.replica_stats()[0].prefill_slices == 4);
  // Shorter than min_tokens: not sliced.
  Engine e3(1);
  serving::ServingSim short_prompt(one_prompt(512, "{policy: uniform, slices: 4, granularity: 64}"), e3, nullptr);
  short_prompt.run({});
  CHECK(short_prompt.replica_stats()[0].sliced_prefills == 0);
}

TEST_CASE("terapipe serving: on the fabric the DP's slices cut TTFT below uniform's and unsliced prefill's") {
  const std::string file = std::string(SLUICE_TESTS_DIR) + "/../scenarios/serving-pp-sliced-prefill.yaml";
  auto ttft = [&](const std::string& slicing) {
    Scenario sc = load_scenario(file, {"deployment.prefill_slicing=" + slicing}, registry());
    Recorder rec;
    run_into(sc, rec, {});
    return rec.metrics();
  };
  const Json none = ttft("{policy: none}"), uni = ttft("{policy: uniform, slices: 8}"), dp = ttft("{policy: terapipe}");
  auto mean = [](const Json& m) { return m["serving"]["latency_ms"]["ttft"]["mean"].get<double>(); };
  CHECK(mean(uni) < 0.5 * mean(none));
  CHECK(mean(dp) < mean(uni));
  CHECK(dp["serving"]["prefill_slicing"]["slices_mean"].get<double>() > 8);
  CHECK(dp["serving"]["requests"]["completed"] == none["serving"]["requests"]["completed"]);
  CHECK(!none["serving"].contains("prefill_slicing"));
  // Slicing needs stages.
  CHECK_THROWS_WITH_AS(load_scenario(file, {"deployment.pipeline_parallel=1"}, registry()), doctest::Contains("pipeline_parallel >= 2"),
                       ConfigError);
}

TEST_CASE("terapipe training: stages of 3, 3, 2 and 2 layers are busy in proportion, the LM head on the last") {
  const Json m = run_text("name: t\ncluster:\n" + free_fabric() +
                          "  hardware: h200\nworkloads:\n"
                          "  - {name: j, kind: training, sequence: 1024, iterations: 1, cost_tables: none,\n"
                          "     model: {name: ten, layers: 10, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: 1024},\n"
                          "     parallel: {tp: 1, pp: 4, dp: 1, micro_batches: 8, schedule: gpipe}}\n");
  const Json& busy = m["training"]["stage_busy_fraction"];
  REQUIRE(busy.size() == 4);
  const double b0 = busy[0].get<double>(), b1 = busy[1].get<double>(), b2 = busy[2].get<double>(), b3 = busy[3].get<double>();
  CHECK(b0 > b1);  // the same 3 layers plus the embedding
  CHECK(b0 < b1 * 1.01);
  CHECK(b2 == doctest::Approx(b1 * 2 / 3).epsilon(0.02));  // 2 layers against 3
  CHECK(b3 > b2);  // 2 layers plus the LM head (of 8 rows of vocabulary: small)
  CHECK(b3 < b2 * 1.02);
}

TEST_CASE("terapipe training: on every shipped TeraPipe scenario no uniform slicing beats the DP as simulated") {
  // The DP proposes (its best slicing under each t_max) and the schedule the simulator runs
  // judges, beside every uniform slicing: so the chosen slices are never slower in the
  // simulation than a uniform cut (the formula alone chose 7 slices at 0.852 s for 13B where
  // uniform-8 took 0.816 s). Each case: the DP's run against uniform cuts around its count.
  const std::string dir = std::string(SLUICE_TESTS_DIR) + "/../scenarios/";
  struct Case {
    std::string file;
    std::vector<std::string> sets;
  };
  const std::vector<Case> cases{{"terapipe-gpt3-13b.yaml", {}},
                                {"terapipe-gpt3-175b.yaml", {}},
                                {"terapipe-gpt3-13b.yaml", {"workloads.0.sequence=4096", "workloads.0.parallel.micro_batches=8"}}};
  for (const Case& c : cases) {
    CAPTURE(c.file);
    CAPTURE(c.sets.size());
    auto run = [&](std::vector<std::string> sets) {
      for (const auto& s : c.sets) sets.push_back(s);
      Scenario sc = load_scenario(dir + c.file, sets, registry());
      Recorder rec;
      run_into(sc, rec, {});
      return rec.metrics()["training"];
    };
    const Json dp = run({});
    const double dp_s = dp["iteration_s_mean"].get<double>();
    const int n = dp["slicing"]["slices"].get<int>();
    // The replay the choice used agrees with the simulation (optimizer step aside).
    CHECK(dp["slicing"]["schedule_pass_ms"].get<double>() / 1e3 == doctest::Approx(dp_s).epsilon(0.02));
    CHECK(dp["slicing"]["schedule_pass_ms"].get<double>() <= dp["slicing"]["best_uniform_schedule_pass_ms"].get<double>());
    for (const int k : {1, std::max(1, n - 2), std::max(1, n - 1), n, n + 1, n + 2, 2 * n}) {
      CAPTURE(k);
      const double u = run({fmt::format("workloads.0.slicing={{policy: uniform, slices: {}}}", k)})["iteration_s_mean"].get<double>();
      CHECK(dp_s <= u * (1 + 1e-6));
    }
  }
}
