// cluster.flow_quantum: every flow's end rounded up to a grid, so the thousands of flows of a wide
// MoE all-to-all that end within it share one rate recomputation. Against the exact run: far
// fewer recomputations, the same requests, latencies within the quantum's reach; reported only
// when set; refused beyond its range at the key.
#include <doctest/doctest.h>

#include "test_support.h"

#include <filesystem>
#include <string>
#include <vector>

#include "config/error.h"
#include "engine/engine.h"
#include "network/flow.h"
#include "network/routing.h"
#include "network/topology.h"

using namespace sluice;
using sluice::testing::run_text;

TEST_CASE("flow quantum: a wide all-to-all's flows share recomputations, the run's figures stay within the quantum's reach") {
  // DeepSeek-V3 at EP 16 over two servers: every decode step's all-to-all is 240 flows.
  const std::string ep16 = testing::slurp(std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios/deepseek-v3-ep16.yaml");
  const std::vector<std::string> small = {"workloads.0.workload.requests=200"};
  auto with = [&](const char* quantum) {
    auto sets = small;
    if (quantum) sets.push_back(std::string("cluster.flow_quantum=") + quantum);
    return run_text(ep16, sets);
  };
  const Json exact = with(nullptr), zero = with("0ns"), q = with("1us");
  // 0 is exact: the same run, and nothing reported.
  CHECK(zero["serving"] == exact["serving"]);
  CHECK(zero["world"] == exact["world"]);
  CHECK_FALSE(exact["world"]["fabric"].contains("flow_quantum_ns"));
  CHECK(q["world"]["fabric"]["flow_quantum_ns"] == 1000);
  const double r_exact = exact["world"]["flows"]["rate_recomputations"].get<double>(), r_q = q["world"]["flows"]["rate_recomputations"].get<double>();
  CHECK(r_q < 0.75 * r_exact);  // (12,432 against 21,742 when written)
  CHECK(q["world"]["flows"]["started"] == exact["world"]["flows"]["started"]);
  CHECK(q["serving"]["requests"]["completed"] == exact["serving"]["requests"]["completed"]);
  // Each flow ends at most 1 us late, and a step waits for its flows: a step of tens of ms
  // moves by well under 1%.
  const double tpot = exact["serving"]["latency_ms"]["tpot"]["mean"].get<double>(), tpot_q = q["serving"]["latency_ms"]["tpot"]["mean"].get<double>();
  CHECK(tpot_q >= tpot * (1 - 1e-3));
  CHECK(tpot_q == doctest::Approx(tpot).epsilon(0.01));
  // Beyond its range (1 ms), at its key.
  CHECK_THROWS_WITH_AS(with("5ms"), doctest::Contains("flow_quantum"), ConfigError);
}

namespace {
struct DoneAt : net::FlowSink {
  std::vector<int64_t> at;
  void on_flow_done(Engine& e, uint64_t) override { at.push_back(e.now().count_ns()); }
};
}  // namespace

TEST_CASE("flow quantum: a flow that has sent its last byte ends at its rounded end though its link fails meanwhile") {
  // Two devices on one 100 GB/s link (no other route), a 1 ms quantum: 0.95 GB leave in 9.5 ms,
  // the flow ends at 10 ms. The link fails at 9.7 ms, inside that window: nothing is left to
  // move, so the flow is neither rerouted nor stalled (before, it was stalled for good).
  net::Topology t("pair");
  const int a = t.add_node(net::NodeInfo{"a", net::NodeKind::Device});
  const int b = t.add_node(net::NodeInfo{"b", net::NodeKind::Device});
  const int link = t.add_link(a, b, 100e9, 0);
  Engine e(1);
  net::Router r(t);
  net::FlowSim sim(e, t, r);
  sim.set_quantum(SimTime::ms(1));
  DoneAt sink;
  sim.start(a, b, 0.95e9, &sink, 1);
  e.run(SimTime::us(9700));
  REQUIRE(sink.at.empty());
  const int back = t.link(link).reverse;  // (a cable fails both ways, as the world fails it)
  t.mutable_link(link).up = t.mutable_link(back).up = false;
  sim.set_link_capacity(link, 0);
  sim.set_link_capacity(back, 0);
  r.invalidate();
  const auto [moved, stalled] = sim.reroute({link, back}, 1'000'000);
  CHECK(moved == 0);
  CHECK(stalled == 0);
  e.run();
  REQUIRE(sink.at.size() == 1);
  CHECK(sink.at[0] == 10'000'000);
  // A flow with bytes still to send on the failed link, with no other route, stalls.
  sim.start(a, b, 1e9, &sink, 2);
  e.run(SimTime::ns(e.now().count_ns() + 1000));
  const auto [moved2, stalled2] = sim.reroute({link, back}, 1'000'000);
  CHECK(moved2 == 0);
  CHECK(stalled2 == 1);
  e.run();
  CHECK(sink.at.size() == 1);
}
