// libFuzzer targets of `sluice check`'s readers.
//  fuzz_check_suite: arbitrary bytes as a suite file (YAML: tolerances, entries naming scenario
//    files relative to the suite, published figures), loaded and validated as `sluice check`
//    does (every entry's scenario too). The suite sits in a scratch mirror of scenarios/ (its
//    files linked), so the shipped suites' relative entries resolve.
//  fuzz_check_baseline (SLUICE_FUZZ_BASELINE): arbitrary bytes as the stored baseline of a
//    one-entry suite (the quickstart, cut to 20 requests), checked as `sluice check` does: read
//    and validated before anything runs, then (when it is a baseline) the entry runs and is compared.
// Every input must load (or check) or fail with a ConfigError naming the file; any other
// exception, a crash, a hang or a sanitizer report is a finding. Build and run: tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz_support.h"
#include "run/check.h"

#ifndef SLUICE_SOURCE_DIR
#define SLUICE_SOURCE_DIR "."
#endif

namespace fs = std::filesystem;

namespace {

// scratch/scenarios: a link to each shipped scenario file and folder, and a suites/ folder of its own.
const fs::path& mirror() {
  static const fs::path dir = [] {
    const fs::path m = sluice::fuzz::scratch() / "scenarios";
    fs::create_directories(m / "suites");
    for (const auto& e : fs::directory_iterator(fs::path(SLUICE_SOURCE_DIR) / "scenarios"))
      if (e.path().filename() != "suites") fs::create_symlink(fs::absolute(e.path()), m / e.path().filename());
    return m;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::fuzz;
  try {
#ifdef SLUICE_FUZZ_BASELINE
    static const fs::path suite_file = [] {
      const fs::path d = scratch() / "check";
      fs::create_directories(d / "baselines");
      std::ofstream(d / "suite.yaml") << "suite: fuzz\nbaselines: baselines\n"
                                          "tolerances:\n  - {metric: \"*.latency_ms.ttft.p50\", relative: 5%, worse: higher}\n"
                                          "  - {metric: \"*.throughput.output_tokens_per_s\", relative: 2%, worse: lower}\n"
                                          "scenarios:\n  - {file: " << fs::absolute(fs::path(SLUICE_SOURCE_DIR) / "scenarios" / "quickstart.yaml").string()
                                       << ", name: quickstart, set: [\"workload.requests=20\"]}\n";
      return d / "suite.yaml";
    }();
    write(suite_file.parent_path() / "baselines" / "quickstart.json", data, size);
    const sluice::Suite suite = sluice::load_suite(suite_file.string(), registry());
    sluice::run_check(suite, registry(), 1, false);
#else
    const fs::path file = mirror() / "suites" / "fuzz.yaml";
    write(file, data, size);
    sluice::load_suite(file.string(), registry());
#endif
  } catch (const sluice::ConfigError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a ConfigError: %s\n", e.what());
    std::abort();
  }
  return 0;
}
