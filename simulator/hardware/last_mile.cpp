#include "hardware/last_mile.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace sluice {

bool D2hTable::load(const std::string& dir, const std::string& mode) {
  std::ifstream in(dir + "/d2h.csv");
  if (!in) return false;
  std::string line;
  std::getline(in, line);  // header: batch,mode,us_median,us_p99
  std::vector<std::pair<double, double>> pts;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string b, m, med;
    std::getline(ss, b, ',');
    std::getline(ss, m, ',');
    std::getline(ss, med, ',');
    if (m != mode) continue;
    pts.emplace_back(std::stod(b), std::stod(med) * 1e3);
  }
  std::sort(pts.begin(), pts.end());
  batch_.clear();
  ns_.clear();
  for (auto& [b, n] : pts) {
    batch_.push_back(b);
    ns_.push_back(n);
  }
  source_ = "table:d2h.csv (" + mode + ")";
  return !batch_.empty();
}

double D2hTable::ns(int batch) const {
  const double b = batch;
  if (b <= batch_.front()) return ns_.front();
  if (b >= batch_.back()) return ns_.back();
  const size_t i = static_cast<size_t>(std::upper_bound(batch_.begin(), batch_.end(), b) - batch_.begin());
  const double f = (b - batch_[i - 1]) / (batch_[i] - batch_[i - 1]);
  return ns_[i - 1] + f * (ns_[i] - ns_[i - 1]);
}

}  // namespace sluice
