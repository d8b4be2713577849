// Prefix caching across requests: the block manager's shared prefix entries (publish, claim,
// holders, LRU eviction), hit rate and tokens saved on a hand-built load, prefix-aware routing,
// and bad input.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "test_support.h"

#include "config/node.h"
#include "registry/registry.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "workloads/serving/kv_cache.h"
#include "workloads/serving/router.h"
#include "workloads/serving/scheduler.h"

using namespace sluice;
using namespace sluice::serving;
using sluice::testing::registry;
using sluice::testing::run_text;

namespace {
Request with_prefix(uint32_t id, int32_t prefix_id, int32_t prefix_tokens, int32_t input) {
  Request q;
  q.id = q.serial = id;
  q.prefix_id = prefix_id;
  q.prefix_tokens = prefix_tokens;
  q.input_tokens = input;
  q.output_tokens = 4;
  return q;
}
}  // namespace

TEST_CASE("prefix cache: a prefilled prefix's whole blocks are shared, held while any request holds them, then cached and evicted LRU") {
  BlockManager kv(20, 4, 0.0, /*reuse=*/false, /*prefix_caching=*/true);
  Request a = with_prefix(0, 7, 10, 12);
  REQUIRE(kv.grow_to(a, 12));
  a.computed = 12;
  kv.publish_prefix(a);  // 10 prefix tokens: 2 whole blocks of 4
  CHECK(a.shared_blocks == 2);
  CHECK(a.blocks == 3);
  CHECK(kv.prefix_resident(7));
  Request b = with_prefix(1, 7, 10, 14);
  CHECK(kv.claim_prefix(b) == 8);  // 2 blocks, 8 tokens
  CHECK(b.blocks == 2);
  REQUIRE(kv.grow_to(b, 14));  // 4 blocks: 2 shared, 2 its own
  CHECK(b.blocks == 4);
  CHECK(kv.free_blocks() == 15);  // 3 of a's + 2 of b's own
  CHECK(kv.cached_blocks() == 0);
  kv.release(a);  // b still holds the prefix
  CHECK(kv.free_blocks() == 16);
  CHECK(kv.cached_blocks() == 0);
  kv.release(b);  // nobody holds it: cached
  CHECK(kv.free_blocks() == 18);
  CHECK(kv.cached_blocks() == 2);
  CHECK(kv.used_blocks() == 0);
  // A prefix never takes the prompt's last token: a prompt of exactly the prefix keeps one to compute.
  Request c = with_prefix(2, 7, 10, 8);
  CHECK(kv.claim_prefix(c) == 4);
  kv.release(c);
  // A sequence needing every block evicts the cached prefix.
  Request big = with_prefix(3, -1, 0, 80);
  REQUIRE(kv.grow_to(big, 80));
  CHECK_FALSE(kv.prefix_resident(7));
  CHECK(kv.cached_blocks() == 0);
  CHECK(kv.free_blocks() == 0);
}

TEST_CASE("prefix cache on a hand-built load: one client, one system prompt, every request after the first hits") {
  const std::string text = R"(name: t
model: tinyllama-1.1b
hardware: h200
deployment: {replicas: 1, cost_tables: none}
workload:
  kind: llmperf
  requests: 5
  input_tokens: {mean: 50, sd: 0}
  output_tokens: {mean: 10, sd: 0}
  shared_prefix: {tokens: 1000, fraction: 1, groups: 1}
  arrival: {kind: closed_loop, clients: 1}
outputs: {trace: false}
)";
  const Json m = run_text(text)["serving"];
  const Json& p = m["kv_cache"]["prefix_caching"];
  CHECK(p["requests_with_prefix"].get<int>() == 5);
  CHECK(p["hits"].get<int>() == 4);
  CHECK(p["hit_rate"].get<double>() == doctest::Approx(0.8));
  CHECK(p["prefix_tokens"].get<int>() == 5000);
  CHECK(p["tokens_saved"].get<int>() == 4 * 992);  // 62 whole blocks of 16 of the 1000-token prefix
  const Json off = run_text(text, {"deployment.prefix_caching=false"})["serving"];
  CHECK(off["kv_cache"]["prefix_caching"]["hits"].get<int>() == 0);
  // Four of five prefills computed 58 tokens after a cached 992 instead of 1050: TTFT drops.
  CHECK(m["latency_ms"]["ttft"]["p50"].get<double>() < 0.5 * off["latency_ms"]["ttft"]["p50"].get<double>());
  CHECK(m["latency_ms"]["ttft"]["max"].get<double>() == doctest::Approx(off["latency_ms"]["ttft"]["max"].get<double>()).epsilon(0.02));
  // A load without shared prefixes reports nothing about them.
  const Json none = run_text(text, {"workload.shared_prefix.tokens=0"})["serving"];
  CHECK_FALSE(none["kv_cache"].contains("prefix_caching"));
}

TEST_CASE("prefix cache on a hand-built trace: rows name their shared prefix (prefix_id, prefix_tokens), CSV and JSONL alike") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sluice-prefix-trace-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "t.csv") << "arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n"
                                    "0.0,1050,10,sys,1000\n1.0,1060,10,sys,1000\n2.0,60,10,,\n3.0,1070,10,sys,1000\n"
                                    "4.0,2040,10,fewshot,2000\n5.0,2050,10,fewshot,2000\n";
    std::ofstream(dir / "t.jsonl") << R"({"arrival_s": 0.0, "input_tokens": 1050, "output_tokens": 10, "prefix_id": "sys", "prefix_tokens": 1000})" "\n"
                                      R"({"arrival_s": 1.0, "input_tokens": 1060, "output_tokens": 10, "prefix_id": "sys", "prefix_tokens": 1000})" "\n"
                                      R"({"arrival_s": 2.0, "input_tokens": 60, "output_tokens": 10})" "\n"
                                      R"({"arrival_s": 3.0, "input_tokens": 1070, "output_tokens": 10, "prefix_id": "sys", "prefix_tokens": 1000})" "\n"
                                      R"({"arrival_s": 4.0, "input_tokens": 2040, "output_tokens": 10, "prefix_id": 7, "prefix_tokens": 2000})" "\n"
                                      R"({"arrival_s": 5.0, "input_tokens": 2050, "output_tokens": 10, "prefix_id": 7, "prefix_tokens": 2000})" "\n";
  }
  auto run = [&](const std::string& file, std::vector<std::string> sets = {}) {
    return run_text("name: t\nmodel: tinyllama-1.1b\nhardware: h200\ndeployment: {replicas: 1, cost_tables: none}\n"
                    "workload: {kind: trace, file: " + (dir / file).string() + "}\noutputs: {trace: false}\n", sets)["serving"];
  };
  for (const char* file : {"t.csv", "t.jsonl"}) {
    CAPTURE(file);
    const Json m = run(file);
    const Json& p = m["kv_cache"]["prefix_caching"];
    // Five rows name a prefix; the first of each prefix computes it, the three after hit: the
    // system prompt's 62 whole blocks of 16 (992 tokens) twice, the few-shot's 125 (2000) once.
    CHECK(p["requests_with_prefix"].get<int>() == 5);
    CHECK(p["hits"].get<int>() == 3);
    CHECK(p["prefix_tokens"].get<int>() == 7000);
    CHECK(p["tokens_saved"].get<int>() == 2 * 992 + 2000);
    const Json off = run(file, {"deployment.prefix_caching=false"});
    CHECK(off["kv_cache"]["prefix_caching"]["hits"].get<int>() == 0);
    CHECK(m["latency_ms"]["ttft"]["p50"].get<double>() < off["latency_ms"]["ttft"]["p50"].get<double>());
  }
  // Bad rows are refused at their line: a length that differs for one prefix, a prefix longer
  // than its prompt, an id without a length, a prefix on a conversation's later turn.
  auto refused = [&](const std::string& body, const std::string& why) {
    std::ofstream(dir / "bad.csv") << body;
    CHECK_THROWS_WITH(run("bad.csv"), doctest::Contains(why.c_str()));
  };
  refused("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,5,a,50\n1,100,5,a,60\n", "bad.csv:3:1");
  refused("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,5,a,50\n1,100,5,a,60\n", "one prefix, one length");
  refused("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,5,a,150\n", "exceeds input_tokens");
  refused("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,5,a,\n", "both or neither");
  refused("arrival_s,input_tokens,output_tokens,conversation,prefix_id,prefix_tokens\n0,100,5,c,a,50\n9,100,5,c,a,50\n",
          "later turn of conversation c");
  fs::remove_all(dir);
}

TEST_CASE("prefix-aware routing sends a request where its prefix is cached, within the load bound") {
  std::vector<Request> reqs{with_prefix(0, 3, 64, 100)};
  std::vector<std::unique_ptr<Replica>> rs;
  for (int i = 0; i < 3; ++i) {
    rs.push_back(std::make_unique<Replica>(100, 16, 0.0, false, true));
    rs.back()->reqs = &reqs;
  }
  Request holder = with_prefix(9, 3, 64, 100);
  REQUIRE(rs[2]->kv.grow_to(holder, 100));
  holder.computed = 100;
  rs[2]->kv.publish_prefix(holder);
  auto parsed = registry().parse(load_yaml_string("{kind: prefix_affinity, max_imbalance: 2}", "t"), "router", "router");
  auto router = registry().factory<RouterFactory>(*parsed.info)(parsed.params);
  CHECK(router->route(reqs[0], rs) == 2);
  rs[2]->routed = 3;  // three more outstanding than the others: beyond the bound
  CHECK(router->route(reqs[0], rs) == 0);
  rs[2]->routed = 2;
  CHECK(router->route(reqs[0], rs) == 2);
  Request plain = with_prefix(1, -1, 0, 100);
  CHECK(router->route(plain, rs) == 0);
}

TEST_CASE("a shared prefix longer than the model's context is refused where it is written") {
  const std::string text = R"(name: t
model: tinyllama-1.1b
workload: {kind: llmperf, requests: 5, shared_prefix: {tokens: 5000}}
)";
  CHECK_THROWS_WITH_AS(run_text(text), doctest::Contains("shared_prefix"), ConfigError);
}

TEST_CASE("KV host tier: a prefix evicted from HBM moves to host memory and comes back by a copy, the host's LRU dropped when full") {
  BlockManager kv(20, 4, 0.0, false, true);
  kv.set_host_tier(5);  // room for one 4-block prefix
  Request a = with_prefix(0, 1, 16, 20);
  REQUIRE(kv.grow_to(a, 20));
  a.computed = 20;
  kv.publish_prefix(a);
  kv.release(a);  // prefix 1 (4 blocks) cached in HBM
  Request b = with_prefix(1, 2, 16, 20);
  REQUIRE(kv.grow_to(b, 20));
  b.computed = 20;
  kv.publish_prefix(b);
  kv.release(b);  // prefix 2 cached too: 8 cached, 12 free
  Request big = with_prefix(2, -1, 0, 64);
  REQUIRE(kv.grow_to(big, 64));  // 16 blocks: evicts prefix 1 (LRU) to the host
  CHECK_FALSE(kv.prefix_resident(1));
  CHECK(kv.host_used_blocks() == 4);
  CHECK(kv.tier_counts().offloaded_blocks == 4);
  kv.release(big);
  // Prefix 1 again: fetched from the host (4 blocks to copy), not recomputed.
  Request c = with_prefix(3, 1, 16, 20);
  CHECK(kv.claim_prefix(c) == 16);
  CHECK(kv.take_fetched() == 4);
  CHECK(kv.take_fetched() == 0);
  CHECK(kv.tier_counts().hits_host == 1);
  CHECK(kv.host_used_blocks() == 0);
  CHECK(kv.prefix_resident(1));
  kv.release(c);
  // Evict both prefixes: the host holds one, so the first one there is dropped for the second.
  Request all = with_prefix(4, -1, 0, 80);
  REQUIRE(kv.grow_to(all, 80));
  CHECK(kv.host_used_blocks() == 4);
  CHECK(kv.tier_counts().dropped_blocks == 4);
}

TEST_CASE("with a host tier, prefixes a replica evicted are fetched back over the host link: more hits, the bytes counted, lower TTFT") {
  const std::string base = std::string(SLUICE_TESTS_DIR) + "/../scenarios/prefix-system-prompt-base.yaml";
  Scenario off_sc = load_scenario(base, {"router.kind=least_outstanding", "workload.requests=2500"}, registry());
  Scenario on_sc = load_scenario(base, {"router.kind=least_outstanding", "workload.requests=2500", "deployment.kv_host_cache=200GiB"}, registry());
  Recorder off_rec, on_rec;
  run_into(off_sc, off_rec, {});
  run_into(on_sc, on_rec, {});
  const Json& off = off_rec.metrics()["serving"];
  const Json& on = on_rec.metrics()["serving"];
  CHECK_FALSE(off["kv_cache"].contains("host_tier"));
  const Json& t = on["kv_cache"]["host_tier"];
  CHECK(t["prefix_claims_from_host"].get<int64_t>() > 0);
  // Each fetch is a whole prefix: 2000 tokens of Llama-2-7B's 512 KiB a token.
  CHECK(t["fetched_bytes"].get<double>() == doctest::Approx(t["prefix_claims_from_host"].get<double>() * 2000 * 524288));
  CHECK(on["kv_cache"]["prefix_caching"]["hit_rate"].get<double>() > off["kv_cache"]["prefix_caching"]["hit_rate"].get<double>());
  CHECK(on["latency_ms"]["ttft"]["p50"].get<double>() < off["latency_ms"]["ttft"]["p50"].get<double>());
}

TEST_CASE("KV SSD tier: what the host tier evicts moves down to the SSD, a claim there is read back, or recomputed when that is faster") {
  BlockManager kv(20, 4, 0.0, false, true);
  kv.set_host_tier(5);  // one 4-block prefix
  kv.set_ssd_tier(8);   // two
  auto cache = [&](uint32_t id, int32_t prefix) {
    Request a = with_prefix(id, prefix, 16, 20);
    REQUIRE(kv.grow_to(a, 20));
    a.computed = 20;
    kv.publish_prefix(a);
    kv.release(a);
  };
  cache(0, 1);
  cache(1, 2);
  cache(2, 3);  // three prefixes cached in HBM (12 blocks), 8 free
  Request all = with_prefix(3, -1, 0, 80);
  REQUIRE(kv.grow_to(all, 80));  // every block: 1 goes to the host, then 2 pushes 1 down to the SSD, then 3 pushes 2 down
  CHECK(kv.host_used_blocks() == 4);
  CHECK(kv.ssd_used_blocks() == 8);
  CHECK(kv.tier_counts().to_ssd_blocks == 8);
  CHECK(kv.tier_counts().dropped_blocks == 0);
  kv.release(all);
  // Prefix 1 is on the SSD: read back (4 blocks over the host link, all 4 from the drive).
  Request c = with_prefix(4, 1, 16, 20);
  CHECK(kv.claim_prefix(c) == 16);
  CHECK(kv.tier_counts().hits_ssd == 1);
  CHECK(kv.take_fetched() == 4);
  CHECK(kv.take_fetched_ssd() == 4);
  CHECK(kv.ssd_used_blocks() == 4);
  kv.release(c);
  // Prefix 3 is on the host: copied back, nothing read from the drive.
  Request d = with_prefix(5, 3, 16, 20);
  CHECK(kv.claim_prefix(d) == 16);
  CHECK(kv.take_fetched() == 4);
  CHECK(kv.take_fetched_ssd() == 0);
  kv.release(d);
  // A policy that finds the read slower than a prefill: prefix 2 stays on the SSD, computed again.
  kv.set_ssd_policy([](int64_t) { return false; });
  Request e = with_prefix(6, 2, 16, 20);
  CHECK(kv.claim_prefix(e) == 0);
  CHECK(kv.tier_counts().ssd_skipped == 1);
  CHECK(kv.ssd_used_blocks() == 4);
  // ...and published again from its new prefill, then evicted again: the tiers hold one copy of
  // it (the older one replaced), their counts stay whole, and it can still be found.
  REQUIRE(kv.grow_to(e, 20));
  e.computed = 20;
  kv.publish_prefix(e);
  kv.release(e);
  Request all2 = with_prefix(7, -1, 0, 80);
  REQUIRE(kv.grow_to(all2, 80));
  CHECK(kv.host_used_blocks() + kv.ssd_used_blocks() <= 12);
  CHECK(kv.ssd_used_blocks() <= 8);
  kv.release(all2);
  kv.set_ssd_policy({});
  for (int32_t prefix : {1, 2, 3}) {
    Request f = with_prefix(static_cast<uint32_t>(10 + prefix), prefix, 16, 20);
    const int64_t got = kv.claim_prefix(f);
    CHECK((got == 16 || got == 0));
    kv.release(f);
  }
  Request all3 = with_prefix(20, -1, 0, 80);
  CHECK(kv.grow_to(all3, 80));  // every block can still be had: nothing was counted twice
}

TEST_CASE("with an SSD tier: a 7B model on an H200 prefills faster than its drives read, so when_faster recomputes, and a 70B at TP 8 gains") {
  const std::string base = std::string(SLUICE_TESTS_DIR) + "/../scenarios/prefix-system-prompt-base.yaml";
  auto run = [&](std::vector<std::string> sets) {
    sets.push_back("router.kind=least_outstanding");
    Scenario sc = load_scenario(base, sets, registry());
    Recorder rec;
    run_into(sc, rec, {});
    return rec.metrics()["serving"];
  };
  const auto mean = [](const Json& m) { return m["latency_ms"]["ttft"]["mean"].get<double>(); };
  // Llama-2-7B (512 KiB of KV a token): a 2000-token prefix is 1 GB, 160 ms from one drive.
  const std::vector<std::string> small = {"workload.requests=2500"};
  auto with = [](std::vector<std::string> v, const std::string& x) { v.push_back(x); return v; };
  const Json none = run(small);
  const Json always = run(with(small, "deployment.kv_ssd_cache=2TiB"));
  const Json faster = run(with(with(small, "deployment.kv_ssd_cache=2TiB"), "deployment.kv_ssd_fetch=when_faster"));
  const Json& t = always["kv_cache"]["ssd_tier"];
  CHECK(t["prefix_claims_from_ssd"].get<int64_t>() > 0);
  CHECK(t["read_bytes"].get<double>() == doctest::Approx(t["prefix_claims_from_ssd"].get<double>() * 2000 * 524288));
  CHECK(mean(always) > mean(none));  // the reads cost more than the prefills they save
  CHECK(faster["kv_cache"]["ssd_tier"]["prefix_claims_from_ssd"].get<int64_t>() == 0);
  CHECK(faster["kv_cache"]["ssd_tier"]["recomputed_instead"].get<int64_t>() > 0);
  CHECK(mean(faster) == doctest::Approx(mean(none)));
  // Llama-2-70B at TP 8 (GQA: 320 KiB a token over 8 GPUs' drives, ten times the compute), 1500
  // prefixes of 4000 tokens, more than HBM holds: reads beat prefills, and when_faster agrees.
  const std::vector<std::string> big = {"model=llama2-70b", "deployment.tensor_parallel=8", "deployment.replicas=1",
                                        "workload.arrival.rate=6/s", "workload.requests=3000", "workload.shared_prefix.groups=1500",
                                        "workload.shared_prefix.tokens=4000"};
  const Json b_none = run(big);
  const Json b_ssd = run(with(with(big, "deployment.kv_ssd_cache=4TiB"), "deployment.kv_ssd_fetch=when_faster"));
  CHECK(b_ssd["kv_cache"]["ssd_tier"]["prefix_claims_from_ssd"].get<int64_t>() > 0);
  CHECK(b_ssd["kv_cache"]["ssd_tier"]["recomputed_instead"].get<int64_t>() == 0);
  CHECK(b_ssd["kv_cache"]["prefix_caching"]["hit_rate"].get<double>() > b_none["kv_cache"]["prefix_caching"]["hit_rate"].get<double>());
  CHECK(mean(b_ssd) < 0.9 * mean(b_none));
  // A tier with no path to it is refused where it is written: the A100's catalog names no drives.
  CHECK_THROWS_WITH_AS(run({"hardware=a100-80gb", "deployment.kv_ssd_cache=1TiB"}), doctest::Contains("ssd_read_bandwidth"), ConfigError);
}
