// `sluice bench moe`: an MoE model served with expert parallelism across two servers, every
// dispatch and combine all-to-all a set of flows on the fabric (issue 24's speed target):
// DeepSeek-V3 in FP8 on two 8 x H200 servers of a rail-optimized fabric, TP 16 (latent attention
// split by heads) with its 256 experts spread 16 per GPU, 10,000 llmperf requests (--quick: 1,000). Per-layer all-to-alls are kept cheap by fusing them
// per iteration: one flow per device pair carries every MoE layer's dispatch and combine bytes
// (as the tensor-parallel all-reduces are fused into one ring per iteration).
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "config/schema.h"
#include "registry/registry.h"
#include "run/runner.h"

namespace sluice {

namespace {

int bench_moe(const Registry& reg, bool quick) {
  const int requests = quick ? 1000 : 10000;
  const std::string yaml = fmt::format(R"(
name: bench-moe
seed: 4
cluster: {{topology: {{catalog: rail-optimized, servers: 2}}, hardware: h200}}
workloads:
  - name: dsv3
    kind: serving
    model: deepseek-v3
    deployment: {{replicas: 1, tensor_parallel: 16, implementation: fused, precision: fp8, moe: {{expert_parallel: true, dispatch: alltoall}}}}
    scheduler: {{kind: vllm_chunked}}
    workload: {{kind: llmperf, requests: {}, arrival: {{kind: closed_loop, clients: 128}}}}
    outputs: {{trace: false}}
)",
                                       requests);
  const auto t0 = std::chrono::steady_clock::now();
  Scenario sc = load_scenario_text(yaml, "<bench moe>", {}, reg);
  Recorder rec;
  run_into(sc, rec, {});
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Json m = rec.metrics();
  const Json& s = m["serving"];  // a world of one workload reports it at the top
  const Json& w = m["world"];
  std::printf("bench moe: DeepSeek-V3 in FP8, EP 16 over two 8 x H200 servers (all-to-all dispatch and combine as flows), %d llmperf requests\n",
              requests);
  std::printf("  wall time        %10.2f s   (target for 10,000 requests: 10 s)\n", wall);
  std::printf("  events           %10.0f\n", w["events"].get<double>());
  std::printf("  flows            %10.0f (%.2f M flows/s wall)\n", w["flows"]["started"].get<double>(),
              w["flows"]["started"].get<double>() / wall / 1e6);
  std::printf("  all-to-alls      %10.0f (per MoE layer; %.3f ms of them a stage pass)\n", s["moe"]["alltoalls"].get<double>(),
              s["moe"]["alltoall_ms_mean"].get<double>());
  std::printf("  simulated        %10.1f s; TPOT mean %.2f ms, TTFT p50 %.2f ms, %.0f output tok/s\n", s["simulated_s"].get<double>(),
              s["latency_ms"]["tpot"]["mean"].get<double>(), s["latency_ms"]["ttft"]["p50"].get<double>(),
              s["throughput"]["output_tokens_per_s"].get<double>());
  return s["moe"]["alltoalls"].get<double>() > 0 ? 0 : 1;
}

}  // namespace

SLUICE_REGISTER(bench, moe_benches) {
  reg.add("bench", "moe",
          "MoE serving with expert parallelism over two servers: DeepSeek-V3 in FP8, EP 16, every all-to-all on the fabric, 10,000 "
          "requests (--quick: 1,000): wall, events, flows",
          Schema{}, BenchFn([&reg](bool quick) { return bench_moe(reg, quick); }));
}

}  // namespace sluice
