// Speculative decoding: the acceptance model's draws, verification's cost (k + 1 tokens through
// the layers and the LM head, one attention call over the same cache), acceptance 1 giving k + 1
// tokens a step and acceptance 0 running slower than plain decode, the drafter's memory, the
// batch from which it stops paying, and bad input at its key.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>
#include <string>
#include <vector>

#include "config/error.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"
#include "workloads/serving/speculative.h"

using namespace sluice;
using sluice::testing::run_text;
using serving::SpeculativeConfig;
using serving::Speculator;

namespace {

// Llama-3-8B with a one-layer EAGLE-style head, k drafts at acceptance `rate`; fixed lengths
// lengths (every request the same), so each takes exactly ceil((output - 1) / tokens a step) steps.
const std::string kSpec = R"(
name: spec
seed: 3
hardware: h200
model: llama3-8b
deployment: {replicas: 1, speculative: {method: eagle, tokens: 4, acceptance: 0.7}}
scheduler: {kind: vllm}
workload:
  kind: llmperf
  requests: 40
  input_tokens: {mean: 100, sd: 0}
  output_tokens: {mean: 41, sd: 0}
  arrival: {kind: closed_loop, clients: 4}
outputs: {trace: false}
)";

Speculator speculator(std::vector<double> curve, std::vector<double> dist = {}) {
  SpeculativeConfig c;
  c.method = SpeculativeConfig::Method::Eagle;
  c.tokens = static_cast<int>(dist.empty() ? curve.size() : dist.size() - 1);
  c.curve = std::move(curve);
  c.distribution = std::move(dist);
  CostOptions o;
  o.tables_dir = "";  // the roofline: no tables needed
  return Speculator(c, load_hardware("h200"), load_model("llama3-8b"), o, 7);
}

}  // namespace

TEST_CASE("speculative: a per-position curve gives the distribution of accepted drafts, and draws follow it") {
  Speculator s = speculator({0.8, 0.5});
  // P(0) = 0.2, P(1) = 0.8 x 0.5, P(2) = 0.8 x 0.5.
  REQUIRE(s.distribution().size() == 3);
  CHECK(s.distribution()[0] == doctest::Approx(0.2));
  CHECK(s.distribution()[1] == doctest::Approx(0.4));
  CHECK(s.distribution()[2] == doctest::Approx(0.4));
  CHECK(s.expected_tokens_per_step() == doctest::Approx(2.2));
  std::vector<int> seen(3, 0);
  const int n = 100000;
  for (int i = 0; i < n; ++i) ++seen[static_cast<size_t>(s.draw(static_cast<uint32_t>(i / 100), i % 100))];
  for (int j = 0; j < 3; ++j) CHECK(seen[static_cast<size_t>(j)] / static_cast<double>(n) == doctest::Approx(s.distribution()[static_cast<size_t>(j)]).epsilon(0.02));
  Speculator all = speculator({1, 1, 1});
  Speculator none = speculator({0, 0, 0});
  Speculator given = speculator({}, {0.5, 0, 0.5});
  for (int i = 0; i < 100; ++i) {
    CHECK(all.draw(7, i) == 3);
    CHECK(none.draw(7, i) == 0);
    const int a = given.draw(7, i);
    CHECK((a == 0 || a == 2));
  }
  // A draw is a function of the request and the position alone.
  CHECK(s.draw(12, 40) == s.draw(12, 40));
}

TEST_CASE("speculative: verification runs k + 1 tokens through the layers and the LM head, and attention reads the cache once") {
  const HardwareSpec h200 = load_hardware("h200");
  const CostModel cm(h200, load_model("llama3-8b"), CostOptions{1, 1, default_tables_dir(h200)});
  const std::vector<SeqWork> plain(8, SeqWork{1, 2000, true});
  std::vector<SeqWork> verify = plain;
  for (auto& s : verify) s.drafts = 4;
  const IterationCost p = cm.iteration(plain), v = cm.iteration(verify);
  auto op = [](const IterationCost& it, const std::string& name) -> const OpCost& {
    for (const auto& o : it.ops)
      if (o.op == name) return o;
    FAIL("no " << name);
    return it.ops.front();
  };
  // The GEMMs see 5 tokens a sequence, the LM head 5 rows a sequence.
  CHECK(op(v, "gemm.qkv").flops == doctest::Approx(5 * op(p, "gemm.qkv").flops));
  CHECK(op(v, "lm_head").flops == doctest::Approx(5 * op(p, "lm_head").flops));
  // Attention: 5 queries a sequence over the same keys (4 more of them), still the decode kernel:
  // 5x the FLOPs, about the same bytes, so at this memory-bound size barely slower.
  const OpCost& pa = op(p, "attention.decode");
  const OpCost& va = op(v, "attention.decode");
  // (query i of 5 sees 2001 + i keys: causal over the drafts)
  CHECK(va.flops == doctest::Approx(pa.flops * (5 * 2001.0 + 10) / 2001.0).epsilon(1e-9));
  CHECK(va.bytes < 1.01 * pa.bytes);
  CHECK(va.ns >= pa.ns);
  CHECK(va.ns < 1.5 * pa.ns);
  CHECK_MESSAGE(va.source.find("scaled") != std::string::npos, va.source);  // moved from the decode table, said so
  // The whole step: dearer than one decode, far cheaper than five.
  CHECK(v.total_ns > p.total_ns);
  CHECK(v.total_ns < 2 * p.total_ns);
  CHECK(cm.iteration_ns(verify) == doctest::Approx(v.total_ns));
}

TEST_CASE("speculative: acceptance 1 yields k + 1 tokens a step, acceptance 0 one token and a slower decode than none") {
  const Json plain = run_text(kSpec, {"deployment.speculative={method: none}"})["serving"];
  const Json all = run_text(kSpec, {"deployment.speculative.acceptance=1"})["serving"];
  const Json none = run_text(kSpec, {"deployment.speculative.acceptance=0"})["serving"];
  CHECK_FALSE(plain.contains("speculative"));
  // 40 tokens after the first, 5 a step: 8 verification steps a request.
  // Each request's first token comes from its prefill, the others from verification steps.
  const auto out = static_cast<int64_t>(plain["throughput"]["output_tokens"].get<double>() / 40);
  REQUIRE(out * 40 == static_cast<int64_t>(plain["throughput"]["output_tokens"].get<double>()));
  CHECK(all["speculative"]["steps"].get<int64_t>() == 40 * ((out - 1 + 4) / 5));
  CHECK(all["speculative"]["tokens_per_step"].get<double>() == doctest::Approx(5));
  CHECK(all["speculative"]["acceptance_rate"].get<double>() == doctest::Approx(1));
  CHECK(none["speculative"]["steps"].get<int64_t>() == 40 * (out - 1));
  CHECK(none["speculative"]["tokens_per_step"].get<double>() == doctest::Approx(1));
  CHECK(none["speculative"]["acceptance_rate"].get<double>() == 0);
  for (const Json* j : {&plain, &all, &none}) CHECK((*j)["requests"]["completed"].get<int64_t>() == 40);
  const double tpot_plain = plain["latency_ms"]["tpot"]["mean"].get<double>();
  CHECK(none["latency_ms"]["tpot"]["mean"].get<double>() > tpot_plain);
  CHECK(all["latency_ms"]["tpot"]["mean"].get<double>() < tpot_plain / 2);
  CHECK(all["throughput"]["output_tokens_per_s"].get<double>() > 2 * plain["throughput"]["output_tokens_per_s"].get<double>());
  // Every output token is counted once, however many a step made.
  CHECK(all["throughput"]["output_tokens"].get<double>() == plain["throughput"]["output_tokens"].get<double>());
}

TEST_CASE("speculative: the same seed draws the same acceptances, another seed others") {
  const Json a = run_text(kSpec)["serving"];
  const Json b = run_text(kSpec)["serving"];
  const Json c = run_text(kSpec, {"seed=4"})["serving"];
  CHECK(a["speculative"] == b["speculative"]);
  CHECK(a["latency_ms"] == b["latency_ms"]);
  CHECK(a["speculative"]["steps"] != c["speculative"]["steps"]);
}

TEST_CASE("speculative: a draft model's weights and KV cache take memory beside the target's") {
  const std::string text = kSpec;
  const Json plain = run_text(text, {"model=llama3-70b", "deployment.tensor_parallel=4", "deployment.speculative={method: none}"})["serving"];
  const Json draft = run_text(text, {"model=llama3-70b", "deployment.tensor_parallel=4",
                                     "deployment.speculative={method: draft, draft_model: llama3.2-1b, acceptance: 0.6}"})["serving"];
  const ModelSpec d = load_model("llama3.2-1b");
  CHECK(draft["memory_per_gpu"]["weights_bytes"].get<double>() - plain["memory_per_gpu"]["weights_bytes"].get<double>() ==
        doctest::Approx(d.weight_bytes() / 4));
  const double per_token = load_model("llama3-70b").kv_bytes_per_token() + d.kv_bytes_per_token();
  CHECK(draft["kv_cache"]["bytes_per_token"].get<double>() == doctest::Approx(per_token));
  CHECK(draft["kv_cache"]["tokens_per_replica"].get<int64_t>() < plain["kv_cache"]["tokens_per_replica"].get<int64_t>());
  // A head shares the target's embedding and LM head: only its layer counts.
  const Json mtp = run_text(text, {"deployment.speculative={method: mtp, acceptance: 0.6}"})["serving"];
  const Json p8 = run_text(text, {"deployment.speculative={method: none}"})["serving"];
  const ModelSpec t = load_model("llama3-8b");
  const double layer = (t.weight_bytes() - 2.0 * t.vocab * t.hidden * t.dtype_bytes) / t.layers;
  CHECK(mtp["memory_per_gpu"]["weights_bytes"].get<double>() - p8["memory_per_gpu"]["weights_bytes"].get<double>() ==
        doctest::Approx(layer).epsilon(0.001));
}

TEST_CASE("speculative: it pays at small batches and stops paying at the reported batch") {
  Speculator s = speculator({0.7, 0.7, 0.7, 0.7});
  const CostModel target(load_hardware("h200"), load_model("llama3-8b"), CostOptions{});
  CHECK(s.gain_at(target, 1, 1000) > 1.5);
  const int b = s.break_even_batch(target, 1000, 1024);
  REQUIRE(b > 1);
  CHECK(s.gain_at(target, b, 1000) < 1);
  CHECK(s.gain_at(target, b - 1, 1000) >= 1);
  // At acceptance 0 it never pays: one token a step for the price of a verification and k drafts.
  Speculator never = speculator({0, 0, 0, 0});
  CHECK(never.break_even_batch(target, 1000, 1024) == 1);
  const Json m = run_text(kSpec)["serving"]["speculative"];
  CHECK(m["break_even_batch"].get<int>() > 1);
  CHECK(m["gain_by_batch"]["1"].get<double>() > m["gain_by_batch"]["256"].get<double>());
}

TEST_CASE("speculative: a method leaves the keys it does not use unread, and the results name the drafter that ran") {
  const Json off = run_text(kSpec, {"deployment.speculative.method=none"})["serving"];
  CHECK_FALSE(off.contains("speculative"));
  const Json eagle = run_text(kSpec, {"deployment.speculative.draft_model=llama3.2-1b"})["serving"]["speculative"];
  CHECK(eagle["drafter"].get<std::string>() == "llama3-8b eagle head");
  const Json draft = run_text(kSpec, {"deployment.speculative.draft_model=llama3.2-1b", "deployment.speculative.method=draft"})["serving"]["speculative"];
  CHECK(draft["drafter"].get<std::string>() == "llama3.2-1b");
}

TEST_CASE("speculative: bad input is refused at its key before anything runs") {
  auto refused = [](const std::vector<std::string>& sets, const std::string& says) {
    CHECK_THROWS_WITH_AS(run_text(kSpec, sets), doctest::Contains(says.c_str()), ConfigError);
  };
  refused({"deployment.speculative={method: draft, draft_model: llama3-70b, acceptance: 0.5}"}, "not smaller than its target");
  refused({"deployment.speculative={method: draft, draft_model: tinyllama-1.1b, acceptance: 0.5}"}, "vocabulary");
  refused({"model=llama2-7b", "deployment.speculative={method: draft, draft_model: tinyllama-1.1b, acceptance: 0.5}"}, "fewer than llama2-7b's 4096");
  refused({"deployment.speculative={method: draft, acceptance: 0.5}"}, "draft_model");
  refused({"deployment.speculative.acceptance=1.5"}, "not a probability");
  refused({"deployment.speculative.acceptance=[0.9, 0.8]"}, "a curve of 2 positions for 4 drafts");
  refused({"deployment.speculative={method: eagle, tokens: 2, accepted_distribution: [0.5, 0.2, 0.2]}"}, "sums to 0.9");
  refused({"deployment.speculative={method: eagle, tokens: 2, accepted_distribution: [0.5, 0.5]}"}, "2 entries for 2 drafts");
  refused({"deployment.speculative={method: eagle, tokens: 2}"}, "how often drafts are accepted");
  refused({"deployment.speculative.tokens=0"}, "tokens");
  refused({"model=llama3-70b", "deployment.pipeline_parallel=2", "deployment.tensor_parallel=4"}, "single-stage replicas");
}

TEST_CASE("speculative: on a fabric a verification's all-reduces carry its drafts, and chunked budgets count them") {
  // Two GPUs of the implicit server: every tensor-parallel all-reduce is a flow.
  const std::vector<std::string> tp2 = {"deployment.tensor_parallel=2"};
  auto run = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), tp2.begin(), tp2.end());
    return run_text(kSpec, sets)["serving"];
  };
  const Json plain = run({"deployment.speculative.method=none"});
  const Json spec = run({"deployment.speculative.acceptance=0"});
  REQUIRE(plain.contains("communication"));
  // Acceptance 0: the same steps, each all-reduce 5 tokens' activations instead of 1.
  CHECK(spec["communication"]["tp_allreduces"] == plain["communication"]["tp_allreduces"]);
  // (decode all-reduces are small, mostly latency: 5 tokens a sequence lengthen them by some percent)
  CHECK(spec["communication"]["tp_allreduce_ms_mean"].get<double>() > 1.03 * plain["communication"]["tp_allreduce_ms_mean"].get<double>());
  // A chunked scheduler's token budget counts each verification as 1 + k tokens: a budget of 10
  // holds two verifying sequences a step, not ten.
  const Json tight = run({"scheduler={kind: vllm_chunked, max_num_batched_tokens: 10}", "deployment.speculative.acceptance=1"});
  CHECK(tight["batching"]["max_batch"].get<double>() <= 2);
}
