// A progress bar with ETA on stderr, shown only on a terminal and only once a run is slow.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace sluice::cli {

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO)), start_(Clock::now()) {}
  void update(double f) {
    if (!enabled_) return;
    const auto now = Clock::now();
    const double el = std::chrono::duration<double>(now - start_).count();
    if (el < 1.0 || std::chrono::duration<double>(now - last_).count() < 0.2) return;
    last_ = now;
    shown_ = true;
    const int width = 40, filled = static_cast<int>(f * width);
    const double eta = f > 0 ? el * (1 - f) / f : 0;
    std::fprintf(stderr, "\r[%s%s] %5.1f%%  elapsed %.0fs  ETA %.0fs ", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), 100 * f, el, eta);
    std::fflush(stderr);
  }
  // Erases the bar (before the summary is printed).
  void finish() {
    if (shown_) std::fprintf(stderr, "\r%80s\r", "");
    shown_ = false;
  }
  ~ProgressBar() { finish(); }

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  bool shown_ = false;
  Clock::time_point start_, last_{};
};


}  // namespace sluice::cli
