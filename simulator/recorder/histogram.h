// A log-linear histogram for latency distributions too large to keep sample by sample
// (e.g. every inter-token gap of a million requests): 128 sub-buckets per power of two,
// so a percentile is within 0.8% of the exact value.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace sluice {

class LogHistogram {
  __extension__ typedef unsigned __int128 Sum;

 public:
  static constexpr int kSub = 128;
  // Every bucket a non-negative int64 can fall in, made once (58 KiB): record never
  // allocates, so it cannot throw, and Runs may record from its destructor.
  static constexpr size_t kBuckets = 57 * kSub;  // bucket(2^63 - 1) = 56 * 128 + 127
  LogHistogram() : counts_(kBuckets, 0) {}
  // The bucket of v (public for the check below and its test).
  static constexpr size_t bucket(uint64_t v) {
    if (v < kSub) return static_cast<size_t>(v);
    const int msb = 63 - __builtin_clzll(v);
    const int shift = msb - 7;  // log2(kSub) = 7
    return static_cast<size_t>((shift + 1) * kSub + static_cast<int>((v >> shift) - kSub));
  }
  void record(int64_t v) { record(v, 1); }
  // `k` samples of value v at once (the same histogram as k calls of record(v)). It and Runs are
  // always inlined: the serving hot path records a run of gaps per sequence, and GCC, left to
  // itself, moved them out of line once serving_sim.cpp grew (+2% instructions on Vidur's run).
  [[gnu::always_inline]] void record(int64_t v, uint64_t k) {
    if (k == 0) return;
    if (v < 0) v = 0;
    counts_[bucket(static_cast<uint64_t>(v))] += k;
    if (n_ == 0 || v < min_) min_ = v;
    n_ += k;
    sum_ += static_cast<Sum>(v) * k;
    if (v > max_) max_ = v;
  }
  // Records a stream of values as runs of equal ones (one record(v, k) per run: a batch's
  // inter-token gaps mostly share one value); the last run is recorded by flush() or on exit.
  class Runs {
   public:
    explicit Runs(LogHistogram& h) : h_(h) {}
    Runs(const Runs&) = delete;
    Runs& operator=(const Runs&) = delete;
    // Records the last run: it cannot throw (record never allocates), even while unwinding.
    ~Runs() { flush(); }
    [[gnu::always_inline]] void add(int64_t v) {
      if (v != v_) {
        h_.record(v_, k_);
        v_ = v;
        k_ = 0;
      }
      ++k_;
    }
    [[gnu::always_inline]] void flush() {
      h_.record(v_, k_);
      k_ = 0;
    }

   private:
    LogHistogram& h_;
    int64_t v_ = -1;
    uint64_t k_ = 0;
  };
  uint64_t count() const { return n_; }
  double mean() const { return n_ ? static_cast<double>(sum_) / static_cast<double>(n_) : 0; }
  int64_t max() const { return max_; }
  int64_t min() const { return min_; }
  // Value at percentile p (0..100): the midpoint of the bucket holding that rank.
  double percentile(double p) const {
    if (n_ == 0) return 0;
    const uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(n_)));
    uint64_t seen = 0;
    for (size_t b = 0; b < counts_.size(); ++b) {
      seen += counts_[b];
      if (seen >= (rank == 0 ? 1 : rank)) {
        const double lo = lower(b), hi = lower(b + 1);
        const double mid = (lo + hi) / 2;
        return std::min(std::max(mid, static_cast<double>(min_)), static_cast<double>(max_));
      }
    }
    return static_cast<double>(max_);
  }

 private:
  static double lower(size_t b) {
    if (b < kSub) return static_cast<double>(b);
    const size_t shift = b / kSub - 1;
    const size_t sub = b % kSub;
    return std::ldexp(static_cast<double>(kSub + sub), static_cast<int>(shift));
  }
  std::vector<uint64_t> counts_;
  uint64_t n_ = 0;
  // Exact: a double sum of nanosecond gaps rounds once it passes 2^53 ns (104 days of gaps,
  // a long run of many tokens); as an integer the mean is exact and independent of how the
  // samples were grouped. Equal to the double sum wherever that was exact.
  Sum sum_ = 0;
  int64_t max_ = 0, min_ = 0;
};

static_assert(LogHistogram::bucket(uint64_t{INT64_MAX}) == LogHistogram::kBuckets - 1,
              "every non-negative int64 has a bucket made at construction");

}  // namespace sluice
