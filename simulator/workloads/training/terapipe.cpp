// TeraPipe's slicing DP (Li et al., ICML 2021, Algorithm 1), made practical for long sequences.
//
// Units of `granularity` tokens, N = ceil(S / g) of them. The table t[c][l] (slice of l units
// after c) is filled once, N(N+1)/2 entries, and each row is made monotone in l (a running
// max: a slice may be no cheaper than a shorter one from the same start), so that "every
// slice at most t_max" allows a prefix of lengths from each start, lim[c], which only grows
// as t_max rises. Candidates are the distinct table values in ascending order; for each the
// DP f[x] = min_{c < x, x - c <= lim[c]} f[c] + t[c][x - c] gives the least sum, and
// T = f[N] + (K - 1) * (the largest slice it used). Two things keep it fast:
//   - early stop (the paper's): once F + (K - 1) * t_max >= best T, where F is the least sum
//     with no bound at all (0 in the paper's form), no larger candidate can win;
//   - only positions after the first start whose lim grew are recomputed (f before it cannot
//     change), and candidates within `candidate_gap` of one another share one DP (the largest
//     of them: T is then within that factor of the optimum; 0 runs every candidate).
#include "workloads/training/terapipe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace sluice::training {

const char* slicing_policy_name(SlicingPolicy p) {
  switch (p) {
    case SlicingPolicy::None: return "none";
    case SlicingPolicy::Uniform: return "uniform";
    case SlicingPolicy::TeraPipe: return "terapipe";
  }
  return "?";
}

std::vector<int> uniform_slices(int sequence, int k, int granularity) {
  if (sequence < 1 || k < 1 || granularity < 1)
    throw std::invalid_argument(fmt::format("uniform slices: sequence {}, {} slices, granularity {}", sequence, k, granularity));
  const int units = (sequence + granularity - 1) / granularity;
  if (k > units)
    throw std::invalid_argument(fmt::format("{} tokens in steps of {} make {} slices at most, not {}", sequence, granularity, units, k));
  std::vector<int> out;
  int pos = 0;
  for (int i = 0; i < k; ++i) {
    const int u = units / k + (i < units % k ? 1 : 0);
    const int end = std::min(sequence, pos + u * granularity);
    out.push_back(end - pos);
    pos = end;
  }
  return out;
}

SlicePlan evaluate_slices(const std::vector<int>& lengths, int stages, const SliceCostFn& t, const TeraPipeOptions& opt) {
  SlicePlan p;
  p.lengths = lengths;
  int c = 0;
  for (int l : lengths) {
    const double x = t(l, c);
    p.sum_ns += opt.sum_cost ? opt.sum_cost(l, c) : x;
    p.max_ns = std::max(p.max_ns, x);
    c += l;
  }
  p.latency_ns = opt.micro_batches * p.sum_ns + (stages - 1) * p.max_ns;
  return p;
}

SlicePlan terapipe_slices(int sequence, int stages, const SliceCostFn& t, const TeraPipeOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const int g = opt.granularity;
  if (sequence < 1 || stages < 1 || g < 1)
    throw std::invalid_argument(fmt::format("terapipe slices: sequence {}, {} stages, granularity {}", sequence, stages, g));
  if (!(opt.candidate_gap >= 0)) throw std::invalid_argument("terapipe slices: candidate_gap must be >= 0");
  if (opt.micro_batches < 1) throw std::invalid_argument("terapipe slices: micro_batches must be >= 1");
  const double m = opt.micro_batches;
  const int N = (sequence + g - 1) / g;
  auto pos = [&](int u) { return std::min(sequence, u * g); };
  // t[c][l] at off[c] + l - 1, as a running max along l; a[c][l] the sum term's cost (m x a).
  std::vector<size_t> off(static_cast<size_t>(N) + 1, 0);
  for (int c = 0; c < N; ++c) off[static_cast<size_t>(c) + 1] = off[static_cast<size_t>(c)] + static_cast<size_t>(N - c);
  std::vector<double> tab(off.back()), sum_tab;
  if (opt.sum_cost) sum_tab.resize(off.back());
  auto check = [&](double x, int l, int c) {
    if (!std::isfinite(x) || x < 0) throw std::invalid_argument(fmt::format("slice cost t({}, {}) = {}", l, c, x));
    return x;
  };
  for (int c = 0; c < N; ++c) {
    double run = 0;
    for (int l = 1; l <= N - c; ++l) {
      const int tokens = pos(c + l) - pos(c), prefix = pos(c);
      run = std::max(run, check(t(tokens, prefix), tokens, prefix));
      tab[off[static_cast<size_t>(c)] + static_cast<size_t>(l) - 1] = run;
      if (opt.sum_cost) sum_tab[off[static_cast<size_t>(c)] + static_cast<size_t>(l) - 1] = m * check(opt.sum_cost(tokens, prefix), tokens, prefix);
    }
  }
  if (!opt.sum_cost) {
    sum_tab = tab;
    for (double& x : sum_tab) x *= m;
  }
  auto T = [&](int c, int l) { return tab[off[static_cast<size_t>(c)] + static_cast<size_t>(l) - 1]; };

  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> f(static_cast<size_t>(N) + 1, kInf);
  std::vector<int> from(static_cast<size_t>(N) + 1, -1);
  std::vector<int> lim(static_cast<size_t>(N), 0);
  // f over positions after `dirty` (f[0..dirty] kept), pushing from every start.
  auto run_dp = [&](int dirty) {
    for (int x = dirty + 1; x <= N; ++x) f[static_cast<size_t>(x)] = kInf;
    f[0] = 0;
    for (int c = 0; c < N; ++c) {
      const double fc = f[static_cast<size_t>(c)];
      if (fc == kInf) continue;
      const int hi = lim[static_cast<size_t>(c)];
      const size_t base = off[static_cast<size_t>(c)];
      for (int l = std::max(1, dirty - c + 1); l <= hi; ++l) {
        const double v = fc + sum_tab[base + static_cast<size_t>(l) - 1];
        if (v <= f[static_cast<size_t>(c + l)]) {  // ties: the later start, so later slices come out shorter
          f[static_cast<size_t>(c + l)] = v;
          from[static_cast<size_t>(c + l)] = c;
        }
      }
    }
  };
  auto used_slices = [&] {
    std::vector<int> cuts;
    for (int x = N; x > 0; x = from[static_cast<size_t>(x)]) cuts.push_back(x);
    std::reverse(cuts.begin(), cuts.end());
    return cuts;
  };

  // F: the least (m x) sum with no bound on the slices.
  for (int c = 0; c < N; ++c) lim[static_cast<size_t>(c)] = N - c;
  run_dp(0);
  const double F = f[static_cast<size_t>(N)];

  std::vector<double> cand(tab);
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  std::fill(lim.begin(), lim.end(), 0);
  SlicePlan best;
  best.latency_ns = kInf;
  std::vector<int> best_cuts;
  size_t i = 0;
  while (i < cand.size()) {
    // The largest candidate within the gap of the smallest one not yet covered.
    const double u = cand[i];
    size_t j = i;
    if (opt.candidate_gap > 0)
      while (j + 1 < cand.size() && cand[j + 1] <= u * (1 + opt.candidate_gap)) ++j;
    const double tmax = cand[j];
    i = j + 1;
    if (F + (stages - 1) * u >= best.latency_ns) break;  // early stop
    int dirty = N;
    for (int c = 0; c < N; ++c) {
      int& L = lim[static_cast<size_t>(c)];
      const int before = L;
      while (L < N - c && T(c, L + 1) <= tmax) ++L;
      if (L != before) dirty = std::min(dirty, c);
    }
    if (best.evaluated == 0) dirty = 0;  // f still holds the unbounded DP
    else if (dirty == N) continue;       // nothing new is allowed: the same slicing
    run_dp(dirty);
    ++best.evaluated;
    if (f[static_cast<size_t>(N)] == kInf) continue;  // no slicing has every slice under tmax
    const std::vector<int> cuts = used_slices();
    double mx = 0;
    for (size_t k = 0, c = 0; k < cuts.size(); c = static_cast<size_t>(cuts[k]), ++k)
      mx = std::max(mx, T(static_cast<int>(c), cuts[k] - static_cast<int>(c)));
    const double total = f[static_cast<size_t>(N)] + (stages - 1) * mx;
    if (opt.on_candidate) {
      std::vector<int> lengths;
      int prev = 0;
      for (int x : cuts) {
        lengths.push_back(pos(x) - pos(prev));
        prev = x;
      }
      opt.on_candidate(lengths);
    }
    if (total < best.latency_ns) {
      best.latency_ns = total;
      best_cuts = cuts;
    }
  }
  best.candidates = static_cast<long>(cand.size());
  std::vector<int> lengths;
  int prev = 0;
  for (int x : best_cuts) {
    lengths.push_back(pos(x) - pos(prev));
    prev = x;
  }
  const long cands = best.candidates, evals = best.evaluated;
  best = evaluate_slices(lengths, stages, t, opt);  // the true t of each slice (the table holds running maxima)
  best.candidates = cands;
  best.evaluated = evals;
  best.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return best;
}

}  // namespace sluice::training
