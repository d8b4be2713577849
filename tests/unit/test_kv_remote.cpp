// The remote KV pool (deployment.kv_remote_cache, Mooncake Store): what one replica lets go of,
// another fetches; LRU in the pool; fetches as flows over the fabric; bad input.
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
