// The parallelism of large training jobs beyond TP x PP x DP: ZeRO's sharded optimizer state
// and gradients (memory and traffic), checked by hand.
#include <doctest/doctest.h>

#include "test_support.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// Four devices on one switch, each link 100 GB/s with no latency: a 4-way data-parallel ring
// crosses each device's link once per step.
const char* kStar = R"(name: t
cluster:
  topology:
    kind: explicit
    nodes:
      - {name: s, kind: switch}
      - {name: d0, kind: device, group: 0}
      - {name: d1, kind: device, group: 1}
      - {name: d2, kind: device, group: 2}
      - {name: d3, kind: device, group: 3}
    links:
      - {a: d0, b: s, bandwidth: 100GB/s, latency: 0ns}
      - {a: d1, b: s, bandwidth: 100GB/s, latency: 0ns}
      - {a: d2, b: s, bandwidth: 100GB/s, latency: 0ns}
      - {a: d3, b: s, bandwidth: 100GB/s, latency: 0ns}
  hardware: h200
workloads:
  - {name: j, kind: training, sequence: 512, iterations: 2, cost_tables: none,
     model: {name: flat, layers: 4, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, vocab: 8, max_context: 512},
     parallel: {tp: 1, pp: 1, dp: 4, micro_batches: 2, zero: )";

Json run_zero(int zero) { return run_text(std::string(kStar) + std::to_string(zero) + "}}\n")["training"]; }

}  // namespace

TEST_CASE("ZeRO shards the optimizer state (stage 1) and the gradients (stage 2) over the data-parallel replicas") {
  const Json z0 = run_zero(0), z1 = run_zero(1), z2 = run_zero(2);
  const auto mem = [](const Json& t, const char* k) { return t["memory_per_device"][k].get<double>(); };
  // flat: 4 layers of 4·h² (attention) + 3·h·ffn (a gated MLP, the default) parameters, plus
  // 2·8·h (embeddings and head).
  const double h = 4096, P = 4 * (4 * h * h + 3 * h * 16384) + 2 * 8 * h;
  CHECK(mem(z0, "weights_bytes") == doctest::Approx(2 * P).epsilon(0.01));
  CHECK(mem(z0, "optimizer_bytes") == doctest::Approx(12 * P).epsilon(0.01));
  CHECK(mem(z1, "optimizer_bytes") == doctest::Approx(mem(z0, "optimizer_bytes") / 4));
  CHECK(mem(z1, "gradients_bytes") == doctest::Approx(mem(z0, "gradients_bytes")));
  CHECK(mem(z2, "gradients_bytes") == doctest::Approx(mem(z0, "gradients_bytes") / 4));
  CHECK(mem(z2, "weights_bytes") == doctest::Approx(mem(z0, "weights_bytes")));
  CHECK(z1["job"]["zero"] == 1);
  // Adam's step streams a quarter of the state.
  CHECK(z1["optimizer_ms"].get<double>() == doctest::Approx(z0["optimizer_ms"].get<double>() / 4).epsilon(1e-3));
}

TEST_CASE("ZeRO's reduce-scatter and all-gather move what the ring all-reduce moves: the iteration differs by the optimizer's step") {
  const Json z0 = run_zero(0), z1 = run_zero(1);
  // The gradients' all-reduce, 2·3/4·S over each 100 GB/s link, against the reduce-scatter's
  // 3/4·S before the optimizer and the all-gather's 3/4·S after it.
  const double S = z0["memory_per_device"]["weights_bytes"].get<double>();
  const double ring_ms = 2 * 0.75 * S / 100e9 * 1e3;
  CHECK(z0["dp_allreduce_ms"].get<double>() == doctest::Approx(ring_ms).epsilon(1e-3));
  CHECK(z1["dp_allreduce_ms"].get<double>() == doctest::Approx(ring_ms / 2).epsilon(1e-3));
  const double it0 = z0["iteration_s_mean"].get<double>() * 1e3, it1 = z1["iteration_s_mean"].get<double>() * 1e3;
  CHECK(it1 - it0 == doctest::Approx(z1["optimizer_ms"].get<double>() - z0["optimizer_ms"].get<double>()).epsilon(1e-3));
  CHECK(it1 < it0);
}

TEST_CASE("ZeRO stage 3 is refused where it is declared, not silently run as stage 2") {
  CHECK_THROWS_WITH_AS(run_zero(3), doctest::Contains("parallel.zero"), std::exception);
}
