#include "hardware/last_mile.h"

#include "config/paths.h"
#include "hardware/tables.h"

namespace sluice {

D2hTable::D2hTable() = default;
D2hTable::~D2hTable() = default;
D2hTable::D2hTable(D2hTable&&) noexcept = default;
D2hTable& D2hTable::operator=(D2hTable&&) noexcept = default;

bool D2hTable::load(const std::string& dir, const std::string& mode) {
  const std::string path = dir + "/d2h.csv";
  if (!path_is_regular_file(path)) return false;
  auto t = std::make_unique<costtab::D2hTable>(costtab::D2hTable::from_csv(costtab::read_csv(path)));
  if (t->us_median(mode, 1) < 0) return false;  // the table has no rows of this mode
  table_ = std::move(t);
  mode_ = mode;
  source_ = "table:d2h.csv (" + mode + ")";
  by_batch_.resize(4097);
  for (size_t b = 0; b < by_batch_.size(); ++b) by_batch_[b] = table_->us_median(mode_, static_cast<double>(b)) * 1e3;
  return true;
}

double D2hTable::ns(int batch) const {
  if (batch >= 0 && static_cast<size_t>(batch) < by_batch_.size()) return by_batch_[static_cast<size_t>(batch)];
  return table_->us_median(mode_, batch) * 1e3;
}

}  // namespace sluice
