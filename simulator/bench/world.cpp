// `sluice bench world`: 64 serving replicas and a 256-GPU training job sharing one fat-tree
// for 10 simulated minutes; prints wall time, events/s and flows/s.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include <unistd.h>

#include <fmt/format.h>

#include "engine/run_control.h"
#include "registry/registry.h"
#include "config/schema.h"
#include "recorder/output_dir.h"
#include "run/runner.h"

namespace sluice {

namespace {

int bench_world(const Registry& reg, bool quick) {
  const int sim_s = quick ? 30 : 600;
  const std::string yaml = fmt::format(R"(
name: bench-world
cluster:
  topology: {{catalog: fat-tree, servers: 40, tiers: 3}}
  hardware: h100-sxm
max_sim_time: {}s
workloads:
  - name: chat
    kind: serving
    model: llama3-8b
    deployment: {{replicas: 64}}
    router: {{kind: least_outstanding}}
    workload: {{kind: llmperf, requests: 10000000, arrival: {{kind: closed_loop, clients: 4096}}}}
    place: {{servers: 0-7}}
    outputs: {{trace: false, requests_csv: false, timeseries: false}}
  - name: pretrain
    kind: training
    model: gpt3-13b
    parallel: {{tp: 8, pp: 4, dp: 8, micro_batches: 16}}
    iterations: 0
    place: {{servers: 8-39}}
)", sim_s);
  const auto t0 = std::chrono::steady_clock::now();
  Scenario sc = load_scenario_text(yaml, "<bench world>", {}, reg);
  Recorder rec;
  run_into(sc, rec, {});
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const Json& w = rec.metrics()["world"];
  const double events = w["events"].get<double>(), flows = w["flows"]["started"].get<double>();
  const Json& chat = rec.metrics()["workloads"]["chat"];
  const Json& train = rec.metrics()["workloads"]["pretrain"];
  std::printf("bench world: 64 x Llama-3-8B serving replicas + GPT-3 13B training (tp 8 x pp 4 x dp 8) on one fat-tree of 320 H100s, %d s simulated\n",
              sim_s);
  std::printf("  wall time        %10.2f s\n", wall);
  std::printf("  events           %10.0f (%.2f M events/s)\n", events, events / wall / 1e6);
  std::printf("  flows            %10.0f (%.0f flows/s wall)\n", flows, flows / wall);
  std::printf("  served           %10.0f requests; training %zu iterations of %.3f s\n", chat["requests"]["completed"].get<double>(),
              train["iteration_s"].size(), train["iteration_s_mean"].get<double>());
  std::printf("  peak memory      %10.1f MiB (max RSS of this process)\n", ru.ru_maxrss / 1024.0);
  return flows > 0 && events > 0 ? 0 : 1;
}

// Vidur's own scenario, as `sluice run` does it with its default outputs: load, simulate,
// write metrics.json, requests.csv, timeseries.csv and trace.json; at Vidur's 2 requests/s and
// at 8 requests/s (a fuller batch: more work per iteration, fewer idle gaps to skip). Vidur
// takes 42-60 s at 2/s and about 16 s at 8/s; the target is 1000x at both.
int bench_vidur(const Registry& reg, bool quick) {
  const int reps = quick ? 1 : 5;
  const std::string file = (std::filesystem::path(catalog_root()) / "scenarios" / "vidur-llama2-7b-a100.yaml").string();
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("sluice-bench-vidur-{}", ::getpid());
  struct Load {
    const char* rate;
    double vidur_s;  // Vidur's own wall time, side by side on this machine class
  };
  const Load loads[] = {{"2/s", 60.0}, {"8/s", 15.9}};
  std::printf("bench vidur: Llama-2-7B on 1 x A100, vLLM, 550/150 fixed, Poisson arrivals, 10,000 requests, default outputs (best of %d)\n",
              reps);
  bool ok = true;
  for (const Load& load : loads) {
    const std::vector<std::string> sets = {fmt::format("workload.arrival.rate={}", load.rate)};
    double best = 1e30, best_sim = 0, best_events = 1e30;
    // The last repetition runs every serving iteration as its own events (--no-fast-forward):
    // the same outputs, for the comparison.
    for (int r = 0; r <= reps; ++r) {
      const bool events_only = r == reps;
      const RunControl::FastForward mode(!events_only);
      const auto t0 = std::chrono::steady_clock::now();
      Scenario sc = load_scenario(file, sets, reg);
      // As `sluice run`: the directory is claimed first and requests.csv streams into it.
      OutputDir out((dir / "run").string(), /*replace_result=*/true);
      Recorder rec;
      rec.stream_into(out.staging());
      const Json header = run_into(sc, rec, {});
      const auto t1 = std::chrono::steady_clock::now();
      rec.write_into(out, header);
      const auto t2 = std::chrono::steady_clock::now();
      const double wall = std::chrono::duration<double>(t2 - t0).count();
      if (events_only) {
        best_events = wall;
        continue;
      }
      if (wall < best) {
        best = wall;
        best_sim = std::chrono::duration<double>(t1 - t0).count();
      }
    }
    uintmax_t bytes = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir / "run")) bytes += e.file_size();
    const double speedup = load.vidur_s / best;
    std::printf("  Poisson %s\n", load.rate);
    std::printf("    wall time      %10.1f ms (load + simulate %.1f ms with requests.csv streamed, write %.1f ms)\n", best * 1e3,
                best_sim * 1e3, (best - best_sim) * 1e3);
    std::printf("    against Vidur  %10.0fx   (Vidur %.1f s; target 1000x: under %.1f ms)\n", speedup, load.vidur_s,
                load.vidur_s / 1000 * 1e3);
    std::printf("    no fast-forward%10.1f ms (every iteration as its own events; same outputs)\n", best_events * 1e3);
    std::printf("    written        %10.2f MB\n", static_cast<double>(bytes) / 1e6);
    ok = ok && bytes > 0;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return ok ? 0 : 1;
}

// `sluice bench stress`: 10 million llmperf requests on 512 replicas with node failures on,
// as `sluice run` does it: the result directory (a temporary one) is claimed first and every
// request's record streams into its requests.csv while the run goes, so peak memory follows
// the requests in flight, not the run's length. --quick: 200,000 requests.
int bench_stress(const Registry& reg, bool quick) {
  const long requests = quick ? 200'000 : 10'000'000;
  const std::string yaml = fmt::format(R"(
name: bench-stress
seed: 1
hardware: h200
model: llama3-8b
deployment: {{replicas: 512, nodes: 64, gpus_per_node: 8}}
scheduler: {{kind: vllm}}
router: {{kind: least_outstanding}}
workload: {{kind: llmperf, requests: {}, arrival: {{kind: poisson, rate: 5000/s}}}}
recovery: {{reload: 30s, failover_timeout: 60s}}
faults:
  - {{name: nodes, kind: random, component: node, ttf: {{dist: exponential, mean: 4h}},
     repair: {{dist: lognormal, mean: 10min, sigma: 0.5}}}}
outputs: {{trace: true, requests_csv: true, timeseries: true}}
)", requests);
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("sluice-bench-stress-{}", ::getpid());
  const auto t0 = std::chrono::steady_clock::now();
  Scenario sc = load_scenario_text(yaml, "<bench stress>", {}, reg);
  uintmax_t csv_bytes = 0;
  Json m;
  {
    OutputDir out((dir / "run").string(), /*replace_result=*/true);
    Recorder rec;
    rec.stream_into(out.staging());
    const Json header = run_into(sc, rec, {});
    rec.write_into(out, header);
    m = rec.metrics();
    std::error_code ec;
    csv_bytes = std::filesystem::file_size(dir / "run" / "requests.csv", ec);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const Json& s = m["serving"];
  const double events = s["events"].get<double>(), sim_s = s["simulated_s"].get<double>();
  const double completed = s["requests"]["completed"].get<double>();
  std::printf("bench stress: %ld llmperf requests (550±150 in, 150±80 out), Llama-3-8B, 512 × H200 (64 nodes), vLLM, Poisson 5000/s,\n"
              "  node failures (MTBF 4 h per node, repair ~10 min, reload 30 s); records streamed to disk\n", requests);
  std::printf("  wall time        %10.2f s (load, simulate, write)\n", wall);
  std::printf("  simulated time   %10.1f s\n", sim_s);
  std::printf("  events           %10.0f (%.2f M events/s)\n", events, events / wall / 1e6);
  std::printf("  requests         %10.0f answered, %.0f failed, %.0f rejected as overload; %.0f requests/s wall\n", completed,
              s["requests"].value("failed", 0.0), s["requests"]["rejected_overload"].get<double>(), completed / wall);
  std::printf("  in flight        %10.0f at most (request slots; memory follows this)\n", s["requests"]["in_flight_max"].get<double>());
  std::printf("  faults           %10.0f replica failures, availability %.4f\n", s["faults"]["replica_failures"].get<double>(),
              s["faults"]["availability"].get<double>());
  std::printf("  requests.csv     %10.1f MB streamed\n", static_cast<double>(csv_bytes) / 1e6);
  std::printf("  percentiles      %s\n", s["percentiles"].get<std::string>().c_str());
  std::printf("  peak RSS         %10.1f MiB (getrusage ru_maxrss of this process)\n", ru.ru_maxrss / 1024.0);
  return completed > 0 && csv_bytes > 0 ? 0 : 1;
}

}  // namespace

SLUICE_REGISTER(bench, world_benches) {
  reg.add("bench", "stress", "10M llmperf requests on 512 replicas with node failures, records streamed to disk: wall, events/s, requests/s, peak RSS (--quick: 200k)",
          Schema{}, BenchFn([&reg](bool quick) { return bench_stress(reg, quick); }));
  reg.add("bench", "vidur", "Vidur's scenario (Llama-2-7B, A100, 10k requests) as sluice run does it, outputs included",
          Schema{}, BenchFn([&reg](bool quick) { return bench_vidur(reg, quick); }));
  reg.add("bench", "world", "64 serving replicas + a 256-GPU training job on one fat-tree for 10 simulated minutes: events/s, flows/s, wall",
          Schema{}, BenchFn([&reg](bool quick) { return bench_world(reg, quick); }));
}

}  // namespace sluice
