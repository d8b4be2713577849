// Serving: the KV block manager, each scheduler's batching decisions on small hand-checked
// cases, the workload generator's distributions, and metric definitions on a tiny run.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "config/node.h"
#include "engine/run_control.h"
#include "recorder/histogram.h"
#include "recorder/recorder.h"
#include "recorder/serving_report.h"
#include "registry/registry.h"
#include "run/runner.h"
#include "workloads/serving/kv_cache.h"
#include "workloads/serving/scheduler.h"
#include "workloads/serving/serving_sim.h"
#include "workloads/serving/workload.h"

using namespace sluice;
using namespace sluice::serving;

namespace sluice::serving {
}

namespace {

Request make_req(uint32_t id, int prompt, int output, uint32_t conv = 0, int turn = 0, int turns = 1) {
  Request q;
  q.id = id;
  q.serial = id;
  q.input_tokens = prompt;
  q.output_tokens = output;
  q.conversation = conv;
  q.turn = static_cast<uint16_t>(turn);
  q.turns_total = static_cast<uint16_t>(turns);
  q.state = ReqState::Waiting;
  return q;
}

using sluice::testing::registry;

std::unique_ptr<Scheduler> make_scheduler(const std::string& yaml) {
  const Node n = load_yaml_string(yaml, "test");
  auto parsed = registry().parse(n, "scheduler", "scheduler");
  return registry().factory<SchedulerFactory>(*parsed.info)(parsed.params);
}

// Applies an iteration's progress the way the simulator does (without the last mile).
void advance(Replica& r, const Batch& b) {
  for (const auto& e : b.entries) {
    if (e.req == kPaddingSlot) continue;
    Request& q = r.req(e.req);
    if (q.state == ReqState::Done) continue;
    q.computed += e.new_tokens;
    if (q.computed >= q.length()) ++q.generated;
    if (q.finished()) {
      q.state = ReqState::Done;
      r.kv.release(q);
    }
  }
  r.running.erase(std::remove_if(r.running.begin(), r.running.end(), [&](uint32_t id) { return r.req(id).state == ReqState::Done; }),
                  r.running.end());
}

}  // namespace

TEST_CASE("KV block manager: allocation, release, watermark") {
  BlockManager kv(10, 4, 0.1, false);
  Request a = make_req(0, 9, 1);
  CHECK(kv.grow_to(a, 9));
  CHECK(a.blocks == 3);
  CHECK(kv.free_blocks() == 7);
  CHECK(kv.grow_to(a, 12));  // still 3 blocks
  CHECK(a.blocks == 3);
  CHECK(kv.grow_to(a, 13));
  CHECK(a.blocks == 4);
  Request b = make_req(1, 24, 1);
  CHECK_FALSE(kv.grow_to(b, 24, /*admission=*/true));  // 6 blocks > 6 free - 1 watermark
  CHECK(b.blocks == 0);
  CHECK(kv.grow_to(b, 24, /*admission=*/false));
  CHECK(kv.free_blocks() == 0);
  CHECK(kv.used_blocks() == 10);
  kv.release(a);
  CHECK(kv.free_blocks() == 4);
  CHECK(a.blocks == 0);
}

TEST_CASE("KV reuse: a finished turn stays resident, the next turn claims it, LRU eviction") {
  BlockManager kv(10, 4, 0.0, true);
  Request t0 = make_req(0, 10, 2, /*conv=*/7, 0, 2);
  REQUIRE(kv.grow_to(t0, 12));
  kv.retain(t0, 12);
  CHECK(kv.cached_blocks() == 3);
  CHECK(kv.resident(7));
  CHECK(t0.blocks == 0);
  Request t1 = make_req(1, 5, 2, 7, 1, 2);
  t1.history_tokens = 12;
  CHECK(kv.claim(t1, t1.prompt_len() - 1) == 12);
  CHECK(t1.blocks == 3);
  CHECK_FALSE(kv.resident(7));
  CHECK(kv.cached_blocks() == 0);
  // Eviction: two cached conversations, allocation needs one evicted (the older).
  Request c1 = make_req(2, 8, 1, 1, 0, 2), c2 = make_req(3, 8, 1, 2, 0, 2);
  REQUIRE(kv.grow_to(c1, 8));
  REQUIRE(kv.grow_to(c2, 8));
  kv.retain(c1, 8);
  kv.retain(c2, 8);
  CHECK(kv.free_blocks() == 3);
  Request big = make_req(4, 20, 1);
  CHECK(kv.grow_to(big, 20));  // needs 5: evicts conversation 1 (least recently used)
  CHECK_FALSE(kv.resident(1));
  CHECK(kv.resident(2));
  // A last turn is not kept.
  Request last = make_req(5, 4, 1, 9, 1, 2);
  REQUIRE(kv.grow_to(last, 4));
  kv.retain(last, 4);
  CHECK_FALSE(kv.resident(9));
}

TEST_CASE("vLLM: prefill-first under the token budget, then decode / latest admitted is preempted") {
  std::vector<Request> reqs{make_req(0, 10, 3), make_req(1, 10, 3)};
  Replica r(8, 4, 0.0, false);  // 32 tokens of KV
  r.reqs = &reqs;
  r.waiting = {0, 1};
  auto s = make_scheduler("{kind: vllm, max_num_seqs: 8, max_num_batched_tokens: 16}");
  Batch b;
  s->schedule(r, b, 0);
  REQUIRE(b.entries.size() == 1);  // 10 + 10 > 16: the second prompt waits
  CHECK(b.entries[0].req == 0);
  CHECK(b.entries[0].new_tokens == 10);
  CHECK(b.prefill_entries == 1);
  advance(r, b);
  b.clear();
  s->schedule(r, b, 0);  // a waiting prompt comes before decodes
  REQUIRE(b.entries.size() == 1);
  CHECK(b.entries[0].req == 1);
  advance(r, b);
  b.clear();
  s->schedule(r, b, 0);  // both decode one token; 11 tokens each need 3 blocks: 6 of 8
  CHECK(b.entries.size() == 2);
  CHECK(b.decode_entries == 2);
  CHECK(b.entries[1].context == 10);
  CHECK(r.kv.used_blocks() == 6);
  advance(r, b);
  // The second decode step (12 tokens each, still 3 blocks) finishes request 0's three
  // outputs; preemption is covered by the next test.
  b.clear();
  s->schedule(r, b, 0);
  advance(r, b);
  CHECK(reqs[0].state == ReqState::Done);  // 3 outputs: prefill token + 2 decodes
}

TEST_CASE("vLLM preemption by recompute puts the victim at the front of the queue") {
  std::vector<Request> reqs{make_req(0, 8, 50), make_req(1, 8, 50)};
  Replica r(5, 4, 0.0, false);  // 20 tokens
  r.reqs = &reqs;
  r.waiting = {0, 1};
  auto s = make_scheduler("{kind: vllm, max_num_seqs: 8, max_num_batched_tokens: 64}");
  Batch b;
  s->schedule(r, b, 0);
  CHECK(b.entries.size() == 2);  // both prefill: 2 + 2 blocks
  advance(r, b);
  b.clear();
  s->schedule(r, b, 0);  // 9 tokens each: needs 3 blocks each = 6 > 5 → preempt request 1
  CHECK(r.preemptions == 1);
  CHECK(reqs[1].preemptions == 1);
  CHECK(reqs[1].computed == 0);
  CHECK(reqs[1].state == ReqState::Waiting);
  REQUIRE(r.waiting.size() == 1);
  CHECK(r.waiting.front() == 1);
  REQUIRE(b.entries.size() == 1);
  CHECK(b.entries[0].req == 0);
}

TEST_CASE("swap preemption charges the host-link copy and brings the sequence back") {
  std::vector<Request> reqs{make_req(0, 8, 50), make_req(1, 8, 50)};
  Replica r(5, 4, 0.0, false);
  r.reqs = &reqs;
  r.preemption = PreemptionMode::Swap;
  r.kv_bytes_per_token = 1000;
  r.swap_Bps = 1e9;
  r.swap_capacity_tokens = 1000;
  r.waiting = {0, 1};
  auto s = make_scheduler("{kind: vllm}");
  Batch b;
  s->schedule(r, b, 0);
  advance(r, b);
  b.clear();
  s->schedule(r, b, 0);
  CHECK(reqs[1].state == ReqState::Swapped);
  CHECK(reqs[1].computed == 8);                        // KV kept on the host
  CHECK(b.extra_ns == doctest::Approx(8 * 1000 / 1e9 * 1e9));  // 8 tokens × 1000 B at 1 GB/s = 8 µs
  CHECK(r.swap_bytes == doctest::Approx(8000));
}

TEST_CASE("Sarathi: decodes first, then prefill chunks fill the token budget") {
  std::vector<Request> reqs{make_req(0, 4, 5), make_req(1, 20, 2)};
  Replica r(100, 4, 0.0, false);
  r.reqs = &reqs;
  r.waiting = {0};
  auto s = make_scheduler("{kind: sarathi, token_budget: 8}");
  Batch b;
  s->schedule(r, b, 0);
  advance(r, b);  // request 0 prefilled, decoding now
  r.waiting.push_back(1);
  b.clear();
  s->schedule(r, b, 0);
  REQUIRE(b.entries.size() == 2);
  CHECK(b.entries[0].req == 0);
  CHECK(b.entries[0].new_tokens == 1);
  CHECK(b.entries[1].req == 1);
  CHECK(b.entries[1].new_tokens == 7);  // 8 - 1 decode
  advance(r, b);
  CHECK(reqs[1].generated == 0);  // 7 of 20 prompt tokens: no token yet
  b.clear();
  s->schedule(r, b, 0);
  CHECK(b.entries[1].new_tokens == 7);
  CHECK(b.entries[1].context == 7);
  advance(r, b);
  b.clear();
  s->schedule(r, b, 0);
  CHECK(b.entries[1].new_tokens == 6);  // the rest of the prompt
  advance(r, b);
  CHECK(reqs[1].generated == 1);
}

TEST_CASE("vLLM chunked prefill: one budget, running requests in admission order, then new prompts chunked to fit") {
  std::vector<Request> reqs{make_req(0, 4, 5), make_req(1, 20, 2), make_req(2, 30, 2)};
  Replica r(100, 4, 0.0, false);
  r.reqs = &reqs;
  r.waiting = {0};
  auto s = make_scheduler("{kind: vllm_chunked, max_num_batched_tokens: 16}");
  Batch b;
  s->schedule(r, b, 0);
  advance(r, b);  // request 0 prefilled (4 tokens), decoding now
  r.waiting.push_back(1);
  r.waiting.push_back(2);
  b.clear();
  s->schedule(r, b, 0);
  // The decode, then 15 of request 1's 20 prompt tokens; request 2 waits (no budget left).
  REQUIRE(b.entries.size() == 2);
  CHECK(b.entries[0].req == 0);
  CHECK(b.entries[0].new_tokens == 1);
  CHECK(b.entries[1].req == 1);
  CHECK(b.entries[1].new_tokens == 15);
  advance(r, b);
  b.clear();
  s->schedule(r, b, 0);
  // Running in admission order: the decode, request 1's last 5, then request 2's first 10.
  REQUIRE(b.entries.size() == 3);
  CHECK(b.entries[1].new_tokens == 5);
  CHECK(b.entries[2].req == 2);
  CHECK(b.entries[2].new_tokens == 10);
  int64_t tokens = 0;
  for (const auto& e : b.entries) tokens += e.new_tokens;
  CHECK(tokens == 16);
  // A per-prompt cap: long_prefill_token_threshold 4 takes at most 4 of a prompt a step.
  std::vector<Request> more{make_req(0, 20, 2)};
  Replica r2(100, 4, 0.0, false);
  r2.reqs = &more;
  r2.waiting = {0};
  auto capped = make_scheduler("{kind: vllm_chunked, max_num_batched_tokens: 16, long_prefill_token_threshold: 4}");
  Batch c;
  capped->schedule(r2, c, 0);
  REQUIRE(c.entries.size() == 1);
  CHECK(c.entries[0].new_tokens == 4);
}

TEST_CASE("vLLM chunked prefill sits between prefill-first vLLM and Sarathi's small budget: TTFT and TPOT trade") {
  auto run = [](const std::string& kind) {
    return sluice::testing::run_text(
        "name: t\nmodel: llama2-7b\nhardware: h200\ndeployment: {replicas: 1}\nscheduler: {kind: " + kind + "}\n"
        "workload: {kind: llmperf, requests: 300, arrival: {kind: poisson, rate: 30/s}}\noutputs: {trace: false}\n")["serving"]["latency_ms"];
  };
  const Json v = run("vllm"), c = run("vllm_chunked"), s = run("sarathi");
  auto p50 = [](const Json& m, const char* k) { return m[k]["p50"].get<double>(); };
  CAPTURE(p50(v, "ttft"));
  CAPTURE(p50(c, "ttft"));
  CAPTURE(p50(s, "ttft"));
  CHECK(p50(v, "ttft") < p50(c, "ttft"));
  CHECK(p50(c, "ttft") < p50(s, "ttft"));
  CHECK(p50(s, "tpot") < p50(c, "tpot"));
  CHECK(p50(c, "tpot") < p50(v, "tpot"));
}

TEST_CASE("Orca: new prompts join running decodes in one iteration / KV reserved up front") {
  std::vector<Request> reqs{make_req(0, 4, 5), make_req(1, 6, 2)};
  Replica r(100, 4, 0.0, false);
  r.reqs = &reqs;
  r.waiting = {0};
  auto s = make_scheduler("{kind: orca, max_batch_size: 4, max_new_tokens: 12}");
  Batch b;
  s->schedule(r, b, 0);
  CHECK(reqs[0].blocks == 4);  // 4 + 12 tokens reserved = 4 blocks
  advance(r, b);
  r.waiting.push_back(1);
  b.clear();
  s->schedule(r, b, 0);
  REQUIRE(b.entries.size() == 2);
  CHECK(b.decode_entries == 1);
  CHECK(b.prefill_entries == 1);
  CHECK(b.entries[1].new_tokens == 6);
}

TEST_CASE("static batching waits to fill a batch, then pads finished members") {
  std::vector<Request> reqs{make_req(0, 4, 1), make_req(1, 4, 3)};
  reqs[0].arrival_ns = 0;
  reqs[1].arrival_ns = 1000;
  Replica r(100, 4, 0.0, false);
  r.reqs = &reqs;
  r.waiting = {0};
  auto s = make_scheduler("{kind: static, batch_size: 2, max_wait: 1ms}");
  Batch b;
  s->schedule(r, b, 10);
  CHECK(b.empty());
  CHECK(s->wake_at(r, 10) == 1'000'000);
  r.waiting.push_back(1);
  s->schedule(r, b, 2000);
  REQUIRE(b.entries.size() == 2);  // full batch
  advance(r, b);                   // request 0 finished after its first token
  CHECK(reqs[0].state == ReqState::Done);
  r.waiting.push_back(0);          // (re-queue something: it must not join the batch)
  reqs.push_back(make_req(2, 4, 1));
  r.waiting.back() = 2;
  b.clear();
  s->schedule(r, b, 3000);
  REQUIRE(b.entries.size() == 2);  // padding row + request 1
  CHECK(b.entries[0].req == kPaddingSlot);  // a finished member's row names no request: its slot may be reused
  CHECK(b.entries[0].context == 5);         // its full length: 4 prompt tokens and its 1 output token
  CHECK(b.entries[1].req == 1);
  advance(r, b);
  advance(r, Batch{});
  b.clear();
  s->schedule(r, b, 4000);
  advance(r, b);
  CHECK(reqs[1].state == ReqState::Done);
  b.clear();
  s->schedule(r, b, 5000);  // batch done: the next one forms (request 2 waited > max_wait? no: full? no)
  CHECK(b.empty());
  s->schedule(r, b, 2'000'000);
  CHECK(b.entries.size() == 1);
}

TEST_CASE("llmperf lengths: int(gauss(mean, sd)) redrawn until positive, seeded") {
  RngStream r(1, "t");
  const int n = 100000;
  double sum = 0, sum2 = 0;
  int min = 1 << 30;
  for (int i = 0; i < n; ++i) {
    const int v = llmperf_length(r, 550, 150);
    sum += v;
    sum2 += double(v) * v;
    min = std::min(min, v);
  }
  const double mean = sum / n;
  CHECK(mean == doctest::Approx(549.5).epsilon(0.005));  // truncation lowers the mean by ~0.5
  CHECK(std::sqrt(sum2 / n - mean * mean) == doctest::Approx(150).epsilon(0.02));
  CHECK(min >= 1);
  // Heavy truncation at zero: 150 ± 80 output redraws the (rare) non-positive draws.
  RngStream o(2, "t");
  int nonpos = 0;
  for (int i = 0; i < n; ++i) nonpos += llmperf_length(o, 10, 80) <= 0;
  CHECK(nonpos == 0);
  // Fixed lengths with sd 0.
  RngStream f(3, "t");
  CHECK(llmperf_length(f, 550, 0) == 550);
}

TEST_CASE("log histogram percentiles stay within 1%") {
  LogHistogram h;
  for (int i = 1; i <= 100000; ++i) h.record(i * 1000);
  CHECK(h.count() == 100000);
  CHECK(h.percentile(50) == doctest::Approx(50'000'000).epsilon(0.01));
  CHECK(h.percentile(99) == doctest::Approx(99'000'000).epsilon(0.01));
  CHECK(h.max() == 100'000'000);
  CHECK(h.mean() == doctest::Approx(50'000'500).epsilon(1e-9));
}

TEST_CASE("log histogram: every int64 has its bucket from construction, so recording never allocates") {
  LogHistogram h;
  CHECK(LogHistogram::bucket(std::numeric_limits<int64_t>::max()) == LogHistogram::kBuckets - 1);
  CHECK(LogHistogram::bucket(std::numeric_limits<int64_t>::max() - 1) == LogHistogram::kBuckets - 1);
  CHECK(LogHistogram::bucket(127) == 127);
  CHECK(LogHistogram::bucket(128) == 128);
  for (int64_t v : {int64_t{0}, int64_t{127}, int64_t{128}, int64_t{1} << 40, std::numeric_limits<int64_t>::max() - 1,
                    std::numeric_limits<int64_t>::max()})
    h.record(v);
  CHECK(h.max() == std::numeric_limits<int64_t>::max());
  CHECK(h.percentile(100) == doctest::Approx(static_cast<double>(std::numeric_limits<int64_t>::max())).epsilon(0.01));
  // A Runs abandoned by an exception records its pending run on the way out, safely.
  try {
    LogHistogram::Runs r(h);
    r.add(5);
    r.add(5);
    throw std::runtime_error("abandon the run");
  } catch (const std::runtime_error&) {
  }
  CHECK(h.count() == 8);
}

TEST_CASE("log histogram: runs and counted records equal one record per value, and the sum is exact") {
  LogHistogram one, runs, counted;
  std::vector<int64_t> vs;
  for (int i = 0; i < 5000; ++i) vs.push_back(i % 7 < 4 ? 12'000'000 : 12'000'000 + (i % 13) * 977);  // long runs, some breaks
  vs.push_back(-5);  // clamped to 0, as record(v) does
  {
    LogHistogram::Runs r(runs);
    for (int64_t v : vs) {
      one.record(v);
      r.add(v);
    }
  }  // the last run is recorded on exit
  for (int64_t v : vs) counted.record(v, 1);
  counted.record(7, 0);  // zero samples: nothing
  for (const LogHistogram* h : {&runs, &counted}) {
    CHECK(h->count() == one.count());
    CHECK(h->mean() == one.mean());
    CHECK(h->min() == one.min());
    CHECK(h->max() == one.max());
    for (double p : {1.0, 50.0, 90.0, 99.0, 100.0}) CHECK(h->percentile(p) == one.percentile(p));
  }
  CHECK(one.min() == 0);
  // Past 2^53 ns in total a double sum would round; the integer sum keeps the mean exact.
  LogHistogram big;
  big.record(int64_t{1} << 52, 3);
  big.record(1, 3);
  // (3 * 2^52 + 3) / 6 = 2^51 + 0.5 (a double sum drops each +1 past 2^53 and gives 2^51).
  CHECK(big.mean() == 2251799813685248.5);
}

TEST_CASE("summaries use linear interpolation between ranks") {
  auto s = summarize({4, 1, 3, 2});
  CHECK(s["p50"].get<double>() == doctest::Approx(2.5));
  CHECK(s["p25"].get<double>() == doctest::Approx(1.75));
  CHECK(s["min"].get<double>() == 1);
  CHECK(s["max"].get<double>() == 4);
  CHECK(s["mean"].get<double>() == doctest::Approx(2.5));
}

TEST_CASE("metric definitions on a one-request run: TTFT and gaps include the last mile") {
  const Node n = load_yaml_string(R"(
model: tinyllama-1.1b
hardware: h200
deployment: {cost_tables: none}
workload: {kind: llmperf, requests: 1, input_tokens: {mean: 100, sd: 0}, output_tokens: {mean: 3, sd: 0},
           arrival: {kind: closed_loop, clients: 1}}
last_mile: {d2h: fixed, d2h_latency: 20us, detokenize_per_token: 7us, stream_per_token: 3us}
outputs: {trace: false}
)", "t.yaml");
  auto parsed = registry().parse(n, "study", "", "serving");
  ServingConfig cfg = build_serving_config(parsed.params, registry(), 1, nullptr);
  CostModel cost(cfg.hardware, cfg.model, CostOptions{1, 1, ""});
  Engine engine(1);
  ServingSim sim(std::move(cfg), engine, nullptr);
  Recorder rec;
  ServingRecords records(&rec, "requests.csv", sim.config().model_tokens_per_llama);
  sim.set_sink(&records);
  sim.run({});
  REQUIRE(sim.completed() == 1);
  const Request& q = sim.requests()[0];
  auto t = [](double ns) { return static_cast<int64_t>(std::llround(ns)); };
  std::vector<SeqWork> prefill{{100, 0}}, d1{{1, 100}}, d2{{1, 101}};
  // TTFT = prefill iteration + d2h copy + detokenize + stream.
  const int64_t it0 = std::max<int64_t>(1, t(cost.iteration_ns(prefill) + 20000));
  CHECK(q.first_token_ns == it0 + 7000 + 3000);
  // Each later token: decode iteration + d2h, then the host path again.
  const int64_t it1 = std::max<int64_t>(1, t(cost.iteration_ns(d1) + 20000));
  const int64_t it2 = std::max<int64_t>(1, t(cost.iteration_ns(d2) + 20000));
  CHECK(q.last_token_ns == it0 + it1 + it2 + 7000 + 3000);
  CHECK(q.first_scheduled_ns == 0);
  CHECK(sim.gaps().count() == 2);
  report_serving(sim.results(), records, "one request", rec, false);
  const auto& m = rec.metrics()["serving"];
  CHECK(m["latency_ms"]["ttft"]["p50"].get<double>() == doctest::Approx(q.first_token_ns / 1e6));
  CHECK(m["latency_ms"]["e2e"]["p50"].get<double>() == doctest::Approx(q.last_token_ns / 1e6));
  CHECK(m["latency_ms"]["tpot"]["p50"].get<double>() == doctest::Approx((q.last_token_ns - q.first_token_ns) / 1e6 / 2));
  CHECK(m["latency_ms"]["itl_llmperf"]["p50"].get<double>() == doctest::Approx(q.last_token_ns / 1e6 / 3));
  CHECK(m["throughput"]["output_tokens"].get<int>() == 3);
}

TEST_CASE("routers: round-robin cycles, least-outstanding picks the emptiest, KV-affinity follows the cache") {
  std::vector<Request> reqs{make_req(0, 10, 1, 3, 1, 2)};
  std::vector<std::unique_ptr<Replica>> rs;
  for (int i = 0; i < 3; ++i) {
    rs.push_back(std::make_unique<Replica>(100, 4, 0.0, true));
    rs.back()->reqs = &reqs;
  }
  auto make = [&](const std::string& yaml) {
    auto parsed = registry().parse(load_yaml_string(yaml, "t"), "router", "router");
    return registry().factory<RouterFactory>(*parsed.info)(parsed.params);
  };
  auto rr = make("round_robin");
  CHECK(rr->route(reqs[0], rs) == 0);
  CHECK(rr->route(reqs[0], rs) == 1);
  CHECK(rr->route(reqs[0], rs) == 2);
  CHECK(rr->route(reqs[0], rs) == 0);
  // Routers read the count the simulation keeps as it routes and ends requests.
  auto hold = [&](int r, size_t n) {
    rs[static_cast<size_t>(r)]->waiting.assign(n, 0);
    rs[static_cast<size_t>(r)]->routed = n;
  };
  hold(0, 2);
  hold(1, 1);
  auto lo = make("least_outstanding");
  CHECK(lo->route(reqs[0], rs) == 2);
  // Conversation 3's previous turn is cached on replica 1.
  Request prev = make_req(9, 8, 1, 3, 0, 2);
  REQUIRE(rs[1]->kv.grow_to(prev, 8));
  rs[1]->kv.retain(prev, 8);
  auto kv = make("{kind: kv_affinity, max_imbalance: 2}");
  CHECK(kv->route(reqs[0], rs) == 1);
  hold(1, 4);  // 4 outstanding vs 0: beyond the allowed imbalance
  CHECK(kv->route(reqs[0], rs) == 2);
}

TEST_CASE("tokenizer conversion uses the shipped ratio table") {
  const Origin o{"t", 1, 1};
  CHECK(TokenizerTable::ratio("llama", "llama", o, "w") == 1.0);
  CHECK(TokenizerTable::ratio("llama", "llama3", o, "w") == doctest::Approx(0.87));
  CHECK(TokenizerTable::ratio("llama3", "llama", o, "w") == doctest::Approx(1 / 0.87));
  CHECK_THROWS_AS(TokenizerTable::ratio("llama", "nope", o, "w"), ConfigError);
}

TEST_CASE("workload sources: conversion applied, Poisson and gamma gaps have the asked rate and burstiness") {
  auto source = [&](const std::string& yaml, const std::string& tok = "llama") {
    auto parsed = registry().parse(load_yaml_string(yaml, "t"), "load", "workload");
    return registry().factory<WorkloadFactory>(*parsed.info)(parsed.params, registry(), 5, tok, 8192).source;
  };
  auto fixed = source("{kind: llmperf, input_tokens: {mean: 550, sd: 0}, output_tokens: {mean: 150, sd: 0}}", "llama3");
  auto c = fixed->next(0);
  REQUIRE(c);
  CHECK(c->turns[0].input_tokens == 479);  // 550 × 0.87 rounded
  CHECK(c->turns[0].output_tokens == 131);
  auto gaps_cv = [&](const std::string& arrival) {
    auto s = source("{kind: llmperf, requests: 20000, arrival: " + arrival + "}");
    std::vector<double> gaps;
    int64_t last = 0;
    while (auto x = s->next(0)) {
      gaps.push_back(static_cast<double>(x->arrival_ns - last) / 1e9);
      last = x->arrival_ns;
    }
    double m = 0, v = 0;
    for (double g : gaps) m += g;
    m /= gaps.size();
    for (double g : gaps) v += (g - m) * (g - m);
    v /= gaps.size();
    return std::make_pair(1 / m, std::sqrt(v) / m);
  };
  auto [rate_p, cv_p] = gaps_cv("{kind: poisson, rate: 20/s}");
  CHECK(rate_p == doctest::Approx(20).epsilon(0.03));
  CHECK(cv_p == doctest::Approx(1).epsilon(0.05));
  auto [rate_g, cv_g] = gaps_cv("{kind: gamma, rate: 20/s, cv: 3}");
  CHECK(rate_g == doctest::Approx(20).epsilon(0.08));
  CHECK(cv_g == doctest::Approx(3).epsilon(0.1));
  // Multi-turn: turns come together in one conversation; the count covers every turn.
  auto multi = source("{kind: llmperf, requests: 7, conversation: {turns: 3}}");
  int total = 0, convs = 0;
  while (auto x = multi->next(0)) { total += static_cast<int>(x->turns.size()); ++convs; }
  CHECK(total == 7);
  CHECK(convs == 3);
}

TEST_CASE("trace replay: CSV and JSONL give the same conversations / bad rows name file and line") {
  const std::string root = catalog_root();
  auto source = [&](const std::string& file) {
    auto parsed = registry().parse(load_yaml_string("{kind: trace, file: " + file + "}", "t"), "load", "workload");
    return registry().factory<WorkloadFactory>(*parsed.info)(parsed.params, registry(), 1, "llama", 8192).source;
  };
  auto a = source(root + "/scenarios/traces/chat-sample.csv");
  auto b = source(root + "/scenarios/traces/chat-sample.jsonl");
  CHECK(a->total_requests() == b->total_requests());
  CHECK(a->total_requests() > 100);
  int n = 0;
  while (auto x = a->next(0)) {
    auto y = b->next(0);
    REQUIRE(y);
    CHECK(x->arrival_ns == y->arrival_ns);
    REQUIRE(x->turns.size() == y->turns.size());
    for (size_t i = 0; i < x->turns.size(); ++i) CHECK(x->turns[i].input_tokens == y->turns[i].input_tokens);
    ++n;
  }
  CHECK(n > 20);
  const auto bad = std::filesystem::temp_directory_path() / "sluice-bad-trace.csv";
  std::ofstream(bad) << "arrival_s,input_tokens,output_tokens\n0.5,100,20\n1.0,abc,20\n";
  CHECK_THROWS_WITH_AS(source(bad.string()), doctest::Contains("sluice-bad-trace.csv:3:1"), ConfigError);
  std::filesystem::remove(bad);
}

TEST_CASE("after a recompute preemption, prompt and generated tokens are re-prefilled in chunks") {
  std::vector<Request> reqs{make_req(0, 10, 50)};
  reqs[0].generated = 20;  // preempted after 20 tokens: 30 to recompute
  Replica r(100, 4, 0.0, false);
  r.reqs = &reqs;
  r.waiting = {0};
  auto s = make_scheduler("{kind: sarathi, token_budget: 16}");
  Batch b;
  s->schedule(r, b, 0);
  REQUIRE(b.entries.size() == 1);
  CHECK(b.entries[0].new_tokens == 16);
  CHECK(b.prefill_entries == 1);
  advance(r, b);
  b.clear();
  s->schedule(r, b, 0);
  CHECK(b.entries[0].new_tokens == 14);  // the rest in one chunk, not one token per iteration
  advance(r, b);
  CHECK(reqs[0].generated == 21);
}

TEST_CASE("a waiting request does not pin its conversation's cache / truncated history is not reused") {
  std::vector<Request> reqs{make_req(0, 8, 4, /*conv=*/1, 0, 2), make_req(1, 40, 4, 1, 1, 2)};
  Replica r(6, 4, 0.0, true);  // 24 tokens
  r.reqs = &reqs;
  REQUIRE(r.kv.grow_to(reqs[0], 12));
  r.kv.retain(reqs[0], 12);
  reqs[1].history_tokens = 12;  // prompt 52 tokens: can never be admitted here
  r.waiting = {1};
  auto s = make_scheduler("vllm");
  Batch b;
  s->schedule(r, b, 0);
  CHECK(b.empty());
  CHECK(r.kv.resident(1));  // the claim was undone
  CHECK(reqs[1].blocks == 0);
  CHECK(reqs[1].computed == 0);
  // With its history truncated, the next turn's resident cache is not a valid prefix.
  reqs[1].input_tokens = 4;
  reqs[1].history_truncated = true;
  s->schedule(r, b, 0);
  REQUIRE(b.entries.size() == 1);
  CHECK(reqs[1].cached_tokens == 0);
  CHECK(b.entries[0].new_tokens == 16);
}

TEST_CASE("GQA/MQA KV per GPU: heads split by tensor parallelism, replicated beyond the KV head count") {
  ModelSpec m;
  m.layers = 28;
  m.kv_heads = 2;
  m.head_dim = 128;
  m.dtype_bytes = 2;
  CHECK(m.kv_bytes_per_token_per_gpu(1, 1) == 28 * 1024);  // ChatGLM2-6B: 28 KiB per token
  CHECK(m.kv_bytes_per_token_per_gpu(2, 1) == 14 * 1024);
  // 2 KV heads over 8 GPUs: each GPU keeps one (replicated)
  CHECK(m.kv_bytes_per_token_per_gpu(8, 1) == 14 * 1024);
  CHECK(m.kv_bytes_per_token_per_gpu(8, 2) == 7 * 1024);
}

TEST_CASE("utilization and simulated time do not depend on time-series sampling") {
  auto run = [&](const char* ts) {
    const Node n = load_yaml_string(std::string(R"(
model: tinyllama-1.1b
workload: {kind: llmperf, requests: 40, arrival: {kind: poisson, rate: 5/s}}
outputs: {trace: false, timeseries: )") + ts + ", sample_interval: 1s}\n", "t.yaml");
    auto parsed = registry().parse(n, "study", "", "serving");
    Engine engine(1);
    ServingSim sim(build_serving_config(parsed.params, registry(), 1, nullptr), engine, nullptr);
    Recorder rec;
    ServingRecords records(&rec, "", sim.config().model_tokens_per_llama);
    sim.set_sink(&records);
    sim.run({});
    report_serving(sim.results(), records, "", rec, true);
    return rec.metrics()["serving"];
  };
  const Json a = run("true"), b = run("false");
  CHECK(a["batching"]["utilization"] == b["batching"]["utilization"]);
  CHECK(a["simulated_s"] == b["simulated_s"]);
  CHECK(a["kv_cache"]["occupancy_mean"] == b["kv_cache"]["occupancy_mean"]);
}

TEST_CASE("a named topology sets the cluster and carries every tensor-parallel all-reduce as flows") {
  auto run = [](const std::string& extra) {
    Scenario sc = load_scenario_text(R"(
name: t
model: llama2-7b
topology: dgx-h200
deployment: {replicas: 2, tensor_parallel: 4}
workload: {kind: llmperf, requests: 8, arrival: {kind: closed_loop, clients: 2}}
outputs: {trace: false, requests_csv: false, timeseries: false}
)" + extra, "t.yaml", {}, registry());
    Recorder rec;
    run_into(sc, rec, {});
    return rec.metrics();
  };
  const Json m = run("");
  CHECK(m["serving"]["deployment"]["topology"] == "dgx-h200");
  CHECK(m["serving"]["deployment"]["tp_allreduce"] == "flows on the topology, every iteration");
  // One fused ring (4 flows) per replica iteration: flows grow with the iterations run.
  const double iterations = m["serving"]["batching"]["iterations"].get<double>();
  CHECK(m["world"]["flows"]["started"].get<double>() == doctest::Approx(4 * iterations));
  // The cost model leaves the all-reduce's time to the fabric and still counts its bytes.
  const HardwareSpec hw = load_hardware("h200");
  const ModelSpec md = load_model("llama2-7b");
  CostOptions o;
  o.tensor_parallel = 4;
  o.comm_on_fabric = true;
  CostModel cost(hw, md, o);
  const std::vector<SeqWork> b{{1, 100}, {1, 200}};
  for (const auto& op : cost.iteration(b).ops)
    if (op.op == "allreduce") {
      CHECK(op.ns == 0);
      CHECK(op.bytes == doctest::Approx(2.0 * 32 * 2 * md.hidden * 2));
    }
  CHECK(cost.tp_allreduce_bytes(2) == doctest::Approx(2.0 * 32 * 2 * md.hidden * 2));
}

TEST_CASE("pipeline parallelism: virtual engines keep several batches in flight through the stages") {
  const Node n = load_yaml_string(R"(
model: tinyllama-1.1b
deployment: {pipeline_parallel: 2, cost_tables: none}
router: round_robin
workload: {kind: llmperf, requests: 2, input_tokens: {mean: 100, sd: 0}, output_tokens: {mean: 1, sd: 0},
           arrival: {kind: closed_loop, clients: 2}}
last_mile: {d2h: fixed, d2h_latency: 0us, detokenize_per_token: 0us, stream_per_token: 0us}
outputs: {trace: false}
)", "t.yaml");
  auto parsed = registry().parse(n, "study", "", "serving");
  ServingConfig cfg = build_serving_config(parsed.params, registry(), 1, nullptr);
  CostModel cost(cfg.hardware, cfg.model, cost_options(cfg));
  // Each stage costed as its own 11 layers: the first with the embedding, the last with the LM head.
  const std::vector<SeqWork> prefill{{100, 0}};
  const int64_t T0 = std::llround(cost.stage_ns(prefill, 0)), T1 = std::llround(cost.stage_ns(prefill, 1));
  REQUIRE(T1 > T0);
  CHECK(T1 <= std::llround(cost.iteration_ns(prefill)));  // the old costed stage bounds both
  Engine engine(1);
  ServingSim sim(std::move(cfg), engine, nullptr);
  REQUIRE(sim.replicas().size() == 2);  // one replica, two virtual engines
  CHECK(sim.memory().blocks_per_engine == sim.memory().blocks_per_replica / 2);
  sim.run({});
  REQUIRE(sim.completed() == 2);
  // Engine 0's prefill holds stage 0 for [0, T0) and stage 1 for [T0, T0 + T1); engine 1's
  // batch enters stage 0 at T0, when it frees, leaves it at 2 T0 and waits for stage 1 until
  // T0 + T1 (T1 > T0), which it leaves at T0 + 2 T1.
  CHECK(sim.requests()[0].first_token_ns == T0 + T1);
  CHECK(sim.requests()[1].first_token_ns == T0 + 2 * T1);
}

TEST_CASE("a serving deployment can cost its iterations from derived tables (another device's, scaled by the ratio of ceilings)") {
  const std::string base = "study: serving\nname: t\nmodel: llama3-8b\nhardware: h100-sxm\n"
                           "workload: {kind: llmperf, requests: 40, arrival: {kind: closed_loop, clients: 4}}\n";
  const Json derived = testing::run_text(base, {"deployment.cost_tables=derived"});
  const Json roofline = testing::run_text(base, {"deployment.cost_tables=none"});
  const Json h200 = testing::run_text(base, {"hardware=h200"});
  const double tpot_d = derived["serving"]["latency_ms"]["tpot"]["mean"].get<double>();
  const double tpot_r = roofline["serving"]["latency_ms"]["tpot"]["mean"].get<double>();
  const double tpot_h200 = h200["serving"]["latency_ms"]["tpot"]["mean"].get<double>();
  CHECK(derived["serving"]["deployment"]["cost_source"].get<std::string>().find("derived") != std::string::npos);
  CHECK(tpot_d != doctest::Approx(tpot_r).epsilon(1e-3));  // the tables, not the roofline
  CHECK(tpot_d > tpot_h200);                                // an H100 has less bandwidth than an H200
  // A device whose catalog names no source of derived tables is refused, at the key.
  CHECK_THROWS_WITH_AS(testing::run_text(base, {"hardware=h200", "deployment.cost_tables=derived"}), doctest::Contains("derive"),
                       ConfigError);
}

TEST_CASE("every deployment key reaches the config field it is bound to") {
  const Node n = load_yaml_string(R"(
model: tinyllama-1.1b
hardware: h200
deployment: {replicas: 3, tensor_parallel: 2, pipeline_parallel: 2, nodes: 2, gpus_per_node: 4, max_in_flight: 777,
             gpu_memory_utilization: 0.8, block_size: 32, watermark: 0.05, preemption: swap, swap_space: 8GiB,
             prefix_reuse: false, cost_tables: none, implementation: pytorch-naive, fused_elementwise: true,
             prefill_slicing: {policy: uniform, slices: 3, granularity: 32, min_tokens: 512}}
last_mile: {d2h: fixed, d2h_latency: 21us, detokenize_per_token: 7us, stream_per_token: 3us}
outputs: {trace_max_requests: 9, trace_max_iterations: 11, sample_interval: 2s}
recovery: {reload: 30s, failover_timeout: 5s}
)", "t.yaml");
  auto parsed = registry().parse(n, "study", "", "serving");
  const ServingConfig c = build_serving_config(parsed.params, registry(), 1, nullptr);
  CHECK(c.replicas == 3);
  CHECK(c.tensor_parallel == 2);
  CHECK(c.pipeline_parallel == 2);
  CHECK(c.nodes == 2);
  CHECK(c.gpus_per_node == 4);
  CHECK(c.max_in_flight == 777);
  CHECK(c.gpu_memory_utilization == doctest::Approx(0.8));
  CHECK(c.block_size == 32);
  CHECK(c.watermark == doctest::Approx(0.05));
  CHECK(c.preemption == PreemptionMode::Swap);
  CHECK(c.swap_space_bytes == doctest::Approx(8.0 * (1 << 30)));
  CHECK_FALSE(c.prefix_reuse);
  CHECK(c.tables_dir.empty());
  CHECK(c.implementation == Implementation::PytorchNaive);
  CHECK(c.fused_elementwise);
  CHECK(c.prefill_slicing.policy == PrefillSlicing::Uniform);
  CHECK(c.prefill_slicing.slices == 3);
  CHECK(c.prefill_slicing.granularity == 32);
  CHECK(c.prefill_slicing.min_tokens == 512);
  CHECK(c.last_mile.d2h_fixed_ns == doctest::Approx(21e3));
  CHECK(c.last_mile.detokenize_ns == doctest::Approx(7e3));
  CHECK(c.last_mile.stream_ns == doctest::Approx(3e3));
  CHECK(c.trace_max_requests == 9);
  CHECK(c.trace_max_iterations == 11);
  CHECK(c.sample_interval_ns == 2'000'000'000);
  CHECK(c.reload_ns == 30'000'000'000);
  CHECK(c.failover_timeout_ns == 5'000'000'000);
  // The defaults, and the time series switched off.
  auto d = registry().parse(load_yaml_string("model: tinyllama-1.1b\noutputs: {timeseries: false}\n", "d.yaml"), "study", "", "serving");
  const ServingConfig z = build_serving_config(d.params, registry(), 1, nullptr);
  CHECK(z.replicas == 1);
  CHECK(z.block_size == 16);
  CHECK(z.preemption == PreemptionMode::Recompute);
  CHECK(z.implementation == Implementation::PytorchLean);
  CHECK(z.prefill_slicing.policy == PrefillSlicing::None);
  CHECK(z.sample_interval_ns == 0);
  CHECK(z.reload_ns == 120'000'000'000);
  CHECK(z.max_in_flight == 1'000'000);
}

TEST_CASE("llmperf and arrival keys reach the load they are bound to") {
  auto load = [](const std::string& workload) {
    auto parsed = registry().parse(load_yaml_string("model: tinyllama-1.1b\nworkload: " + workload + "\n", "w.yaml"), "study", "", "serving");
    return build_serving_config(parsed.params, registry(), 1, nullptr);
  };
  ServingConfig g = load(
      "{kind: llmperf, requests: 12, input_tokens: {mean: 40, sd: 0}, output_tokens: {mean: 7, sd: 0}, "
      "conversation: {turns: 3, think_time: 2s}, arrival: {kind: gamma, rate: 4/s, cv: 3}}");
  CHECK(g.workload->total_requests() == 12);
  CHECK(g.workload->arrival().kind == ArrivalSpec::Kind::Gamma);
  CHECK(g.workload->arrival().rate_per_s == doctest::Approx(4));
  CHECK(g.workload->arrival().cv == doctest::Approx(3));
  const auto conv = g.workload->next(0);
  REQUIRE(conv);
  REQUIRE(conv->turns.size() == 3);
  CHECK(conv->turns[0].input_tokens == 40);
  CHECK(conv->turns[0].output_tokens == 7);
  CHECK(g.workload->think_time_ns() > 0);
  ServingConfig p = load("{kind: llmperf, arrival: {kind: poisson, rate: 9/s}}");
  CHECK(p.workload->arrival().kind == ArrivalSpec::Kind::Poisson);
  CHECK(p.workload->arrival().rate_per_s == doctest::Approx(9));
  CHECK(p.workload->total_requests() == 150);
  CHECK(p.workload->think_time_ns() == 0);
  ServingConfig c = load("{kind: llmperf, arrival: {kind: closed_loop, clients: 33}}");
  CHECK(c.workload->arrival().clients == 33);
  CHECK(load("{kind: llmperf}").workload->arrival().clients == 10);
}

namespace {
// Every answered request's record, in the order they end.
struct KeepRecords final : RequestSink {
  std::vector<ServingRequestRecord> rows;
  std::vector<uint32_t> unanswered;
  void answered(const ServingRequestRecord& r) override { rows.push_back(r); }
  void ended(uint32_t id, int32_t) override { unanswered.push_back(id); }
};
bool same_record(const ServingRequestRecord& a, const ServingRequestRecord& b) {
  return a.id == b.id && a.conversation == b.conversation && a.turn == b.turn && a.replica == b.replica &&
         a.arrival_ns == b.arrival_ns && a.first_scheduled_ns == b.first_scheduled_ns && a.first_token_ns == b.first_token_ns &&
         a.last_token_ns == b.last_token_ns && a.max_gap_ns == b.max_gap_ns && a.input_tokens == b.input_tokens &&
         a.history_tokens == b.history_tokens && a.cached_tokens == b.cached_tokens && a.output_tokens == b.output_tokens &&
         a.preemptions == b.preemptions;
}
struct FastForwardRun {
  KeepRecords records;
  Json metrics;
  uint64_t events = 0;
  int64_t fast_forwarded = 0, lazy = 0;
};
FastForwardRun run_serving(const std::string& yaml, bool fast_forward) {
  const RunControl::FastForward mode(fast_forward);
  const Node n = load_yaml_string(yaml, "t.yaml");
  auto parsed = registry().parse(n, "study", "", "serving");
  Engine engine(7);
  ServingSim sim(build_serving_config(parsed.params, registry(), 7, nullptr), engine, nullptr);
  FastForwardRun out;
  Recorder rec;
  ServingRecords summary(&rec, "", sim.config().model_tokens_per_llama);
  struct Both final : RequestSink {
    RequestSink *a, *b;
    void answered(const ServingRequestRecord& r) override { a->answered(r); b->answered(r); }
    void ended(uint32_t id, int32_t c) override { a->ended(id, c); b->ended(id, c); }
  } both;
  both.a = &out.records;
  both.b = &summary;
  sim.set_sink(&both);
  sim.run({});
  report_serving(sim.results(), summary, "", rec, true);
  out.metrics = rec.metrics();
  out.events = sim.events();
  out.fast_forwarded = sim.fast_forwarded_iterations();
  out.lazy = sim.lazy_iterations();
  return out;
}
}  // namespace

TEST_CASE("steady decode fast-forwards with the results of running every iteration as events") {
  // Each case exercises a way out of a steady stretch: arrivals, sequences ending, KV running
  // out (preemption by recompute and by swap), multi-turn cache claims, several replicas'
  // events interleaving, the time-series sampler, a run cut at max_sim_time, each scheduler
  // that can be steady.
  const std::string base = R"(
hardware: a100-80gb
model: llama2-7b
outputs: {trace: false, timeseries: true, sample_interval: 2s}
)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"vllm, Vidur's load", R"(
scheduler: {kind: vllm}
workload: {kind: llmperf, requests: 300, input_tokens: {mean: 550, sd: 0}, output_tokens: {mean: 150, sd: 0},
           arrival: {kind: poisson, rate: 2/s}}
)"},
      {"vllm, KV tight, recompute", R"(
deployment: {gpu_memory_utilization: 0.2}
scheduler: {kind: vllm}
workload: {kind: llmperf, requests: 300, input_tokens: {mean: 900, sd: 300}, output_tokens: {mean: 400, sd: 200},
           arrival: {kind: poisson, rate: 40/s}}
)"},
      {"vllm, KV tight, swap", R"(
deployment: {gpu_memory_utilization: 0.2, preemption: swap, swap_space: 2GiB}
scheduler: {kind: vllm}
workload: {kind: llmperf, requests: 300, input_tokens: {mean: 900, sd: 300}, output_tokens: {mean: 400, sd: 200},
           arrival: {kind: poisson, rate: 40/s}}
)"},
      {"sarathi, multi-turn with reuse, two replicas", R"(
deployment: {replicas: 2, prefix_reuse: true}
router: {kind: kv_affinity}
scheduler: {kind: sarathi}
workload: {kind: llmperf, requests: 240, input_tokens: {mean: 300, sd: 100}, output_tokens: {mean: 120, sd: 60},
           conversation: {turns: 4, think_time: 2s}, arrival: {kind: poisson, rate: 3/s}}
)"},
      {"orca, closed loop", R"(
scheduler: {kind: orca}
workload: {kind: llmperf, requests: 200, input_tokens: {mean: 400, sd: 100}, output_tokens: {mean: 200, sd: 100},
           arrival: {kind: closed_loop, clients: 6}}
)"},
      {"vllm_chunked, its default budget", R"(
scheduler: {kind: vllm_chunked}
workload: {kind: llmperf, requests: 300, input_tokens: {mean: 550, sd: 100}, output_tokens: {mean: 150, sd: 50},
           arrival: {kind: poisson, rate: 4/s}}
)"},
      {"vllm_chunked, a budget below the running decodes", R"(
scheduler: {kind: vllm_chunked, max_num_batched_tokens: 8}
workload: {kind: llmperf, requests: 120, input_tokens: {mean: 40, sd: 0}, output_tokens: {mean: 60, sd: 20},
           arrival: {kind: closed_loop, clients: 16}}
)"},
      // The lazy stretch's ways out (decode_lazily): a block size other than 16; the host
      // thread's detokenizing outlasting an iteration (20 sequences x 1 ms against steps of
      // about 15 ms: it does for some batches, not others); blocks running short while
      // conversations' caches hold the rest (evicted by the iteration-by-iteration path).
      {"vllm, block size 7, slow detokenizing", R"(
deployment: {block_size: 7}
last_mile: {detokenize_per_token: 1ms}
scheduler: {kind: vllm}
workload: {kind: llmperf, requests: 300, input_tokens: {mean: 300, sd: 100}, output_tokens: {mean: 150, sd: 60},
           arrival: {kind: poisson, rate: 6/s}}
)"},
      {"vllm, multi-turn reuse, KV tight", R"(
deployment: {gpu_memory_utilization: 0.2, prefix_reuse: true}
scheduler: {kind: vllm}
workload: {kind: llmperf, requests: 300, input_tokens: {mean: 900, sd: 300}, output_tokens: {mean: 300, sd: 150},
           conversation: {turns: 3, think_time: 1s}, arrival: {kind: poisson, rate: 20/s}}
)"},
      {"vllm, cut at max_sim_time", R"(
max_sim_time: 20s
scheduler: {kind: vllm}
workload: {kind: llmperf, requests: 400, input_tokens: {mean: 550, sd: 100}, output_tokens: {mean: 300, sd: 100},
           arrival: {kind: poisson, rate: 2/s}}
)"},
  };
  for (const auto& [name, yaml] : cases) {
    CAPTURE(name);
    const FastForwardRun on = run_serving(base + yaml, true), off = run_serving(base + yaml, false);
    CHECK(on.fast_forwarded > 0);
    CHECK(on.lazy > 0);  // (decode_lazily ran: its iterations were compared too)
    CHECK(off.fast_forwarded == 0);
    CHECK(on.events == off.events);
    REQUIRE(on.records.rows.size() == off.records.rows.size());
    CHECK(!on.records.rows.empty());
    size_t differ = 0;
    for (size_t i = 0; i < on.records.rows.size(); ++i) differ += same_record(on.records.rows[i], off.records.rows[i]) ? 0 : 1;
    CHECK(differ == 0);
    CHECK(on.records.unanswered == off.records.unanswered);
    CHECK(on.metrics.dump() == off.metrics.dump());
  }
  // The KV-tight cases do preempt (their stretches end where a sequence cannot grow).
  CHECK(run_serving(base + cases[1].second, true).metrics["serving"]["kv_cache"]["preemptions"].get<int64_t>() > 0);
}

TEST_CASE("a steady-decode stretch gives the engine back often enough for the run's budgets") {
  // 64 requests arrive at once, then decode 8000 tokens each with nothing else due: one
  // stretch could run the whole tail (16,000 events) inside a single engine step. It yields
  // every 1024 iterations, so an event budget stops the run within the engine's check
  // interval (4096 events) plus one yield (2 x 1024).
  const Node n = load_yaml_string(R"(
hardware: h200
model: llama3-8b
scheduler: {kind: vllm}
workload: {kind: llmperf, requests: 64, input_tokens: {mean: 10, sd: 0}, output_tokens: {mean: 8000, sd: 0},
           arrival: {kind: poisson, rate: 1000000/s}}
outputs: {trace: false, timeseries: false}
)", "t.yaml");
  auto parsed = registry().parse(n, "study", "", "serving");
  Engine engine(1);
  ServingSim sim(build_serving_config(parsed.params, registry(), 1, nullptr), engine, nullptr);
  RunControl::get().set_limits(1000, 0);
  CHECK_THROWS_AS(sim.run({}), RunStopped);
  RunControl::get().clear();
  CHECK(sim.fast_forwarded_iterations() > 0);
  CHECK(engine.events_processed() > 1000);
  CHECK(engine.events_processed() <= 1000 + 4096 + 2 * 1024 + 4);
}
