// `sluice bench cost`: iteration_ns of the cost model on serving-like batches (ns per call and per
// sequence).
#include <chrono>
#include <cstdio>
#include <vector>
#include <time.h>  // clock_gettime (POSIX)

#include <fmt/format.h>

#include "hardware/cost_model.h"
#include "registry/registry.h"

namespace sluice {

namespace {

// Times iteration_ns on serving-like batches: decode batches of mixed lengths up to 256 and
// an occasional prefill chunk; prints ns per call and per sequence.
int bench_cost(bool quick) {
  const HardwareSpec hw = load_hardware("h200");
  const ModelSpec m = load_model("llama3-8b");
  CostModel cm(hw, m, CostOptions{1, 1, default_tables_dir(hw)});
  const long calls = quick ? 200'000 : 2'000'000;
  std::vector<SeqWork> batch;
  uint64_t x = 42;
  auto rnd = [&x] {  // xorshift: deterministic lengths without the RNG streams of a run
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  double sink = 0;
  long seqs = 0;
  // CPU time of this thread beside the wall clock: on a loaded machine the wall clock counts the
  // time other processes hold the core, the CPU time only this loop's.
  auto cpu_s = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  };
  const double c0 = cpu_s();
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) {
    if (i % 64 == 0) {
      batch.assign(1 + rnd() % 256, SeqWork{});
      for (auto& s : batch) s.context = static_cast<int>(rnd() % 4096);
      if (i % 256 == 0) batch[0] = SeqWork{512, 0, true};
    }
    batch[static_cast<size_t>(i) % batch.size()].context += 1;
    sink += cm.iteration_ns(batch);
    seqs += static_cast<long>(batch.size());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_s() - c0;
  std::printf("cost: %ld iteration_ns calls (llama3-8b on h200, batches 1-256) in %.3f s: %.0f ns per call, %.2f ns per "
              "sequence (mean batch %.0f; checksum %.17g)\n",
              calls, s, 1e9 * s / static_cast<double>(calls), 1e9 * s / static_cast<double>(seqs),
              static_cast<double>(seqs) / static_cast<double>(calls), sink);
  std::printf("  cpu time %.3f s: %.0f ns per call; target: under 722 ns per call (the hot path before per-kernel costing; "
              "1409 ns after it, unoptimised)\n",
              cpu, 1e9 * cpu / static_cast<double>(calls));
  return 0;
}

}  // namespace

SLUICE_REGISTER(bench, cost_bench) {
  reg.add("bench", "cost", "iteration_ns of the cost model on serving-like batches (ns per call and per sequence)",
          Schema{}, BenchFn(bench_cost));
}

}  // namespace sluice
