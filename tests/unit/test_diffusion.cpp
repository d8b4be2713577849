// Diffusion-transformer inference (workloads/diffusion): per-step communication of every
// parallel strategy counted from the flows it starts and checked against the published
// formulas (docs/REFERENCES.md#communication-and-memory-per-strategy), the one-device run against dit_step, overlap, CFG, serving and bad input.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>

#include "hardware/dit.h"
#include "run/runner.h"
#include "workloads/diffusion/diffusion.h"

using namespace sluice;
using sluice::testing::registry;
using sluice::testing::run_text;

namespace {

// One diffusion workload on a DGX H100 (8 GPUs on NVSwitch), roofline costs.
std::string scenario(const std::string& parallel, const std::string& extra = "", const std::string& model = "dit-xl-2",
                     int resolution = 512, int steps = 4) {
  return "name: t\nseed: 1\ncluster: {topology: dgx-h100, hardware: h100-sxm}\nworkloads:\n"
         "  - {name: img, kind: diffusion, model: " + model + ", resolution: " + std::to_string(resolution) +
         ", steps: " + std::to_string(steps) + ", cost_tables: none, parallel: {" + parallel + "}" + extra + "}\n";
}

Json run_dit(const std::string& parallel, const std::string& extra = "", const std::string& model = "dit-xl-2", int resolution = 512,
               int steps = 4) {
  return run_text(scenario(parallel, extra, model, resolution, steps))["diffusion"];
}

// DiT-XL/2 at 512 px: p = (512 / 8 / 2)^2 = 1024 patch tokens, hidden 1152, 28 blocks; one
// image's activations O(p·hs) = p·hs·2 bytes in bf16.
constexpr double kP = 1024, kHs = 1152, kL = 28, kO = kP * kHs * 2;

// Bytes the strategy put on the fabric per step and device, counted from its flows.
double counted(const Json& d) { return d["communication"]["fabric_bytes"].get<double>() / d["batch_steps"].get<double>() / d["job"]["devices"].get<double>(); }

}  // namespace

TEST_CASE("diffusion: one device runs steps x dit_step, no flows") {
  const Json d = run_dit("", "", "dit-xl-2", 512, 6);
  const HardwareSpec h100 = load_hardware("h100-sxm");
  const DitSpec dit = load_dit("dit-xl-2");
  CostOptions o;
  o.comm_on_fabric = true;
  const CostModel cm(h100, dit.as_model(), o);
  const int64_t step_ns = std::llround(dit_step(cm, dit, 1024, 1).total_ns);
  CHECK(d["completed"] == 1);
  CHECK(std::llround(d["latency_s"]["max"].get<double>() * 1e9) == 6 * step_ns);
  CHECK(d["communication"]["fabric_bytes"].get<double>() == 0);
  CHECK(d["communication"]["flows"] == 0);
  CHECK(d["job"]["patch_tokens"] == 1024);
}

TEST_CASE("diffusion tensor parallel: 4·O(p·hs)·L per step, two ring all-reduces a block") {
  const Json d = run_dit("tensor: 4");
  // A ring all-reduce of S bytes sends 2·(N-1)/N·S from each device; two per block.
  CHECK(counted(d) == doctest::Approx(4 * kO * kL * 3.0 / 4).epsilon(1e-12));
  CHECK(d["communication"]["formula_bytes_per_step_per_device"].get<double>() == doctest::Approx(counted(d)).epsilon(1e-12));
  CHECK(d["memory_per_device"]["weights_bytes"].get<double>() == doctest::Approx(load_dit("dit-xl-2").parameters() * 2 / 4));
  // Half the blocks, half the bytes: the factor L.
  const Json h = run_dit("tensor: 4", "", "{catalog: dit-xl-2, layers: 14}");
  CHECK(counted(h) == doctest::Approx(counted(d) / 2).epsilon(1e-12));
  // Cross-attention adds a third all-reduce a block (PixArt): 1.5x, in the fabric and the formula alike.
  const Json x = run_dit("tensor: 4", "", "{catalog: dit-xl-2, cross_attention: true, text_tokens: 300}");
  CHECK(counted(x) == doctest::Approx(1.5 * counted(d)).epsilon(1e-12));
  CHECK(x["communication"]["formula_bytes_per_step_per_device"].get<double>() == doctest::Approx(counted(x)).epsilon(1e-12));
}

TEST_CASE("diffusion Ulysses: (4/N)·O(p·hs)·L per step, four all-to-alls a block") {
  for (int n : {2, 4, 8}) {
    CAPTURE(n);
    const Json d = run_dit("ulysses: " + std::to_string(n));
    CHECK(counted(d) == doctest::Approx(4.0 / n * kO * kL * (n - 1.0) / n).epsilon(1e-12));
    CHECK(d["communication"]["formula_bytes_per_step_per_device"].get<double>() == doctest::Approx(counted(d)).epsilon(1e-12));
    CHECK(d["memory_per_device"]["weights_bytes"].get<double>() == doctest::Approx(load_dit("dit-xl-2").parameters() * 2));
  }
}

TEST_CASE("diffusion Ring: 2·O(p·hs)·L per step, its K/V P2P behind attention on NVLink, on the SMs NCCL leaves") {
  const Json d = run_dit("ring: 4");
  CHECK(counted(d) == doctest::Approx(2 * kO * kL * 3.0 / 4).epsilon(1e-12));
  CHECK(d["communication"]["formula_bytes_per_step_per_device"].get<double>() == doctest::Approx(counted(d)).epsilon(1e-12));
  // At 2048 px (16384 tokens) the ring's 2·(p/4)·hs·2·3·28 = 1.585 GB a step at 450 GB/s
  // (T = 3.52 ms) hide behind the attention of four key blocks of 4096 (quadratic, about 4x
  // longer). With overlap free (comm_sms: 0) a step lasts its compute exactly.
  const std::string free_overlap = "cluster: {topology: dgx-h100, hardware: {catalog: h100-sxm, comm_sms: 0}}";
  std::string text = scenario("ring: 4", "", "dit-xl-2", 2048);
  const std::string plain = "cluster: {topology: dgx-h100, hardware: h100-sxm}";
  text.replace(text.find(plain), plain.size(), free_overlap);
  const Json free = run_text(text)["diffusion"];
  const double step_ms = free["step_compute_ms"].get<double>();
  CHECK(free["latency_s"]["max"].get<double>() * 1e3 == doctest::Approx(4 * step_ms).epsilon(1e-6));
  // NCCL's send/recv kernels hold 8 of the H100's 132 SMs while the K/V move: the attention
  // they overlap advances at 124/132 for T, then at full rate, so a step lasts its compute
  // plus T·8/132 (0.21 ms).
  const Json big = run_dit("ring: 4", "", "dit-xl-2", 2048);
  CHECK(big["step_compute_ms"].get<double>() == doctest::Approx(step_ms));
  const double T_ms = 2 * (16384.0 / 4) * kHs * 2 * 3 * kL / 450e9 * 1e3;
  CHECK(T_ms == doctest::Approx(3.52).epsilon(0.01));
  CHECK(big["latency_s"]["max"].get<double>() * 1e3 == doctest::Approx(4 * (step_ms + T_ms * 8 / 132)).epsilon(1e-4));
  // Ulysses' all-to-alls block: its steps last longer than their compute.
  const Json u = run_dit("ulysses: 4", "", "dit-xl-2", 2048);
  CHECK(u["latency_s"]["max"].get<double>() * 1e3 > 4 * u["step_compute_ms"].get<double>() * 1.0001);
}

TEST_CASE("diffusion Ring: each further key block merged into the fp32 output by the reference code's kernels") {
  // yunchang's update_out_and_lse, unfused: 38 B an output element a merge (to fp32, sub, mul,
  // sub) in 8 kernels with the log-sum-exp ones, N - 1 merges a block; the first block's cast
  // to fp32 and the result's cast back, 12 B an element, 2 kernels a block.
  const DitSpec dit = load_dit("dit-xl-2");
  const HardwareSpec h100 = load_hardware("h100-sxm");
  CostOptions o;
  o.comm_on_fabric = true;
  const CostModel cm(h100, dit.as_model(), o);
  DitPart part;
  part.rows = part.q = part.kv = kP / 4;
  part.attention_calls = 4;
  const IterationCost it = dit_step_part(cm, dit, static_cast<long>(kP), 1, part);
  double bytes = 0, kernels = 0;
  for (const auto& op : it.ops)
    if (op.op == "attention.ring_merge") bytes += op.bytes, kernels += op.kernels;
  const double elems = kP / 4 * kHs;  // output elements a block, per device
  CHECK(bytes == doctest::Approx(kL * (3 * (38 * elems + 4 * 3 * 4 * 16 * kP / 4) + 12 * elems)).epsilon(1e-9));  // 16 heads: 4 lse kernels, 2 reads and a write of fp32
  CHECK(kernels == doctest::Approx(kL * (3 * 8 + 2)));
  // A fused engine merges in one pass a block: out read and written, the block read.
  o.implementation = Implementation::Fused;
  const CostModel cf(h100, dit.as_model(), o);
  double fused = 0;
  for (const auto& op : dit_step_part(cf, dit, static_cast<long>(kP), 1, part).ops)
    if (op.op == "attention.ring_merge") fused += op.bytes;
  CHECK(fused == doctest::Approx(kL * 3 * 10 * elems).epsilon(1e-9));
}

TEST_CASE("diffusion DistriFusion: 2·O(p·hs)·L per step, async all-gather of stale K/V after the warm-up") {
  const Json d = run_dit("distrifusion: 4, warmup_steps: 1");
  CHECK(counted(d) == doctest::Approx(2 * kO * kL * 3.0 / 4).epsilon(1e-12));
  CHECK(d["communication"]["formula_bytes_per_step_per_device"].get<double>() == doctest::Approx(counted(d)).epsilon(1e-12));
  // Full weights on every device, plus every layer's K/V of the whole image (2·A·L).
  CHECK(d["memory_per_device"]["weights_bytes"].get<double>() == doctest::Approx(load_dit("dit-xl-2").parameters() * 2));
  CHECK(d["memory_per_device"]["kv_buffer_bytes"].get<double>() == doctest::Approx(2 * kO * kL));
  // Only the warm-up step waits for its all-gather: more warm-up steps, longer images.
  const Json w = run_dit("distrifusion: 4, warmup_steps: 3");
  CHECK(w["latency_s"]["max"].get<double>() > d["latency_s"]["max"].get<double>());
  CHECK(counted(w) == doctest::Approx(counted(d)).epsilon(1e-12));
}

TEST_CASE("diffusion PipeFusion: 2·O(p·hs) per step in and out of a stage, O·(N-1)/N sent per device, no factor L") {
  const Json d = run_dit("pipefusion: 4, patches: 4");
  // Stage 1 receives every patch's activations from stage 0 and sends them to stage 2.
  CHECK(d["communication"]["pipefusion_stage_io_bytes_per_step"].get<double>() == doctest::Approx(2 * kO).epsilon(1e-12));
  // Activations cross the 3 stage boundaries once a step: (N-1)·O on the fabric in all, and
  // per device the formula's O·(N-1)/N: one byte count, the one the fabric carries.
  const double act = d["communication"]["bytes_per_step_per_device"].get<double>() * 4;
  CHECK(act == doctest::Approx(3 * kO).epsilon(1e-12));
  CHECK(d["communication"]["formula_bytes_per_step_per_device"].get<double>() ==
        doctest::Approx(d["communication"]["bytes_per_step_per_device"].get<double>()).epsilon(1e-12));
  // Half the blocks: the same bytes.
  const Json h = run_dit("pipefusion: 4, patches: 4", "", "{catalog: dit-xl-2, layers: 14}");
  CHECK(h["communication"]["pipefusion_stage_io_bytes_per_step"].get<double>() == doctest::Approx(2 * kO).epsilon(1e-12));
  // Parameters P/N per device.
  CHECK(d["memory_per_device"]["weights_bytes"].get<double>() == doctest::Approx(load_dit("dit-xl-2").parameters() * 2 / 4));
  // Pipelining patches across steps (2048 px, where kernels are not launch-bound): faster than
  // one device, and more patches fill the pipeline better.
  const Json one = run_dit("", "", "dit-xl-2", 2048);
  const Json m4 = run_dit("pipefusion: 4, patches: 4", "", "dit-xl-2", 2048);
  const Json m1 = run_dit("pipefusion: 4, patches: 1", "", "dit-xl-2", 2048);
  CHECK(m4["latency_s"]["max"].get<double>() < 0.6 * one["latency_s"]["max"].get<double>());
  CHECK(m4["latency_s"]["max"].get<double>() < m1["latency_s"]["max"].get<double>());
  CHECK(m1["latency_s"]["max"].get<double>() > one["latency_s"]["max"].get<double>());  // stages one after another, plus transfers
}

TEST_CASE("diffusion Ulysses x Ring: each part's formula over its own degree") {
  const Json d = run_dit("ulysses: 2, ring: 2");
  // Ulysses over 2 on p/2 tokens (4/2·(O/2)·L·1/2) plus Ring over 2 on hs/2 (2·(O/2)·L·1/2) = O·L.
  CHECK(counted(d) == doctest::Approx(kO * kL).epsilon(1e-12));
  CHECK(d["communication"]["formula_bytes_per_step_per_device"].get<double>() == doctest::Approx(counted(d)).epsilon(1e-12));
}

TEST_CASE("diffusion CFG: guidance doubles the batch, CFG parallel splits it over two groups") {
  const Json one = run_dit("");
  const Json cfg = run_dit("", ", cfg: true");
  const Json par = run_dit("cfg: 2", ", cfg: true");
  CHECK(cfg["latency_s"]["max"].get<double>() > 1.5 * one["latency_s"]["max"].get<double>());
  // Two devices, one branch each, plus each step's exchange of the noise predictions.
  CHECK(par["job"]["devices"] == 2);
  CHECK(par["latency_s"]["max"].get<double>() > one["latency_s"]["max"].get<double>());
  CHECK(par["latency_s"]["max"].get<double>() < 1.01 * one["latency_s"]["max"].get<double>());
  // CFG parallel around Ulysses: the inner strategy's bytes per device are those of one branch.
  const Json cu = run_dit("cfg: 2, ulysses: 4", ", cfg: true");
  CHECK(cu["job"]["devices"] == 8);
  CHECK(cu["communication"]["bytes_per_step_per_device"].get<double>() == doctest::Approx(1.0 * kO * kL * 3 / 4).epsilon(1e-12));
  // And around PipeFusion (2048 px): four devices beat one running both branches.
  const Json cp = run_dit("cfg: 2, pipefusion: 2, patches: 4", ", cfg: true", "dit-xl-2", 2048);
  const Json c1 = run_dit("", ", cfg: true", "dit-xl-2", 2048);
  CHECK(cp["completed"] == 1);
  CHECK(cp["latency_s"]["max"].get<double>() < 0.5 * c1["latency_s"]["max"].get<double>());
}

TEST_CASE("diffusion serving: Poisson requests batched per step, deterministic, percentiles") {
  const std::string s = scenario("ulysses: 2", ", requests: 30, arrival_rate: 40/s, max_batch: 4", "dit-xl-2", 512, 10);
  const Json a = run_text(s)["diffusion"], b = run_text(s)["diffusion"];
  CHECK(a.dump() == b.dump());
  CHECK(a["completed"] == 30);
  CHECK(a["mean_batch"].get<double>() > 1.0);
  CHECK(a["latency_s"]["p50"].get<double>() <= a["latency_s"]["p90"].get<double>());
  CHECK(a["latency_s"]["p90"].get<double>() <= a["latency_s"]["p99"].get<double>());
  CHECK(a["images_per_s"].get<double>() > 0);
  CHECK(a["device_utilization"].size() == 2);
  // Another seed draws other arrivals.
  std::string s2 = s;
  s2.replace(s2.find("seed: 1"), 7, "seed: 2");
  CHECK(run_text(s2)["diffusion"]["latency_s"].dump() != a["latency_s"].dump());
  // Batched PipeFusion serves the same load.
  const Json pf = run_text(scenario("pipefusion: 2, patches: 4", ", requests: 30, arrival_rate: 40/s, max_batch: 4", "dit-xl-2", 512, 10))["diffusion"];
  CHECK(pf["completed"] == 30);
}

TEST_CASE("diffusion keys reach the workload's config: every bound key given a non-default value") {
  const std::string serving = ", cfg: true, requests: 3, arrival_rate: 5/s, max_batch: 2, implementation: fused";
  const Json d = run_dit("cfg: 2, pipefusion: 2, patches: 4, warmup_steps: 2", serving, "dit-xl-2", 256, 3);
  const Json& j = d["job"];
  CAPTURE(j.dump());
  CHECK(j["resolution"] == 256);
  CHECK(j["patch_tokens"] == 256);
  CHECK(j["steps"] == 3);
  CHECK(j["cfg"] == true);
  CHECK(j["requests"] == 3);
  CHECK(j["arrival_rate_per_s"].get<double>() == 5);
  CHECK(j["max_batch"] == 2);
  CHECK(j["implementation"] == "fused");
  CHECK(j["parallel"]["cfg"] == 2);
  CHECK(j["parallel"]["pipefusion"] == 2);
  CHECK(j["parallel"]["patches"] == 4);
  CHECK(j["parallel"]["warmup_steps"] == 2);
  CHECK(d["completed"] == 3);
  // The other degrees, one strategy at a time; patches 0 means as many as stages.
  const Json usp = run_dit("ulysses: 2, ring: 2", "", "dit-xl-2", 256, 2)["job"]["parallel"];
  CHECK(usp["ulysses"] == 2);
  CHECK(usp["ring"] == 2);
  CHECK(run_dit("tensor: 2", "", "dit-xl-2", 256, 2)["job"]["parallel"]["tensor"] == 2);
  CHECK(run_dit("distrifusion: 2", "", "dit-xl-2", 256, 2)["job"]["parallel"]["distrifusion"] == 2);
  CHECK(run_dit("pipefusion: 2", "", "dit-xl-2", 256, 2)["job"]["parallel"]["patches"] == 2);
  // The defaults, and each key's default from the schema.
  const Json def = run_dit("", "", "dit-xl-2", 256, 2)["job"];
  CHECK(def["implementation"] == "pytorch-lean");
  CHECK(def["max_batch"] == 1);
  CHECK(def["parallel"]["warmup_steps"] == 1);
}

TEST_CASE("diffusion bad input: clear errors with the key and what is valid") {
  auto error = [](const std::string& yaml) {
    try {
      load_scenario_text(yaml, "t.yaml", {}, registry());
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string heads = error(scenario("ulysses: 5"));
  CHECK(heads.find("t.yaml:") != std::string::npos);
  CHECK(heads.find("parallel.ulysses") != std::string::npos);
  CHECK(heads.find("a divisor of the head count") != std::string::npos);
  CHECK(error(scenario("", "", "dit-xl-2", 500)).find("a multiple of 16") != std::string::npos);
  CHECK(error(scenario("tensor: 2, pipefusion: 2")).find("not combined") != std::string::npos);
  CHECK(error(scenario("cfg: 2")).find("cfg: true") != std::string::npos);
  CHECK(error(scenario("", ", strategy: ring")).find("strategy") != std::string::npos);
  // Flux.1-dev at 4096 px with DistriFusion keeps every layer's K/V of 65536 tokens per image.
  const std::string fit = error(scenario("distrifusion: 4", ", max_batch: 8", "flux1-dev", 4096));
  CHECK(fit.find("does not fit") != std::string::npos);
  CHECK(fit.find("K/V buffers") != std::string::npos);
}

TEST_CASE("diffusion xDiT: Flux.1-dev 1024 px, 28 steps on 4 x H100 against the published latencies") {
  // docs/REFERENCES.md#xdit-latencies: 1 GPU 4.30 s; Ulysses-4 1.63 s; Ring-4 1.98 s; Ulysses-2 x Ring-2 1.80 s.
  // Measured here (H200 tables derived to the H100, pytorch-lean kernels): 4.313 s, 1.576 s,
  // 1.841 s and 1.648 s. One GPU and Ulysses land within 4%; Ring and the hybrid 7% and 8%
  // fast (16% and 12% before the reference code's unfused fp32 output merges and the SMs
  // NCCL's kernels hold beside the attention: the merges gave 1.666 -> 1.832 s, the SMs
  // 1.832 -> 1.841 s, since on NVLink the K/V move in 5 ms of a 65 ms step).
  const std::string file = std::string(SLUICE_TESTS_DIR) + "/../scenarios/dit-flux-1024-h100.yaml";
  auto latency = [&](const std::vector<std::string>& sets) {
    Scenario sc = load_scenario(file, sets, registry());
    Recorder rec;
    run_into(sc, rec, {});
    return rec.metrics()["diffusion"]["latency_s"]["max"].get<double>();
  };
  const double one = latency({"workloads.0.parallel.ulysses=1"});
  const double uly = latency({});
  const double ring = latency({"workloads.0.parallel.ulysses=1", "workloads.0.parallel.ring=4"});
  const double usp = latency({"workloads.0.parallel.ulysses=2", "workloads.0.parallel.ring=2"});
  MESSAGE("Flux.1-dev on H100: 1 GPU " << one << " s (4.30), Ulysses-4 " << uly << " s (1.63), Ring-4 " << ring
                                       << " s (1.98), Ulysses-2 x Ring-2 " << usp << " s (1.80)");
  CHECK(one == doctest::Approx(4.30).epsilon(0.02));
  CHECK(uly == doctest::Approx(1.63).epsilon(0.05));
  CHECK(ring == doctest::Approx(1.98).epsilon(0.09));
  CHECK(usp == doctest::Approx(1.80).epsilon(0.10));
  // Every split beats one GPU by more than 2.4x, and Ring, whose attention runs in four
  // smaller blocks with merges, is the slowest of them, as published.
  CHECK(one / uly > 2.4);
  CHECK(ring > uly);
  CHECK(ring > usp);
}
