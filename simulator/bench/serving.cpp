// `sluice bench serving`: 1,000,000 llmperf requests over 64 replicas of Llama-3-8B on H200,
// closed loop; prints wall time, simulated seconds, events/s and peak memory.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "config/node.h"
#include "registry/registry.h"
#include "workloads/serving/serving_sim.h"

namespace sluice::serving {


namespace {

int bench_serving(const Registry& reg, bool quick) {
  const long requests = quick ? 50'000 : 1'000'000;
  const std::string yaml = fmt::format(R"(
model: llama3-8b
hardware: h200
deployment: {{replicas: 64, nodes: 8}}
scheduler: {{kind: vllm}}
router: {{kind: least_outstanding}}
workload: {{kind: llmperf, requests: {}, arrival: {{kind: closed_loop, clients: 4096}}}}
outputs: {{trace: false, requests_csv: false, timeseries: false}}
)", requests);
  const Node n = load_yaml_string(yaml, "<bench serving>");
  auto parsed = reg.parse(n, "study", "", "serving");
  std::string desc;
  auto t0 = std::chrono::steady_clock::now();
  Engine engine(1);
  ServingSim sim(build_serving_config(parsed.params, reg, 1, &desc, nullptr), engine, nullptr);
  sim.run({});
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("bench serving: %ld llmperf requests (550±150 in, 150±80 out), Llama-3-8B, 64 × H200, vLLM, 4096 clients\n", requests);
  std::printf("  wall time        %10.2f s (target: 1.5 s for 1M requests, unloaded; 3.6 s when it was set, 2 cores)\n", wall);
  std::printf("  simulated time   %10.1f s\n", sim.end_ns() / 1e9);
  std::printf("  completed        %10lld requests\n", static_cast<long long>(sim.completed()));
  std::printf("  events           %10llu (%.2f M events/s)\n", static_cast<unsigned long long>(sim.events()), sim.events() / wall / 1e6);
  std::printf("  requests/s wall  %10.0f\n", sim.completed() / wall);
  std::printf("  peak memory      %10.1f MiB (max RSS of this process)\n", ru.ru_maxrss / 1024.0);
  return sim.completed() == requests ? 0 : 1;
}

}  // namespace

SLUICE_REGISTER(bench, serving_bench) {
  reg.add("bench", "serving", "1M llmperf requests over 64 replicas: wall time, simulated s, events/s, peak memory", Schema{},
          BenchFn([&reg](bool quick) { return bench_serving(reg, quick); }));
}

}  // namespace sluice::serving
