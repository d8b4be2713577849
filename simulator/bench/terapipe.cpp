// `sluice bench terapipe`: the running time of TeraPipe's slicing DP for one 8192-token
// sequence over 48 pipeline stages (GPT-3 175B, 8-way tensor parallel, on V100s: the cost of
// every slice from the cost model), with the default candidate gap and with every candidate.
#include <chrono>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "hardware/cost_model.h"
#include "registry/registry.h"
#include "workloads/training/terapipe.h"

namespace sluice::training {

namespace {

int bench_terapipe(bool quick) {
  const int S = quick ? 2048 : 8192, K = 48, g = 8;
  ModelSpec m = load_model("gpt3-175b");
  m.max_context = S;
  CostOptions o;
  o.tensor_parallel = 8;
  o.pipeline_parallel = K;
  o.comm_on_fabric = true;
  const CostModel cost(load_hardware("v100-16gb"), m, o);
  std::vector<double> st(static_cast<size_t>(K));
  long calls = 0;
  // The training job's t(l, c): the slowest stage's forward + backward (2x forward).
  auto t = [&](int l, int c) {
    ++calls;
    cost.slice_stage_ns(1, l, c, true, st);
    double mx = 0;
    for (double x : st) mx = x > mx ? x : mx;
    return 3 * mx;
  };
  std::printf("bench terapipe: slicing DP for %d tokens over %d stages in steps of %d (GPT-3 175B, tp 8, V100)\n", S, K, g);
  int rc = 0;
  for (double gap : {1e-3, 1e-4, 0.0}) {
    TeraPipeOptions opt;
    opt.granularity = g;
    opt.candidate_gap = gap;
    calls = 0;
    const SlicePlan p = terapipe_slices(S, K, t, opt);
    int lo = S, hi = 0;
    for (int l : p.lengths) lo = l < lo ? l : lo, hi = l > hi ? l : hi;
    std::printf("  candidate gap %-6g %8.1f ms wall  %7ld cost calls  %7ld candidates  %5ld DPs  -> %zu slices of %d..%d tokens, T %.2f ms\n",
                gap, p.wall_ms, calls, p.candidates, p.evaluated, p.lengths.size(), lo, hi, p.latency_ns / 1e6);
    if (p.lengths.empty()) rc = 1;
  }
  return rc;
}

}  // namespace

SLUICE_REGISTER(bench, terapipe_bench) {
  reg.add("bench", "terapipe", "TeraPipe's slicing DP for 8192 tokens over 48 stages (GPT-3 175B on V100): wall time, candidates, DPs run",
          Schema{}, BenchFn([](bool quick) { return bench_terapipe(quick); }));
}

}  // namespace sluice::training
