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
