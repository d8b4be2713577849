// A busy timeline at bounded memory: how much of each window of simulated time something was
// busy, and how much work it did there. Windows start at one second and double (pairs merge)
// whenever a stretch would reach past the last of kMaxWindows, so a run of any length keeps at
// most kMaxWindows of them: seconds for a minutes-long run, about an hour for months.
// The world's energy ledger reads it for peak power (world/energy.h).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

class BusyProfile {
 public:
  static constexpr int64_t kFirstWidth_ns = 1'000'000'000;
  static constexpr size_t kMaxWindows = 1024;

  // Busy over [start, end) at `weight` (a fraction of the time: 1 = wholly busy).
  void add(int64_t start_ns, int64_t end_ns, double weight = 1) {
    if (end_ns <= start_ns || weight <= 0 || start_ns < 0) return;
    fit(end_ns - 1);
    for (int64_t k = start_ns / width_; k * width_ < end_ns; ++k) {
      const int64_t lo = std::max(start_ns, k * width_), hi = std::min(end_ns, (k + 1) * width_);
      at(k, busy_) += weight * static_cast<double>(hi - lo);
    }
  }
  // `n` stretches of `period_ns` back to back from `start_ns`, each as add() puts it (the same
  // sums to the bit, so a fast-forward matches the iterations it stands for), at about a
  // nanosecond each while they stay inside one window.
  void add_repeated(int64_t start_ns, int64_t period_ns, int64_t n, double weight) {
    if (period_ns <= 0 || weight <= 0 || start_ns < 0) return;
    const double each = weight * static_cast<double>(period_ns);
    int64_t s = start_ns, i = 0;
    while (i < n) {
      const int64_t e = s + period_ns;
      if (e - 1 < static_cast<int64_t>(kMaxWindows) * width_) {  // add() would not widen the windows
        const int64_t k = s / width_, wend = (k + 1) * width_;
        if (e <= wend) {
          double& b = at(k, busy_);
          for (; i < n && s + period_ns <= wend; ++i, s += period_ns) b += each;
          continue;
        }
      }
      add(s, e, weight);
      s = e;
      ++i;
    }
  }
  // Work (tokens, FLOPs: any unit the caller keeps) done at one instant.
  void work(int64_t t_ns, double amount) {
    if (t_ns < 0 || amount == 0) return;
    fit(t_ns);
    at(t_ns / width_, work_) += amount;
  }
  // Adds another profile's windows (both end up at the wider of the two widths).
  void merge(const BusyProfile& o) {
    coarsen_to(o.width_);
    BusyProfile c = o;
    c.coarsen_to(width_);
    for (size_t k = 0; k < c.busy_.size(); ++k) at(static_cast<int64_t>(k), busy_) += c.busy_[k];
    for (size_t k = 0; k < c.work_.size(); ++k) at(static_cast<int64_t>(k), work_) += c.work_[k];
  }
  // Merges windows until they are at least `width` wide (a power-of-two multiple of the first).
  void coarsen_to(int64_t width) {
    while (width_ < width) halve();
  }
  int64_t width_ns() const { return width_; }
  // Busy nanoseconds (weighted) and work in window k, [k w, (k + 1) w); 0 past the last recorded.
  double busy_ns(size_t k) const { return k < busy_.size() ? busy_[k] : 0.0; }
  double work_in(size_t k) const { return k < work_.size() ? work_[k] : 0.0; }
  double total_busy_ns() const { return sum(busy_); }
  double total_work() const { return sum(work_); }
  bool empty() const { return busy_.empty() && work_.empty(); }

 private:
  static double sum(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
  }
  static double& at(int64_t k, std::vector<double>& v) {
    if (static_cast<size_t>(k) >= v.size()) v.resize(static_cast<size_t>(k) + 1, 0.0);
    return v[static_cast<size_t>(k)];
  }
  void fit(int64_t t_ns) {
    while (t_ns / width_ >= static_cast<int64_t>(kMaxWindows)) halve();
  }
  void halve() {
    for (auto* v : {&busy_, &work_}) {
      std::vector<double>& x = *v;
      for (size_t k = 0; k < x.size(); ++k) {
        if (k % 2 == 0) x[k / 2] = x[k];
        else x[k / 2] += x[k];
      }
      x.resize((x.size() + 1) / 2);
    }
    width_ *= 2;
  }
  int64_t width_ = kFirstWidth_ns;
  std::vector<double> busy_, work_;
};

}  // namespace sluice
