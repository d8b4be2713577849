// Percentile summaries of values that arrive one at a time (a latency per request as each
// request ends), in bounded memory.
//  * Up to kExactLimit values (2^20) every value is kept and the summary is exact: the same
//    figures, bit for bit, as summarize() over all of them.
//  * Beyond it the values move into a log-bucketed sketch (DDSketch's buckets: bucket i holds
//    (γ^(i-1), γ^i] with γ = (1+α)/(1-α), α = 0.001), so every percentile is within 0.1% of
//    the exact value (relative), whatever the count; count, mean, min, max and stddev stay
//    exact (running sums). Memory: one 8-byte counter per bucket between the smallest and
//    the largest value, about 1,150 per decade (a few tens of kilobytes per summary).
// The summary says which it used ("method").
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "recorder/recorder.h"

namespace sluice {

class StreamingSummary {
 public:
  static constexpr size_t kExactLimit = size_t{1} << 20;
  static constexpr double kRelativeError = 0.001;

  void add(double v) {
    ++n_;
    if (n_ == 1 || v < min_) min_ = v;
    if (n_ == 1 || v > max_) max_ = v;
    if (!sketched_) {
      if (exact_.size() < kExactLimit) {
        exact_.push_back(v);
        return;
      }
      to_sketch();  // the (2^20 + 1)th value: before the vector would grow again
    }
    welford(v);
    sketch(v);
  }
  uint64_t count() const { return n_; }
  bool exact() const { return !sketched_; }

  // p25 p50 p75 p90 p95 p99 mean min max stddev count, as summarize() writes them; a
  // sketched summary adds "method".
  Json json() const {
    if (!sketched_) return summarize(exact_);
    Json j = summary_json(n_, mean_, min_,
                          {percentile(25), percentile(50), percentile(75), percentile(90), percentile(95), percentile(99)}, max_,
                          n_ > 1 ? std::sqrt(m2_ / static_cast<double>(n_ - 1)) : 0.0);
    j["method"] = "sketch: log buckets, percentiles within 0.1% (relative); count, mean, min, max, stddev exact";
    return j;
  }

  // Percentile p (0..100) as numpy's default (linear between the closest ranks), each rank's
  // value read from the sketch.
  double percentile(double p) const {
    if (n_ == 0) return 0;
    const double idx = p / 100.0 * static_cast<double>(n_ - 1);
    const uint64_t lo = static_cast<uint64_t>(std::floor(idx));
    const uint64_t hi = std::min<uint64_t>(lo + 1, n_ - 1);
    const double a = at_rank(lo), b = at_rank(hi);
    return a + (b - a) * (idx - static_cast<double>(lo));
  }

 private:
  static double gamma() { return (1 + kRelativeError) / (1 - kRelativeError); }
  static double log_gamma() {
    static const double lg = std::log(gamma());
    return lg;
  }
  // Values at or below this count as 0 (a queueing delay of exactly 0, say).
  static constexpr double kTiny = 1e-12;

  // Welford's running mean and variance, used once the sketch holds the values: while every
  // value is kept they are not needed, and to_sketch() runs them over the kept values in the
  // order they came (the same figures, bit for bit, as running them from the first).
  void welford(double v) {
    ++welford_n_;
    const double d = v - mean_;
    mean_ += d / static_cast<double>(welford_n_);
    m2_ += d * (v - mean_);
  }
  void to_sketch() {
    sketched_ = true;
    for (double v : exact_) welford(v);
    for (double v : exact_) sketch(v);
    exact_.clear();
    exact_.shrink_to_fit();
  }
  void sketch(double v) {
    if (!(v > kTiny)) {  // zero, negative or NaN
      if (v < -kTiny) ++negative_;
      else ++zeros_;
      return;
    }
    const int64_t i = static_cast<int64_t>(std::ceil(std::log(v) / log_gamma()));
    if (buckets_.empty()) {
      offset_ = i;
      buckets_.assign(1, 0);
    } else if (i < offset_) {
      buckets_.insert(buckets_.begin(), static_cast<size_t>(offset_ - i), 0);
      offset_ = i;
    } else if (i - offset_ >= static_cast<int64_t>(buckets_.size())) {
      buckets_.resize(static_cast<size_t>(i - offset_ + 1), 0);
    }
    ++buckets_[static_cast<size_t>(i - offset_)];
  }
  // The value of rank k (0-based, ascending): the middle of its bucket, within min..max.
  double at_rank(uint64_t k) const {
    if (k < negative_) return min_;  // negatives are not expected; reported as the minimum
    uint64_t seen = negative_ + zeros_;
    if (k < seen) return std::max(min_, 0.0);
    for (size_t b = 0; b < buckets_.size(); ++b) {
      seen += buckets_[b];
      if (k < seen) {
        const double upper = std::exp(static_cast<double>(offset_ + static_cast<int64_t>(b)) * log_gamma());
        const double v = 2 * upper / (gamma() + 1);  // within α of every value in (upper/γ, upper]
        return std::min(std::max(v, min_), max_);
      }
    }
    return max_;
  }

  uint64_t n_ = 0, welford_n_ = 0;
  double min_ = 0, max_ = 0, mean_ = 0, m2_ = 0;
  bool sketched_ = false;
  std::vector<double> exact_;
  std::vector<uint64_t> buckets_;
  int64_t offset_ = 0;
  uint64_t zeros_ = 0, negative_ = 0;
};

}  // namespace sluice
