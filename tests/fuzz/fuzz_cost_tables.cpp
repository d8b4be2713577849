// libFuzzer target: arbitrary bytes as one calibration table. The input replaces the table
// whose header its first line matches (else one chosen by its first byte) in a copy of the
// shipped h200 tables, which a serving scenario then loads through the cost model; the same
// bytes go through the calibration CSV reader (`sluice calibrate compare`). Every input must
// load or fail with a ConfigError (cost model) or a TableError (calibration reader).
// Build and run: see tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>

#include "calibration/compare.h"
#include "calibration/csv_table.h"
#include "fuzz_support.h"

#ifndef SLUICE_SOURCE_DIR
#define SLUICE_SOURCE_DIR "."
#endif

namespace {
const char* const kTables[] = {"gemm.csv", "attention_decode.csv", "attention_prefill.csv", "attention_slice.csv",
                               "elementwise.csv", "d2h.csv", "ceilings.csv"};
constexpr size_t kCount = sizeof kTables / sizeof kTables[0];

std::string first_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty() && l[0] != '#') break;
  return l;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::fuzz;
  namespace fs = std::filesystem;
  static const fs::path shipped = fs::path(SLUICE_SOURCE_DIR) / "results" / "calibration" / "h200-torch";
  static const fs::path dir = scratch() / "tables";
  static std::string headers[kCount];
  static bool ready = false;
  if (!ready) {
    for (size_t i = 0; i < kCount; ++i) headers[i] = first_line(shipped / kTables[i]);
    ready = true;
  }
  const std::string text(reinterpret_cast<const char*>(data), size);
  size_t pick = size ? data[0] % kCount : 0;
  for (size_t i = 0; i < kCount; ++i)
    if (!headers[i].empty() && text.find(headers[i]) != std::string::npos) pick = i;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::copy(shipped, dir, ec);
  write(dir / kTables[pick], data, size);
  load_expecting_config_errors_only("model: llama3-8b\noutputs: {trace: false}\nworkload: {requests: 4}\n",
                                    {"deployment.cost_tables=" + dir.string()});
  try {
    sluice::calibration::parse_csv(text, kTables[pick]);
    sluice::calibration::compare_dirs(dir, shipped);
  } catch (const sluice::calibration::TableError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a TableError: %s\n", e.what());
    std::abort();
  }
  return 0;
}
