// libFuzzer target: arbitrary bytes as a request trace, read by the CSV reader (SLUICE_FUZZ_JSONL
// undefined) or the JSONL reader (defined), through the serving workload that replays it. Every
// input must load or fail with a ConfigError naming the trace.
// Build and run: see tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::fuzz;
#ifdef SLUICE_FUZZ_JSONL
  const auto file = scratch() / "trace.jsonl";
#else
  const auto file = scratch() / "trace.csv";
#endif
  write(file, data, size);
  load_expecting_config_errors_only("model: llama3-8b\nworkload: {kind: trace, file: '" + file.string() + "'}\n"
                                    "outputs: {trace: false}\n");
  return 0;
}
