// The host side of token delivery: copying sampled token ids from the device to the host,
// from the measured d2h table (batch, mode -> median µs) when the hardware has one.
#pragma once
#include <string>
#include <vector>

namespace sluice {

class D2hTable {
 public:
  // Reads <tables_dir>/d2h.csv for `mode` (pinned | pageable | item); false if absent.
  bool load(const std::string& tables_dir, const std::string& mode);
  bool loaded() const { return !batch_.empty(); }
  // Median host wall time (ns) to bring `batch` token ids to the host: linear in batch
  // between measured points, flat beyond them (the copy is latency-bound at these sizes).
  double ns(int batch) const;
  std::string source() const { return source_; }

 private:
  std::vector<double> batch_, ns_;
  std::string source_;
};

}  // namespace sluice
