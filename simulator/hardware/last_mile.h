// The host side of token delivery: copying sampled token ids from the device to the host,
// from the measured d2h table (batch, mode -> median µs) when the hardware has one. The
// table is read and interpolated by the cost tables' own reader (tables.h), so the serving
// path uses the interpolation whose leave-one-out error `sluice cost --leave-one-out` reports.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace sluice {

namespace costtab {
class D2hTable;
}

class D2hTable {
 public:
  D2hTable();
  ~D2hTable();
  D2hTable(D2hTable&&) noexcept;
  D2hTable& operator=(D2hTable&&) noexcept;
  // Reads <tables_dir>/d2h.csv for `mode` (pinned | pageable | item); false if absent.
  bool load(const std::string& tables_dir, const std::string& mode);
  bool loaded() const { return table_ != nullptr; }
  // Median host wall time (ns) to bring `batch` token ids to the host.
  double ns(int batch) const;
  std::string source() const { return source_; }

 private:
  std::unique_ptr<costtab::D2hTable> table_;
  std::string mode_, source_;
  std::vector<double> by_batch_;  // ns(batch) for batches below its size, computed at load (a map lookup and a log-log curve each)
};

}  // namespace sluice
