// Shared helpers of the unit tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "config/paths.h"
#include "engine/run_control.h"
#include "hardware/spec.h"
#include "registry/registry.h"
#include "run/runner.h"
#include "run/scenario.h"

namespace sluice::testing {

// Every built-in component, registered once for the whole test run.
inline const Registry& registry() { return builtin_registry(); }

// A device with round ceilings and nothing measured: 1 PFLOP/s, 1 TB/s, 1 us per kernel.
inline HardwareSpec round_device(double flops = 1e15) {
  HardwareSpec h;
  h.name = "round";
  h.kind = "gpu";
  h.peak_bf16_flops = flops;
  h.flops_derate = 1;
  h.hbm_bandwidth_Bps = 1e12;
  h.bandwidth_derate = 1;
  h.hbm_bytes = h.hbm_physical_bytes = 80e9;
  h.kernel_launch_ns = 1000;
  h.interconnect_links = 1;
  h.interconnect_link_Bps = 100e9;
  h.interconnect_Bps = 100e9;
  h.interconnect_latency_ns = 500;
  return h;
}

// Llama-3-8B served on one H200 of the implicit 1x8 cluster by vLLM, with fixed 512/128-token
// llmperf requests: `requests` of them arriving as `arrival` says (a YAML mapping).
inline std::string llama3_8b_on_h200(const std::string& name, int requests, const std::string& arrival) {
  return "name: " + name + R"(
seed: 1
hardware: h200
model: llama3-8b
deployment: {replicas: 1, tensor_parallel: 1}
scheduler: {kind: vllm, max_num_seqs: 64}
workload:
  kind: llmperf
  input_tokens: {mean: 512, sd: 0}
  output_tokens: {mean: 128, sd: 0}
  requests: )" + std::to_string(requests) + "\n  arrival: " + arrival + "\n";
}

// Loads a scenario from YAML text (with overrides), runs it, and returns its metrics.
inline Json run_text(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  Scenario sc = load_scenario_text(yaml, "t.yaml", sets, registry());
  Recorder rec;
  run_into(sc, rec, {});
  return rec.metrics();
}

// Whether a run's summary says the training fast-forward counted iterations without
// simulating them (so an on/off equality test compared something).
inline bool fast_forwarded(const std::string& yaml) {
  Scenario sc = load_scenario_text(yaml, "t.yaml", {}, registry());
  Recorder rec;
  run_into(sc, rec, {});
  for (const auto& l : rec.summary_lines())
    if (l.find("were counted without being simulated") != std::string::npos) return true;
  return false;
}

// Runs `yaml` with the fast-forwards on and off, checks the two metrics are the same bytes
// and that the fast-forward did skip (so the comparison compared something); returns the
// metrics.
inline Json same_with_and_without_fast_forward(const std::string& yaml) {
  std::string on, off;
  {
    const RunControl::FastForward ff(true);
    on = run_text(yaml).dump(1);
  }
  {
    const RunControl::FastForward ff(false);
    off = run_text(yaml).dump(1);
  }
  CHECK(on == off);
  {
    const RunControl::FastForward ff(true);
    CHECK(fast_forwarded(yaml));
  }
  return Json::parse(on);
}

// DeepSeek-V3 in FP8 on two 8 x H200 servers (rail-optimized), disaggregated: one prefilling at
// TP 8, one decoding at TP 8, experts expert-parallel with all-to-all dispatch; 300 requests of
// 4096+-1024 / 1024+-256 tokens from 256 clients (test_dp_attention, test_prefill_dp_attention).
inline constexpr const char* kDeepSeekTwoServers = R"(name: t
seed: 11
cluster:
  topology: {catalog: rail-optimized, servers: 2}
  hardware: h200
workloads:
  - name: dsv3
    kind: serving
    model: deepseek-v3
    deployment:
      replicas: 2
      prefill_replicas: 1
      tensor_parallel: 8
      prefill_pool: {tensor_parallel: 8}
      implementation: fused
      precision: fp8
      moe: {expert_parallel: true, dispatch: alltoall}
    scheduler: {kind: vllm, max_num_seqs: 512}
    workload:
      kind: llmperf
      requests: 300
      input_tokens: {mean: 4096, sd: 1024}
      output_tokens: {mean: 1024, sd: 256}
      arrival: {kind: closed_loop, clients: 256}
    outputs: {trace: false}
)";

// Four devices (four servers, groups 0-3) on one switch, each link 100 GB/s with no latency, on
// H200s: the cluster section of hand-checked training tests (a scenario's text up to `workloads:`).
inline constexpr const char* kFourDeviceStar = R"(name: t
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
)";

// kFourDeviceStar with an MoE training job: two layers of four experts of width 2048, top-2,
// expert parallelism 4 over the four data-parallel replicas, sequence 512, two micro-batches.
inline std::string moe_training_on_star() {
  return std::string(kFourDeviceStar) + R"(workloads:
  - {name: j, kind: training, sequence: 512, iterations: 2, cost_tables: none,
     model: {name: tiny-moe, layers: 2, hidden: 1024, heads: 8, kv_heads: 8, ffn: 4096, vocab: 8, max_context: 512,
             experts: 4, experts_per_token: 2, expert_ffn: 2048},
     parallel: {tp: 1, pp: 1, dp: 4, micro_batches: 2, expert_parallel: 4}}
)";
}

// One MoE layer (or `layers`): `experts` experts of inner width 512, top-2, hidden 1024.
inline ModelSpec tiny_moe(int experts = 4, int layers = 1) {
  ModelSpec m;
  m.name = "tiny-moe";
  m.layers = layers;
  m.hidden = 1024;
  m.heads = m.kv_heads = 8;
  m.head_dim = 128;
  m.ffn = 4096;
  m.vocab = 1000;
  m.experts = experts;
  m.experts_per_token = 2;
  m.expert_ffn = 512;
  return m;
}

// Two servers of two devices each on one switch (100 GB/s, no latency): room for TP2.
inline const std::string kTwoServersOfTwo = R"(name: t
cluster:
  topology:
    kind: explicit
    nodes:
      - {name: s, kind: switch}
      - {name: d0, kind: device, group: 0}
      - {name: d1, kind: device, group: 0}
      - {name: d2, kind: device, group: 1}
      - {name: d3, kind: device, group: 1}
    links:
      - {a: d0, b: s, bandwidth: 100GB/s, latency: 0ns}
      - {a: d1, b: s, bandwidth: 100GB/s, latency: 0ns}
      - {a: d2, b: s, bandwidth: 100GB/s, latency: 0ns}
      - {a: d3, b: s, bandwidth: 100GB/s, latency: 0ns}
      - {a: d0, b: d1, bandwidth: 400GB/s, latency: 0ns}
      - {a: d2, b: d3, bandwidth: 400GB/s, latency: 0ns}
  hardware: h200
)";

// A whole file's bytes (the library's own reader).
using sluice::slurp;

}  // namespace sluice::testing
