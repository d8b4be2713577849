// The one cost-source policy (hardware/cost_source.h): every workload kind costs a device the
// same way, so comparing two devices compares their ceilings, and overriding a device's
// ceilings changes its costs.
#include <doctest/doctest.h>

#include "test_support.h"

#include "config/error.h"
#include "hardware/cost_source.h"

using namespace sluice;
using testing::run_text;

namespace {

// H200 against H100 by their effective ceilings (models/hardware): the FLOP ceilings are about
// equal (767 TFLOP/s measured against 0.776 x 989 derated), the bandwidth ceilings differ by
// 4.2293 / (0.881 x 3.35) = 1.433. A step that reads memory is at most that much faster on
// the H200, and at least as fast.
double bandwidth_ratio() {
  const HardwareSpec h200 = load_hardware("h200"), h100 = load_hardware("h100-sxm");
  return h200.effective_bandwidth_Bps() / h100.effective_bandwidth_Bps();
}

const std::string kServing =
    "study: serving\nname: t\nmodel: llama3-8b\n"
    "workload: {kind: llmperf, requests: 40, input_tokens: {mean: 550, sd: 0}, output_tokens: {mean: 150, sd: 0}, "
    "arrival: {kind: closed_loop, clients: 4}}\n";

const std::string kTraining =
    "name: t\ncluster: {topology: {catalog: fat-tree, servers: 2, oversubscription: 1}, hardware: h200}\n"
    "workloads:\n  - {name: job, kind: training, model: gpt3-1b, parallel: {tp: 8, dp: 2}, sequence: 2048, iterations: 1}\n";

const std::string kDiffusion =
    "name: t\ncluster: {topology: dgx-h100, hardware: h200}\n"
    "workloads:\n  - {name: img, kind: diffusion, model: flux1-dev, resolution: 1024, steps: 4, requests: 2, parallel: {ulysses: 4}}\n";

double tpot(const Json& m) { return m["serving"]["latency_ms"]["tpot"]["mean"].get<double>(); }
double iteration(const Json& m) { return m["training"]["iteration_s_mean"].get<double>(); }
double step(const Json& m) { return m["diffusion"]["step_compute_ms"].get<double>(); }

}  // namespace

TEST_CASE("cost source: a device without tables gets them derived by default, named in every workload's metrics") {
  const Json s = run_text(kServing, {"hardware=h100-sxm"});
  CHECK(s["serving"]["deployment"]["cost_source"].get<std::string>().rfind("derived: h200's tables", 0) == 0);
  CHECK(run_text(kServing, {"hardware=h200"})["serving"]["deployment"]["cost_source"].get<std::string>().rfind("measured:", 0) == 0);
  CHECK(run_text(kServing, {"hardware=h100-sxm", "deployment.cost_tables=none"})["serving"]["deployment"]["cost_source"]
            .get<std::string>()
            .rfind("roofline", 0) == 0);
  const Json t = run_text(kTraining, {"cluster.hardware=h100-sxm"});
  CHECK(t["training"]["job"]["cost_source"].get<std::string>().rfind("derived: h200's tables", 0) == 0);
  const Json d = run_text(kDiffusion, {"cluster.hardware=h100-sxm"});
  CHECK(d["diffusion"]["job"]["cost_source"].get<std::string>().rfind("derived: h200's tables", 0) == 0);
  // A device whose catalog names no source keeps the roofline, and says why.
  const HardwareSpec v100 = load_hardware("v100-16gb");
  const CostSource r = resolve_cost_source("auto", v100, "--tables");
  CHECK(r.roofline());
  CHECK(r.describe(v100).find("names no device to derive them from") != std::string::npos);
}

TEST_CASE("cost source: the H200 beats the H100 by what their ceilings imply, in serving, training and diffusion alike") {
  const double bw = bandwidth_ratio();
  REQUIRE(bw == doctest::Approx(1.433).epsilon(0.01));
  // Decode is memory-bound: TPOT follows the bandwidth ratio, less the launch floors both share.
  const double serving = tpot(run_text(kServing, {"hardware=h100-sxm"})) / tpot(run_text(kServing, {"hardware=h200"}));
  CAPTURE(serving);
  CHECK(serving > 0.85 * bw);
  CHECK(serving <= bw * 1.001);
  // Training and a DiT step mix compute-bound GEMMs (equal FLOP ceilings) with memory-bound
  // work: faster on the H200, by no more than the bandwidth ratio. (Measured here: 1.035 for
  // this small job, 1.075 for the DiT step. A long compute-bound step can still come out even
  // or a little H100-favoured, as GPT-3 13B's does: the H200's sustained clock, 0.87, is
  // measured, the H100 has none and runs at 1; see the closing note of issue 22.)
  const double training = iteration(run_text(kTraining, {"cluster.hardware=h100-sxm"})) / iteration(run_text(kTraining));
  CAPTURE(training);
  CHECK(training > 1.02);
  CHECK(training <= bw * 1.001);
  const double diffusion = step(run_text(kDiffusion, {"cluster.hardware=h100-sxm"})) / step(run_text(kDiffusion));
  CAPTURE(diffusion);
  CHECK(diffusion > 1.0);
  CHECK(diffusion <= bw * 1.001);
}

TEST_CASE("cost source: overriding a catalog device's ceilings changes its costs") {
  const Json base = run_text(kServing, {"hardware=h200"});
  // Twice the HBM bandwidth: the measured copy ceiling moves with the datasheet's, the H200's
  // tables are rescaled to it, and decode speeds up by nearly 2x (launch floors stay).
  const Json fast = run_text(kServing, {"hardware={catalog: h200, hbm_bandwidth: 9.6TB/s}"});
  const std::string src = fast["serving"]["deployment"]["cost_source"].get<std::string>();
  CAPTURE(src);
  CHECK(src.rfind("derived: h200's tables", 0) == 0);
  CHECK(src.find("overrides") != std::string::npos);
  const double speedup = tpot(base) / tpot(fast);
  CAPTURE(speedup);
  CHECK(speedup > 1.5);
  CHECK(speedup < 2.0);
  // More FLOP/s shortens a compute-bound prefill: TTFT falls, decode barely moves.
  const Json flops = run_text(kServing, {"hardware={catalog: h200, peak_bf16: 1978TFLOP/s}"});
  const double ttft = base["serving"]["latency_ms"]["ttft"]["p50"].get<double>() / flops["serving"]["latency_ms"]["ttft"]["p50"].get<double>();
  CAPTURE(ttft);
  CHECK(ttft > 1.2);
  CHECK(tpot(base) / tpot(flops) < 1.1);
  // Training and diffusion see the same override.
  CHECK(iteration(run_text(kTraining, {"cluster.hardware={catalog: h200, hbm_bandwidth: 9.6TB/s, peak_bf16: 1978TFLOP/s}"})) <
        0.85 * iteration(run_text(kTraining)));
  CHECK(step(run_text(kDiffusion, {"cluster.hardware={catalog: h200, peak_bf16: 1978TFLOP/s}"})) < 0.8 * step(run_text(kDiffusion)));
  // An override of the measured ceiling itself is taken as given.
  const HardwareSpec h = load_hardware("h200");
  CHECK(h.catalog == "h200");
  const CostSource same = resolve_cost_source("auto", h, "--tables");
  CHECK_FALSE(same.derived());
  HardwareSpec faster = h;
  faster.measured_copy_Bps *= 2;
  CHECK(resolve_cost_source("auto", faster, "--tables").derived());
}

TEST_CASE("cost source: a bad cost_tables value is refused at its key for every workload kind") {
  CHECK_THROWS_WITH_AS(run_text(kServing, {"hardware=h200", "deployment.cost_tables=derived"}), doctest::Contains("derive"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kTraining, {"workloads.0.cost_tables=nowhere"}), doctest::Contains("workloads[0].cost_tables"), ConfigError);
  CHECK_THROWS_WITH_AS(run_text(kDiffusion, {"workloads.0.cost_tables=nowhere"}), doctest::Contains("workloads[0].cost_tables"), ConfigError);
  CHECK_THROWS_AS(resolve_cost_source("derived", load_hardware("h200"), "--tables"), ConfigError);
}
