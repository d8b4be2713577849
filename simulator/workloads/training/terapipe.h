// Token-level slicing of a sequence for a pipeline (TeraPipe, Li et al., ICML 2021).
//
// A sequence of S tokens is cut into slices that enter the pipeline one after another; slice
// i of l_i tokens after a prefix of c_i tokens costs t(l_i, c_i) on a stage (attention over
// the prefix grows with c). Over K stages one pass takes
//     T = sum_i t_i + (K - 1) * max_j t_j
// (paper, eq. 3). Policies: none (one slice), uniform (k slices as equal as the granularity
// allows) and TeraPipe's dynamic program (Algorithm 1): for each candidate t_max in ascending
// order, the least sum of slice times with every slice at most t_max (slice lengths in steps
// of `granularity` tokens), stopping once (K - 1) * t_max alone exceeds the best T found.
//
// Two generalisations, both the paper's formula when left at their defaults: m micro-batches
// sliced alike pass in T = m * sum + (K - 1) * max (GPipe: the first stage runs all m x n
// slices; the last slice trails by K - 1 stage times), and the sum may use its own cost a(l, c)
// (a stage that overlaps its sends with compute is held max(compute, send) per slice, while
// one slice's way through the pipeline takes compute + send at every stage).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace sluice::training {

enum class SlicingPolicy { None, Uniform, TeraPipe };
const char* slicing_policy_name(SlicingPolicy p);

// A slicing of one sequence and what the formula predicts for it.
struct SlicePlan {
  std::vector<int> lengths;  // tokens per slice, in order (sum = the sequence)
  double sum_ns = 0, max_ns = 0;  // sum of a(l, c) over the slices, max of t(l, c)
  double latency_ns = 0;     // m * sum + (K - 1) * max
  // The DP's work: distinct t_max candidates, how many DPs it ran before the early stop, and
  // its wall time (for the bench; never part of a result, which must be deterministic).
  long candidates = 0, evaluated = 0;
  double wall_ms = 0;
};

// t(l, c) in ns for a slice of l tokens after c: both multiples of the granularity except
// where the sequence ends.
using SliceCostFn = std::function<double(int l, int c)>;

// Options of the DP.
struct TeraPipeOptions {
  int granularity = 8;   // slice lengths in steps of this many tokens
  int micro_batches = 1; // m: micro-batches sliced alike, one after another
  SliceCostFn sum_cost;  // a(l, c) of the sum term; empty: t
  // t_max candidates closer than this relative gap to the previous one evaluated are skipped
  // (the result's T is then within this factor of the optimum); 0: every distinct t(l, c).
  double candidate_gap = 1e-3;
  // Called with each slicing the DP finds for a t_max it evaluates (the best under that bound),
  // so a caller can judge the candidates by another cost (training: its schedule as simulated).
  std::function<void(const std::vector<int>& lengths)> on_candidate;
};

// Cuts `sequence` tokens into `k` slices whose lengths are multiples of `granularity` (the
// last may end the sequence early) and differ by at most one granule, longer ones first.
std::vector<int> uniform_slices(int sequence, int k, int granularity);

// T = m * sum a + (K - 1) * max t for a given slicing (a = t unless opt.sum_cost is set).
SlicePlan evaluate_slices(const std::vector<int>& lengths, int stages, const SliceCostFn& t, const TeraPipeOptions& opt = {});

// TeraPipe's dynamic program over slicings of `sequence` tokens for `stages` stages.
// Throws std::invalid_argument on a non-positive sequence, stage count or granularity.
SlicePlan terapipe_slices(int sequence, int stages, const SliceCostFn& t, const TeraPipeOptions& opt = {});

}  // namespace sluice::training
