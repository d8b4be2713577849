// The world: workloads on one engine and one fabric, placement, training pipelines.
#include <doctest/doctest.h>

#include "test_support.h"

#include <fstream>
#include <map>
#include <iterator>

#include "run/runner.h"
#include "world/placement.h"
#include "world/world.h"
#include "world/world_study.h"
#include "network/generators.h"
#include "config/node.h"
#include "hardware/spec.h"

using namespace sluice;
using sluice::testing::registry;
using sluice::testing::run_text;

namespace {

Json run_file(const std::string& file, const std::vector<std::string>& sets = {}) {
  Scenario sc = load_scenario(std::string(SLUICE_TESTS_DIR) + "/../scenarios/" + file, sets, registry());
  Recorder rec;
  run_into(sc, rec, {});
  return rec.metrics();
}

// Five devices, each its own server: d0, d1, d4 on switch s0, d2, d3 on s1, the switches
// joined by one link: flows between the halves all cross it.
const char* kTwoSwitches = R"(
  topology:
    kind: explicit
    nodes:
      - {name: s0, kind: switch}
      - {name: s1, kind: switch}
      - {name: d0, kind: device, group: 0}
      - {name: d1, kind: device, group: 1}
      - {name: d2, kind: device, group: 2}
      - {name: d3, kind: device, group: 3}
      - {name: d4, kind: device, group: 4}
    links:
      - {a: d0, b: s0, bandwidth: BWGB/s, latency: 0ns}
      - {a: d1, b: s0, bandwidth: BWGB/s, latency: 0ns}
      - {a: d2, b: s1, bandwidth: BWGB/s, latency: 0ns}
      - {a: d3, b: s1, bandwidth: BWGB/s, latency: 0ns}
      - {a: d4, b: s0, bandwidth: BWGB/s, latency: 0ns}
      - {a: s0, b: s1, bandwidth: MIDGB/s, latency: 0ns}
)";

std::string two_switches(const std::string& bw, const std::string& mid) {
  std::string s = kTwoSwitches;
  for (auto [from, to] : {std::pair<std::string, std::string>{"BW", bw}, {"MID", mid}})
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

std::string job(const std::string& name, const std::string& place, const std::string& extra = "") {
  return "  - {name: " + name + ", kind: training, model: tinyllama-1.1b, sequence: 512, iterations: 2, cost_tables: none, "
         "parallel: {tp: 1, pp: 1, dp: 2, micro_batches: 1}, place: " + place + extra + "}\n";
}

}  // namespace

TEST_CASE("two workloads sharing a link each get half of it / disjoint links are unaffected") {
  const std::string cluster = "name: t\ncluster:\n" + two_switches("1000", "10") + "  hardware: h200\nworkloads:\n";
  // Job a alone: its DP ring (d0 <-> d2) crosses the 10 GB/s middle link.
  const Json alone = run_text(cluster + job("a", "{devices: [0, 2]}"));
  const Json shared = run_text(cluster + job("a", "{devices: [0, 2]}") + job("b", "{devices: [1, 3]}"));
  const double t_alone = alone["training"]["dp_allreduce_ms"].get<double>();
  const double t_a = shared["workloads"]["a"]["dp_allreduce_ms"].get<double>();
  const double t_b = shared["workloads"]["b"]["dp_allreduce_ms"].get<double>();
  // Gradients of 1.1B params / 1 device in bf16, a 2-device ring: each direction carries S bytes.
  const double S = load_model("tinyllama-1.1b").parameters() * 2;
  CHECK(t_alone == doctest::Approx(S / 10e9 * 1e3).epsilon(1e-3));
  CHECK(t_a == doctest::Approx(2 * t_alone).epsilon(1e-3));  // max-min fair: half the link each
  CHECK(t_b == doctest::Approx(2 * t_alone).epsilon(1e-3));
  // b's ring between d1 and d4 stays on switch s0: a keeps the whole middle link.
  const Json disjoint = run_text(cluster + job("a", "{devices: [0, 2]}") + job("b", "{devices: [1, 4]}"));
  CHECK(disjoint["workloads"]["a"]["dp_allreduce_ms"].get<double>() == doctest::Approx(t_alone).epsilon(1e-9));
  CHECK(disjoint["workloads"]["b"]["dp_allreduce_ms"].get<double>() == doctest::Approx(S / 1000e9 * 1e3).epsilon(1e-3));
}

TEST_CASE("serving latency rises when a training job's gradient rings cross its links, not when they are disjoint") {
  const Json shared = run_file("cluster-shared-fabric.yaml");
  const Json disjoint = run_file("cluster-shared-fabric.yaml", {"workloads.1.place.servers=12-21"});
  const auto tpot = [](const Json& m) { return m["workloads"]["chat"]["latency_ms"]["tpot"]["mean"].get<double>(); };
  const auto ttft = [](const Json& m) { return m["workloads"]["chat"]["latency_ms"]["ttft"]["mean"].get<double>(); };
  CHECK(tpot(shared) > tpot(disjoint));
  CHECK(ttft(shared) > ttft(disjoint));
  const Json again = run_file("cluster-shared-fabric.yaml", {"workloads.1.place.servers=12-21"});
  CHECK(tpot(again) == tpot(disjoint));  // deterministic
  CHECK(shared["world"]["flows"]["started"].get<double>() > 0);
}

TEST_CASE("contention that matters: two DP jobs whose rings share 3:1 uplinks each get half of them, against disjoint leaves") {
  const Json shared = run_file("contention-shared-uplinks.yaml");
  const Json disjoint = run_file("contention-shared-uplinks.yaml", {"workloads.1.place.servers=[12, 14, 16, 18, 20, 22]"});
  const auto dp = [](const Json& m) { return m["workloads"]["a"]["dp_allreduce_ms"].get<double>(); };
  CAPTURE(dp(shared));
  CAPTURE(dp(disjoint));
  CHECK(dp(shared) == doctest::Approx(2 * dp(disjoint)).epsilon(0.05));  // two equal jobs halve the uplinks
  CHECK(shared["workloads"]["a"]["iteration_s_mean"].get<double>() > 1.5 * disjoint["workloads"]["a"]["iteration_s_mean"].get<double>());
  // The fabric's account names a spine-leaf link as the most loaded, busy most of the run.
  const Json& top = shared["world"]["fabric"]["most_loaded_link"];
  CHECK(top["link"].get<std::string>().find("spine") != std::string::npos);
  CHECK(top["mean_utilization"].get<double>() > 0.7);
}

TEST_CASE("multi-node tensor-parallel serving: TPOT rises with the uplinks a training job's rings take, by what its all-reduces lose") {
  // Llama-2-70B at TP 16 across two leaves; the training job disjoint, compact on the same two
  // leaves, then interleaved across them (every ring hop on the uplinks).
  const Json disjoint = run_file("contention-serving-tp.yaml", {"workloads.1.place.servers=12-21"});
  const Json compact = run_file("contention-serving-tp.yaml");
  const Json scattered = run_file("contention-serving-tp.yaml", {"workloads.1.place.servers=[1, 7, 2, 8, 3, 9, 4, 10, 5, 11]"});
  const auto tpot = [](const Json& m) { return m["workloads"]["chat"]["latency_ms"]["tpot"]["mean"].get<double>(); };
  const auto ar = [](const Json& m) { return m["workloads"]["chat"]["communication"]["tp_allreduce_ms_mean"].get<double>(); };
  CAPTURE(tpot(disjoint));
  CAPTURE(tpot(compact));
  CAPTURE(tpot(scattered));
  CHECK(tpot(compact) > 1.05 * tpot(disjoint));
  CHECK(tpot(scattered) > 1.25 * tpot(disjoint));
  // The rise is the all-reduces' (one per iteration; compute is the same): within a fifth.
  for (const Json* m : {&compact, &scattered}) {
    const double d_tpot = tpot(*m) - tpot(disjoint), d_ar = ar(*m) - ar(disjoint);
    CHECK(d_ar > 0);
    CHECK(d_tpot == doctest::Approx(d_ar).epsilon(0.2));
  }
  // Each all-reduce pass carries a chunk's all-reduces: the counts equal the iterations.
  CHECK(disjoint["workloads"]["chat"]["communication"]["tp_allreduces"].get<int64_t>() ==
        disjoint["workloads"]["chat"]["batching"]["iterations"].get<int64_t>());
  // The training job pays too: its gradient rings share the uplinks with the serving channels.
  CHECK(scattered["workloads"]["pretrain"]["dp_allreduce_ms"].get<double>() > 2 * disjoint["workloads"]["pretrain"]["dp_allreduce_ms"].get<double>());
}

TEST_CASE("GPipe and 1F1B bubbles match (K-1)/(m+K-1) with equal stages and free transfers") {
  for (const char* schedule : {"gpipe", "1f1b"}) {
    CAPTURE(schedule);
    const Json m = run_text("name: t\ncluster:\n" + two_switches("1000000", "1000000") +
                            "  hardware: h200\nworkloads:\n"
                            "  - {name: j, kind: training, sequence: 512, iterations: 1, cost_tables: none,\n"
                            "     model: {name: flat, layers: 16, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: 512},\n"
                            "     parallel: {tp: 1, pp: 4, dp: 1, micro_batches: 8, schedule: " + std::string(schedule) + "}}\n");
    const Json& t = m["training"];
    CHECK(t["bubble_textbook"].get<double>() == doctest::Approx(3.0 / 11));
    CHECK(t["bubble_fraction"].get<double>() == doctest::Approx(3.0 / 11).epsilon(2e-3));
  }
}

TEST_CASE("a two-stage, two-replica 1F1B iteration checked by hand") {
  // K = 2, m = 2, backward = 2 forward (f): stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1;
  // B1 on stage 0 ends at 9f (F0 [0,f], F1 [f,2f]; stage 1 F0 [f,2f], B0 [2f,4f], F1 [4f,5f],
  // B1 [5f,7f]; stage 0 B0 [4f,6f], B1 [7f,9f]). Then the DP all-reduce of 2 replicas and the
  // optimizer step; with links of 1 PB/s every transfer is negligible.
  const Json m = run_text("name: t\ncluster:\n" + two_switches("1000000", "1000000") +
                          "  hardware: h200\nworkloads:\n"
                          "  - {name: j, kind: training, sequence: 512, iterations: 1, cost_tables: none,\n"
                          "     model: {name: flat, layers: 16, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: 512},\n"
                          "     parallel: {tp: 1, pp: 2, dp: 2, micro_batches: 2}}\n");
  // The last stage also runs the loss: six kernels forward (lf) and two backward (lb), each at
  // a launch's floor with a vocabulary of 8; its ops are F + lf and 2F + lb, which moves stage
  // 1's ops and so B1 on stage 0 by 2 (lf + lb).
  const Json& t = m["training"];
  const double loss = t["per_micro_batch_ms"]["loss"].get<double>(), lf = 0.75 * loss, lb = 0.25 * loss;
  REQUIRE(loss > 0);
  const double f = t["per_micro_batch_ms"]["forward"].get<double>() - lf;
  CHECK(t["per_micro_batch_ms"]["backward"].get<double>() == doctest::Approx(2 * f + lb));
  CHECK(t["bubble_fraction"].get<double>() == doctest::Approx(1.0 / 3).epsilon(1e-3));
  const double expect_s = (9 * f + 2 * (lf + lb) + t["optimizer_ms"].get<double>()) / 1e3;
  CHECK(t["iteration_s_mean"].get<double>() == doctest::Approx(expect_s).epsilon(1e-3));
  CHECK(t["job"]["devices"] == 4);
}

TEST_CASE("placement: first-fit takes the lowest free devices, best-fit keeps free servers whole") {
  Cluster c;
  c.topology = implicit_cluster(load_hardware("h200"), 2, 8);  // two servers of 8
  c.hardware = load_hardware("h200");
  World w(1, c);
  w.claim({0, 1, 2}, "x");
  const auto& ff = registry().factory<PlacementPolicyFn>(*registry().find("placement", "first-fit"));
  const auto& bf = registry().factory<PlacementPolicyFn>(*registry().find("placement", "best-fit"));
  CHECK(ff(w, 2) == std::vector<int>{3, 4});
  CHECK(bf(w, 2) == std::vector<int>{3, 4});    // the fuller server: server 1 stays whole
  CHECK(bf(w, 8) == std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15});  // a whole free server
  CHECK(ff(w, 8) == std::vector<int>{3, 4, 5, 6, 7, 8, 9, 10});       // straddles the servers
  CHECK(ff(w, 14).empty());  // only 13 free
  CHECK_THROWS_WITH_AS(w.claim({2}, "y"), doctest::Contains("already held by workload 'x'"), std::invalid_argument);
}

TEST_CASE("a workload placed on devices another holds is refused before anything runs") {
  const std::string cluster = "name: t\ncluster:\n" + two_switches("1000", "10") + "  hardware: h200\nworkloads:\n";
  CHECK_THROWS_WITH_AS(load_scenario_text(cluster + job("a", "{devices: [0, 2]}") + job("b", "{devices: [2, 3]}"), "t.yaml", {}, registry()),
                       doctest::Contains("already held by workload 'a'"), ConfigError);
  CHECK_THROWS_WITH_AS(load_scenario_text(cluster + job("a", "{devices: [0, 1, 2]}"), "t.yaml", {}, registry()),
                       doctest::Contains("needs 2"), ConfigError);
}

TEST_CASE("TPU v4 chips serve and train on pod slices / OCS slices share no link, a static pod's block does") {
  std::ifstream in(std::string(SLUICE_TESTS_DIR) + "/../scenarios/tpu-v4-slices.yaml");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string alone = text.substr(0, text.find("  - name: pretrain"));
  const auto tpot = [](const Json& m, bool scoped) {
    return (scoped ? m["workloads"]["chat"] : m["serving"])["latency_ms"]["tpot"]["mean"].get<double>();
  };
  const Json ocs = run_text(text);
  const Json ocs_alone = run_text(alone);
  CHECK(tpot(ocs, true) == tpot(ocs_alone, false));  // the training slice's traffic never reaches the serving slice
  CHECK(ocs["workloads"]["pretrain"]["job"]["devices"] == 256);
  CHECK(ocs["workloads"]["pretrain"]["mfu"].get<double>() > 0.05);
  CHECK(ocs["world"]["flows"]["started"].get<double>() > 0);
  // On the static torus a 4-chip tensor-parallel ring closes over 3 hops (not 1 OCS circuit).
  const Json st = run_text(alone, {"cluster.topology=tpu-v4-pod-static"});
  CHECK(tpot(st, false) > tpot(ocs_alone, false));
  // A slice that does not fit what is free is refused before anything runs.
  CHECK_THROWS_WITH_AS(load_scenario_text(text, "t.yaml", {"workloads.1.place.slice=[16, 16, 16]"}, registry()),
                       doctest::Contains("no set of free cubes"), ConfigError);
  // A twist needs an OCS pod and a slice to twist.
  CHECK_THROWS_WITH_AS(load_scenario_text(text, "t.yaml", {"cluster.topology=tpu-v4-pod-static", "workloads.1.place.twisted=true"}, registry()),
                       doctest::Contains("only an OCS pod wires a slice's links"), ConfigError);
  CHECK_THROWS_WITH_AS(load_scenario_text(text, "t.yaml", {"workloads.1.place={devices: 8, twisted: true}"}, registry()),
                       doctest::Contains("no slice is asked for"), ConfigError);
}

TEST_CASE("KV swapped over PCIe is a flow on the host link where the topology has one") {
  // A replica squeezed to a few hundred KV blocks preempts by swapping; on a DGX with PCIe
  // host links every swap becomes flows device -> host CPU (and back), timed by the fabric.
  const std::string base = R"(
name: t
model: llama2-7b
topology: dgx-h200
deployment: {replicas: 1, gpu_memory_utilization: 0.115, preemption: swap, cost_tables: none}
scheduler: {kind: vllm}
workload: {kind: llmperf, requests: 60, input_tokens: {mean: 1500, sd: 0}, output_tokens: {mean: 400, sd: 0},
           arrival: {kind: closed_loop, clients: 24}}
outputs: {trace: false, requests_csv: false, timeseries: false}
)";
  const Json m = run_text(base);
  CHECK(m["serving"]["kv_cache"]["swap_bytes"].get<double>() > 0);
  CHECK(m["world"]["flows"]["started"].get<double>() > 0);  // tp 1, pp 1: only the swaps are flows
  CHECK(m["serving"]["requests"]["completed"] == 60);
  // The same run with recompute preemption makes no transfer at all.
  const Json rec = run_text(base, {"deployment.preemption=recompute"});
  CHECK(rec["world"]["flows"]["started"].get<double>() == 0);
}

namespace {
// Hop diameter of a slice: breadth-first over the device-to-device links among its chips.
int slice_diameter(const World& w, const std::vector<int>& devs) {
  const auto& t = w.topology();
  std::map<int, int> idx;
  for (size_t i = 0; i < devs.size(); ++i) idx[w.device_node(devs[i])] = static_cast<int>(i);
  std::vector<std::vector<int>> adj(devs.size());
  for (int l = 0; l < t.link_count(); ++l) {
    const auto& k = t.link(l);
    if (k.up && idx.count(k.src) && idx.count(k.dst)) adj[static_cast<size_t>(idx[k.src])].push_back(idx[k.dst]);
  }
  int diameter = 0;
  for (size_t s = 0; s < devs.size(); ++s) {
    std::vector<int> dist(devs.size(), -1);
    std::vector<int> q{static_cast<int>(s)};
    dist[s] = 0;
    for (size_t h = 0; h < q.size(); ++h)
      for (int n : adj[static_cast<size_t>(q[h])])
        if (dist[static_cast<size_t>(n)] < 0) {
          dist[static_cast<size_t>(n)] = dist[static_cast<size_t>(q[h])] + 1;
          q.push_back(n);
        }
    for (int d : dist) {
      REQUIRE(d >= 0);  // the slice is connected
      diameter = std::max(diameter, d);
    }
  }
  return diameter;
}
}  // namespace

TEST_CASE("OCS slices: a 4x4x8 slice is wired as a twisted torus, shorter across than the regular one") {
  std::vector<int> circuits;
  for (const bool twist : {true, false}) {
    CAPTURE(twist);
    Cluster c;
    c.topology = std::make_shared<net::Topology>(
        net::load_topology(load_yaml_string("{catalog: tpu-v4-pod-ocs, cubes: [4, 4, 4]}", "t.yaml"), registry(), "topology"));
    c.hardware = load_hardware("tpu-v4");
    World w(1, c);
    const auto devs = w.slices().form({5, 9}, {1, 1, 2}, twist, "j");  // two cubes anywhere: OCS wires them as 4x4x8
    REQUIRE(devs.size() == 128);
    REQUIRE(w.slices().formed().size() == 1);
    CHECK(w.slices().formed()[0].wiring == (twist ? "twisted torus" : "torus"));
    // Regular 4x4x8: 2 + 2 + 4 hops. Twisted: a wrap of a short ring also moves 4 along the
    // long one, which cuts the farthest pairs' distance.
    const int diameter = slice_diameter(w, devs);
    if (twist) CHECK(diameter < 8);
    else CHECK(diameter == 8);
    // The same circuits either way (one per cube-face chip and dimension: 32 + 32 + 32), only
    // the wrap-arounds land elsewhere; every chip keeps six neighbours.
    int slice_links = 0;
    std::map<int, int> degree;
    for (int l = 0; l < w.topology().link_count(); ++l) {
      const auto& k = w.topology().link(l);
      slice_links += k.label == "ici-ocs-slice";
      if (k.label == "ici-ocs-slice" || k.label == "ici") ++degree[k.src];
    }
    circuits.push_back(slice_links);
    for (int d : devs) CHECK(degree[w.device_node(d)] == 6);
  }
  CHECK(circuits[0] == circuits[1]);
  CHECK(circuits[0] == 2 * 96);  // each circuit a link per direction
  // A shape that cannot be twisted (4x4x4) stays a regular torus whatever `twist` says.
  Cluster c;
  c.topology = std::make_shared<net::Topology>(
      net::load_topology(load_yaml_string("{catalog: tpu-v4-pod-ocs, cubes: [4, 4, 4]}", "t.yaml"), registry(), "topology"));
  c.hardware = load_hardware("tpu-v4");
  World w(1, c);
  w.slices().form({3}, {1, 1, 1}, true, "k");
  CHECK(w.slices().formed()[0].wiring == "torus");
}

namespace {
// A TPU v4 pod of 2x2x2 cubes with OCS (no circuits until a slice is formed).
Cluster small_ocs_pod() {
  Cluster c;
  c.topology = std::make_shared<net::Topology>(
      net::load_topology(load_yaml_string("{catalog: tpu-v4-pod-ocs, cubes: [2, 2, 2]}", "t.yaml"), registry(), "topology"));
  c.hardware = load_hardware("tpu-v4");
  return c;
}
// The index of the OCS fault component of OCS node `node`, -1 when none.
int ocs_component(World& w, int node) {
  const auto& comps = w.components(FaultClass::Ocs);
  for (size_t i = 0; i < comps.size(); ++i)
    if (comps[i].node == node) return static_cast<int>(i);
  return -1;
}
}  // namespace

TEST_CASE("OCS faults: a circuit programmed through a failed OCS is born down, and one torn down during the fault stays down") {
  Cluster c = small_ocs_pod();
  World w(1, c);
  const auto& t = w.topology();
  auto circuits = [&](int from, int ocs, bool up) {  // slice circuits from link `from` on, through `ocs`, in state `up`
    int n = 0;
    for (int e = from; e < t.link_count(); ++e)
      n += t.link(e).label == "ici-ocs-slice" && t.link(e).ocs == ocs && t.link(e).up == up;
    return n;
  };
  const auto a = w.slices().form({0, 1}, {1, 1, 2}, false, "a");
  int ocs = -1;  // an OCS that carries some of slice a's circuits
  for (int e = 0; e < t.link_count() && ocs < 0; ++e)
    if (t.link(e).label == "ici-ocs-slice") ocs = t.link(e).ocs;
  REQUIRE(ocs >= 0);
  const int oi = ocs_component(w, ocs);
  REQUIRE(oi >= 0);
  const int a_circuits = circuits(0, ocs, true);
  REQUIRE(a_circuits > 0);
  // The OCS fails: slice a's circuits through it go down.
  w.set_component(FaultClass::Ocs, oi, true);
  CHECK(circuits(0, ocs, true) == 0);
  // Slice a moves while the OCS is down: its circuits are torn down (held down by the fault as
  // well), and the new slice's circuits through the dead OCS are born down.
  w.slices().tear_down(a);
  const int first = t.link_count();
  w.slices().form({2, 3}, {1, 1, 2}, false, "a");
  const int b_circuits = circuits(first, ocs, false);
  CHECK(b_circuits > 0);
  CHECK(circuits(first, ocs, true) == 0);
  for (int e = first; e < t.link_count(); ++e)
    if (t.link(e).ocs == ocs) CHECK(w.fabric().link_capacity(e) == 0);
  // The repair brings the new slice's circuits up, not the torn-down ones.
  w.set_component(FaultClass::Ocs, oi, false);
  CHECK(circuits(first, ocs, true) == b_circuits);
  CHECK(circuits(0, ocs, true) == b_circuits);  // (slice a's are still down)
  for (int e = first; e < t.link_count(); ++e)
    if (t.link(e).ocs == ocs) CHECK(w.fabric().link_capacity(e) > 0);
  // The next failure of that OCS takes the new circuits down again, its repair brings them back.
  w.set_component(FaultClass::Ocs, oi, true);
  CHECK(circuits(first, ocs, true) == 0);
  w.set_component(FaultClass::Ocs, oi, false);
  CHECK(circuits(first, ocs, true) == b_circuits);
  CHECK(circuits(0, ocs, true) == b_circuits);
}

TEST_CASE("OCS faults: a circuit that fails while it is being programmed gets no bandwidth when its reconfiguration ends") {
  Cluster c = small_ocs_pod();
  c.ocs_reconfigure_ns = 1'000'000;  // 1 ms
  World w(1, c);
  const auto& t = w.topology();
  w.slices().started();  // the run goes on: circuits carry traffic 1 ms after they are programmed
  w.slices().form({0, 1}, {1, 1, 2}, false, "a");
  int ocs = -1, circuit = -1;
  for (int e = 0; e < t.link_count() && ocs < 0; ++e)
    if (t.link(e).label == "ici-ocs-slice") ocs = t.link(e).ocs, circuit = e;
  REQUIRE(circuit >= 0);
  CHECK(w.fabric().link_capacity(circuit) == 0);
  const int oi = ocs_component(w, ocs);
  REQUIRE(oi >= 0);
  w.engine().run(SimTime::us(500));
  w.set_component(FaultClass::Ocs, oi, true);  // fails half-way through the programming
  w.engine().run(SimTime::ms(2));
  CHECK(w.fabric().link_capacity(circuit) == 0);  // the end of reconfiguration left it empty
  w.set_component(FaultClass::Ocs, oi, false);
  CHECK(w.fabric().link_capacity(circuit) == doctest::Approx(t.link(circuit).bandwidth_Bps));
}

TEST_CASE("OCS faults: a circuit that fails and is repaired while it is being programmed gets its bandwidth when the programming ends, not at the repair") {
  Cluster c = small_ocs_pod();
  c.ocs_reconfigure_ns = 1'000'000;  // 1 ms
  World w(1, c);
  const auto& t = w.topology();
  w.slices().started();
  w.slices().form({0, 1}, {1, 1, 2}, false, "a");
  int ocs = -1, circuit = -1;
  for (int e = 0; e < t.link_count() && ocs < 0; ++e)
    if (t.link(e).label == "ici-ocs-slice") ocs = t.link(e).ocs, circuit = e;
  REQUIRE(circuit >= 0);
  const int oi = ocs_component(w, ocs);
  REQUIRE(oi >= 0);
  w.engine().run(SimTime::us(300));
  w.set_component(FaultClass::Ocs, oi, true);
  w.engine().run(SimTime::us(600));
  w.set_component(FaultClass::Ocs, oi, false);  // repaired 0.4 ms before the circuit is programmed
  CHECK(t.link(circuit).up);
  CHECK(w.fabric().link_capacity(circuit) == 0);
  w.engine().run(SimTime::us(999));
  CHECK(w.fabric().link_capacity(circuit) == 0);
  w.engine().run(SimTime::ms(2));
  CHECK(w.fabric().link_capacity(circuit) == doctest::Approx(t.link(circuit).bandwidth_Bps));
  // Failed and repaired again after that: the repair gives it its bandwidth at once.
  w.set_component(FaultClass::Ocs, oi, true);
  CHECK(w.fabric().link_capacity(circuit) == 0);
  w.set_component(FaultClass::Ocs, oi, false);
  CHECK(w.fabric().link_capacity(circuit) == doctest::Approx(t.link(circuit).bandwidth_Bps));
}

TEST_CASE("chip faults: a circuit programmed at a failed chip is born down, and its repair and next failure count it") {
  Cluster c = small_ocs_pod();
  World w(1, c);
  const auto& t = w.topology();
  // A chip with circuits in a slice of cubes 2 and 3 (formed once to find it, then torn down).
  const auto first_devs = w.slices().form({2, 3}, {1, 1, 2}, false, "a");
  int node = -1;
  for (int e = 0; e < t.link_count() && node < 0; ++e)
    if (t.link(e).label == "ici-ocs-slice") node = t.link(e).src;
  REQUIRE(node >= 0);
  w.slices().tear_down(first_devs);
  int chip = -1;
  const auto& comps = w.components(FaultClass::Chip);
  for (size_t i = 0; i < comps.size(); ++i)
    for (int d : comps[i].devices)
      if (w.device_node(d) == node) chip = static_cast<int>(i);
  REQUIRE(chip >= 0);
  auto at_chip = [&](int from, bool up) {  // circuits from link `from` on at the chip, in state `up`
    int n = 0;
    for (int e = from; e < t.link_count(); ++e)
      n += t.link(e).label == "ici-ocs-slice" && (t.link(e).src == node || t.link(e).dst == node) && t.link(e).up == up;
    return n;
  };
  w.set_component(FaultClass::Chip, chip, true);
  const int first = t.link_count();
  w.slices().form({2, 3}, {1, 1, 2}, false, "a");  // (placement would avoid the cube; the world must not rely on it)
  const int circuits = at_chip(first, false);
  CHECK(circuits > 0);
  CHECK(at_chip(first, true) == 0);
  int elsewhere_up = 0;  // the slice's other circuits are up
  for (int e = first; e < t.link_count(); ++e) elsewhere_up += t.link(e).src != node && t.link(e).dst != node && t.link(e).up;
  CHECK(elsewhere_up > 0);
  w.set_component(FaultClass::Chip, chip, false);
  CHECK(at_chip(first, true) == circuits);
  w.set_component(FaultClass::Chip, chip, true);
  CHECK(at_chip(first, true) == 0);
  w.set_component(FaultClass::Chip, chip, false);
  CHECK(at_chip(first, true) == circuits);
  CHECK(at_chip(0, true) == circuits);  // the first slice's circuits stay torn down
}
