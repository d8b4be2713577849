// The remote KV pool (deployment.kv_remote_cache, Mooncake Store): what one replica lets go of,
// another fetches; LRU in the pool; fetches as flows over the fabric; conversation caches in the
// tiers and written through to the pool; bad input.
#include <doctest/doctest.h>

#include <filesystem>

#include "test_support.h"

#include "engine/run_control.h"
#include "workloads/serving/kv_cache.h"

using namespace sluice;
using namespace sluice::serving;
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

// Caches prefix `prefix` (16 tokens: 4 blocks of 4) in `kv`, held by nobody.
void cache(BlockManager& kv, uint32_t id, int32_t prefix) {
  Request a = with_prefix(id, prefix, 16, 20);
  REQUIRE(kv.grow_to(a, 20));
  a.computed = 20;
  kv.publish_prefix(a);
  kv.release(a);
}

// A turn of conversation `conv` that ended with `tokens` tokens, kept resident in `kv`.
void finish_turn(BlockManager& kv, uint32_t id, uint32_t conv, int32_t tokens) {
  Request a;
  a.id = a.serial = id;
  a.conversation = conv;
  a.turn = 0;
  a.turns_total = 3;
  a.input_tokens = tokens;
  REQUIRE(kv.grow_to(a, tokens));
  a.computed = tokens;
  kv.retain(a, tokens);
}

Request next_turn(uint32_t id, uint32_t conv, int32_t history) {
  Request q;
  q.id = q.serial = id;
  q.conversation = conv;
  q.turn = 1;
  q.turns_total = 3;
  q.history_tokens = history;
  q.input_tokens = 4;
  return q;
}

std::string base_text() {
  return sluice::slurp((std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios/prefix-system-prompt-base.yaml").string());
}
}  // namespace

TEST_CASE("remote KV pool: a prefix one replica lets go of is fetched by another, from the first one's host, and the pool keeps it") {
  RemoteKvStore pool(8);  // two 4-block prefixes
  BlockManager a(20, 4, 0.0, false, true), b(20, 4, 0.0, false, true);
  a.set_remote_tier(&pool, 0);
  b.set_remote_tier(&pool, 1);
  cache(a, 0, 1);
  cache(a, 1, 2);
  cache(a, 2, 3);
  Request all = with_prefix(3, -1, 0, 80);
  REQUIRE(a.grow_to(all, 80));  // every block of a: its three prefixes leave HBM, no local tier: to the pool
  CHECK(a.tier_counts().to_remote_blocks == 12);
  CHECK(pool.used_blocks() == 8);       // the pool holds two of them...
  CHECK(pool.dropped_blocks() == 4);    // ...its least recently used (prefix 1) dropped
  CHECK_FALSE(pool.contains(1));
  // Replica b has never seen prefix 2: it fetches it from a's host memory.
  Request c = with_prefix(4, 2, 16, 20);
  CHECK(b.claim_prefix(c) == 16);
  CHECK(b.tier_counts().hits_remote == 1);
  REQUIRE(b.fetched_remote().size() == 1);
  CHECK(b.fetched_remote()[0] == std::make_pair(0, int64_t{4}));
  CHECK(pool.contains(2));  // kept for the others
  // Prefix 1 is nowhere: prefilled again.
  Request d = with_prefix(5, 1, 16, 20);
  CHECK(b.claim_prefix(d) == 0);
  CHECK(b.tier_counts().hits_remote == 1);
}

TEST_CASE("remote KV pool end to end: one pool shared by the replicas saves more prefills than a host tier of twice its size per replica") {
  const std::vector<std::string> common = {"router.kind=least_outstanding", "workload.requests=2000"};
  auto with = [&](std::vector<std::string> more) {
    auto s = common;
    s.insert(s.end(), more.begin(), more.end());
    return run_text(base_text(), s)["serving"];
  };
  const Json none = with({});
  const Json host = with({"deployment.kv_host_cache=200GiB"});   // 800 GiB over the four replicas
  const Json remote = with({"deployment.kv_remote_cache=400GiB"});
  const Json& t = remote["kv_cache"]["remote_tier"];
  CHECK(t["prefix_claims_from_remote"].get<int64_t>() > 0);
  // Each fetch is a whole prefix: 2000 tokens of Llama-2-7B's 512 KiB a token.
  CHECK(t["fetched_bytes"].get<double>() == doctest::Approx(t["prefix_claims_from_remote"].get<double>() * 2000 * 524288));
  CHECK(t["moved_in_bytes"].get<double>() > 0);
  const auto hit = [](const Json& m) { return m["kv_cache"]["prefix_caching"]["hit_rate"].get<double>(); };
  CHECK(hit(remote) > hit(host));
  CHECK(hit(host) > hit(none));
  CHECK(remote["latency_ms"]["ttft"]["mean"].get<double>() < none["latency_ms"]["ttft"]["mean"].get<double>());
  CHECK(remote["requests"]["completed"] == 2000);
  // The fetches are flows on the fabric: over a 1 GB/s host link a 1 GB prefix takes a second, slower than prefilling it.
  const Json slow = with({"deployment.kv_remote_cache=400GiB", "hardware={catalog: h200, pcie_bandwidth: 1GB/s}"});
  CHECK(slow["latency_ms"]["ttft"]["mean"].get<double>() > 10 * none["latency_ms"]["ttft"]["mean"].get<double>());
  // The same results with and without the steady-decode fast-forward.
  const RunControl::FastForward off(false);
  CHECK(with({"deployment.kv_remote_cache=400GiB"}).dump() == remote.dump());
}

TEST_CASE("remote KV pool: bad input is refused at its key") {
  const std::string base = base_text();
  CHECK_THROWS_WITH_AS(run_text(base, {"deployment.kv_remote_cache=1GiB", "deployment.prefix_caching=false"}),
                       doctest::Contains("deployment.kv_remote_cache"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(base, {"deployment.kv_remote_cache=1GiB", "deployment.pipeline_parallel=2"}),
                       doctest::Contains("pipeline-parallel"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(base, {"deployment.kv_remote_cache=-1GiB"}), doctest::Contains("deployment.kv_remote_cache"), ConfigError);
  // A topology whose devices have no host: nowhere for the pool to live.
  const std::string no_hosts = R"(name: t
cluster:
  hardware: h200
  topology:
    kind: explicit
    nodes:
      - {name: s0, kind: switch}
      - {name: d0, kind: device, group: 0}
      - {name: d1, kind: device, group: 1}
    links:
      - {a: d0, b: s0, bandwidth: 100GB/s, latency: 0ns}
      - {a: d1, b: s0, bandwidth: 100GB/s, latency: 0ns}
workloads:
  - name: chat
    kind: serving
    model: tinyllama-1.1b
    deployment: {replicas: 2, cost_tables: none, kv_remote_cache: 1GiB}
    workload: {kind: llmperf, requests: 4}
    place: {devices: [0, 1]}
)";
  CHECK_THROWS_WITH_AS(run_text(no_hosts), doctest::Contains("gives 2 of these 2 devices no host"), ConfigError);
}

TEST_CASE("conversation caches in the tiers: evicted to host memory and fetched back, and written through to the pool for another replica") {
  {
    BlockManager kv(10, 4, 0.0, /*reuse=*/true, true);
    kv.set_host_tier(8);
    finish_turn(kv, 0, 7, 14);  // 4 blocks resident
    Request big = next_turn(1, 99, 0);
    big.turn = 0;
    REQUIRE(kv.grow_to(big, 40));  // every block: the conversation's cache moves to the host tier
    CHECK(kv.host_used_blocks() == 4);
    CHECK_FALSE(kv.resident(7));
    kv.release(big);
    Request q = next_turn(2, 7, 14);
    CHECK(kv.claim(q, 14) == 14);  // all of its history, copied back over the host link
    CHECK(kv.take_fetched() == 4);
    CHECK(kv.tier_counts().conversation_fetches == 1);
    CHECK(kv.host_used_blocks() == 0);
  }
  RemoteKvStore pool(100);
  BlockManager a(20, 4, 0.0, true, true), b(20, 4, 0.0, true, true);
  a.set_remote_tier(&pool, 0);
  b.set_remote_tier(&pool, 1);
  finish_turn(a, 0, 7, 10);  // turn 1 on a: resident there and in the pool
  CHECK(a.take_offloaded() == 3);  // the write-through copy into a's host memory
  Request q = next_turn(1, 7, 10);
  CHECK(b.claim(q, 10) == 10);  // turn 2 on b: from the pool, a's host its home
  REQUIRE(b.fetched_remote().size() == 1);
  CHECK(b.fetched_remote()[0] == std::make_pair(0, int64_t{3}));
  b.fetched_remote().clear();
  q.computed = 10;
  REQUIRE(b.grow_to(q, 22));
  q.computed = 22;
  b.retain(q, 22);  // turn 2 ends on b: the pool now holds its 22 tokens, b its home
  // Turn 3 back on a: a's resident cache (10 tokens) is older than the pool's (22): the pool's is taken.
  Request t3 = next_turn(2, 7, 22);
  CHECK(a.claim(t3, 22) == 22);
  REQUIRE(a.fetched_remote().size() == 1);
  CHECK(a.fetched_remote()[0] == std::make_pair(1, int64_t{6}));
  CHECK_FALSE(a.resident(7));
}

TEST_CASE("conversation caches in the remote pool end to end: round-robin routing reuses every later turn's history") {
  const std::string text =
      sluice::slurp((std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios/multiturn-base.yaml").string());
  const Json rr = run_text(text, {"router.kind=round_robin"})["serving"];
  const Json pooled = run_text(text, {"router.kind=round_robin", "deployment.kv_remote_cache=100GiB"})["serving"];
  CHECK(rr["kv_cache"]["reuse_hit_rate"].get<double>() < 0.6);
  CHECK(pooled["kv_cache"]["reuse_hit_rate"].get<double>() == 1.0);
  CHECK(pooled["kv_cache"]["reused_history_fraction"].get<double>() > 0.99);
  CHECK(pooled["kv_cache"]["remote_tier"]["conversation_fetches"].get<int64_t>() > 1000);
  CHECK(pooled["latency_ms"]["ttft"]["mean"].get<double>() < rr["latency_ms"]["ttft"]["mean"].get<double>());
  const RunControl::FastForward off(false);
  CHECK(run_text(text, {"router.kind=round_robin", "deployment.kv_remote_cache=100GiB"})["serving"].dump() == pooled.dump());
}
