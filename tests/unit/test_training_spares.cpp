// Hot spares (issue 25): a training job holds whole servers idle; a failed server is swapped
// for a healthy spare (its own rack's first) and the job restarts without waiting for the
// repair. By hand on small fat-trees: the time to recover, the rack preference, a spare that
// fails while idle, the fast-forward on and off, and the refusals.
#include <doctest/doctest.h>

#include "test_support.h"

#include "config/error.h"
#include "engine/run_control.h"
#include "run/runner.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// A TP8 x DP2 job of TinyLlama on `servers` 8-GPU servers (racks of two), placed on `place`,
// restarting 5 s after its devices are healthy, no checkpoints, under a fault trace.
std::string job(int servers, const std::string& place, int spares, const std::string& events, int iterations = 200) {
  return "name: sp\nseed: 1\ncluster: {topology: {catalog: fat-tree, servers: " + std::to_string(servers) +
         "}, hardware: h100-sxm, rack_nodes: 2}\n" + R"(workloads:
  - name: j
    kind: training
    model: tinyllama-1.1b
    cost_tables: none
    parallel: {tp: 8, pp: 1, dp: 2, micro_batches: 2}
    sequence: 512
    iterations: )" +
         std::to_string(iterations) + "\n    place: {servers: " + place + "}\n    recovery: {checkpoint_interval: 0s, restart: 5s, spare_servers: " +
         std::to_string(spares) + "}\nfaults:\n  - {kind: trace, events: " + events + "}\n";
}

const Json& faults(const Json& m) { return m["training"]["faults"]; }

}  // namespace

TEST_CASE("hot spares: a failed server is swapped for a spare and the job restarts without waiting for the repair") {
  const std::string events = R"(["1s chip:gpu0.3 down", "1000s chip:gpu0.3 up"])";
  const Json with = run_text(job(4, "[0-1]", 1, events));
  const Json without = run_text(job(4, "[0-1]", 0, events));
  CHECK(faults(with)["failures"] == 1);
  CHECK(faults(with)["spare_swaps"] == 1);
  CHECK(faults(with)["spare_servers"] == 1);
  // Recovering: the restart alone with a spare; the repair (999 s) and the restart without.
  CHECK(faults(with)["recovering_s"].get<double>() == doctest::Approx(5.0));
  CHECK(faults(without)["recovering_s"].get<double>() == doctest::Approx(999.0 + 5.0));
  CHECK_FALSE(faults(without).contains("spare_swaps"));
  CHECK(with["training"]["iterations"] == 200);
}

TEST_CASE("hot spares: the failed server's own rack first, the repaired server a spare again, an idle spare's failure harmless") {
  // Job on servers 0 and 2 (racks 0 and 1); spares 1 (rack 0) and 3 (rack 1). Server 2 fails at
  // 1 s: its rack's spare, server 3, takes over; server 3 failing at 8 s (after the restart) stops the job again
  // (it was taken), and server 1 takes over. Had the first swap taken server 1 (the first
  // spare), server 3's failure would have hit an idle spare.
  const Json m = run_text(job(4, "[0, 2]", 2, R"(["1s chip:gpu2.0 down", "8s chip:gpu3.0 down"])"));
  CHECK(faults(m)["failures"] == 2);
  CHECK(faults(m)["spare_swaps"] == 2);
  CHECK(faults(m)["recovering_s"].get<double>() == doctest::Approx(10.0));
  // A spare failing while idle: no interruption.
  const Json idle = run_text(job(4, "[0-1]", 1, R"(["1s chip:gpu2.5 down"])"));
  CHECK(faults(idle)["failures"] == 0);
  CHECK(faults(idle)["spare_swaps"] == 0);
}

TEST_CASE("hot spares: the same bytes with the fast-forward on and off") {
  const std::string yaml = job(4, "[0-1]", 1, R"(["1s chip:gpu0.3 down", "30s chip:gpu0.3 up", "40s chip:gpu2.1 down"])", 3000);
  const Json m = testing::same_with_and_without_fast_forward(yaml);
  CHECK(faults(m)["spare_swaps"] == 2);  // server 0 for 2, then (repaired) 0 for 2
}

TEST_CASE("hot spares: more spares than free servers are refused at the key") {
  CHECK_THROWS_WITH_AS(run_text(job(4, "[0-1]", 3, "[]")), doctest::Contains("spare_servers"), ConfigError);
}
