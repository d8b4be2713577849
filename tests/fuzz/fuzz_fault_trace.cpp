// libFuzzer target: arbitrary bytes as a fault trace (`TIME CLASS:NAME down|up` a line) read
// by the `trace` fault process of a world on a 3:1 fat-tree, then run briefly. Every input
// must load or fail with a ConfigError; a run that loads must not crash or break an invariant.
// Build and run: see tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz_support.h"
#include "recorder/recorder.h"
#include "run/runner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::fuzz;
  static const auto path = scratch() / "trace.faults";
  write(path, data, size);
  const std::string yaml = R"(
name: fuzz-faults
cluster: {topology: {catalog: fat-tree, servers: 4, oversubscription: 2}, hardware: h100-sxm}
workloads:
  - {name: job, kind: training, model: gpt3-1b, parallel: {tp: 8, dp: 2}, iterations: 2, place: {servers: 0-1},
     recovery: {restart: 1s, collective_timeout: 5s}}
faults:
  - {kind: trace, file: ")" + path.string() + R"("}
max_sim_time: 60s
)";
  try {
    sluice::Scenario sc = sluice::load_scenario_text(yaml, "fuzz.yaml", {}, registry());
    sluice::Recorder rec;
    sluice::run_into(sc, rec, {});
  } catch (const sluice::ConfigError&) {
  } catch (const std::runtime_error& e) {
    // A trace may fail devices for good: the job then stalls, and the run says so.
    if (std::string(e.what()).find("stalled") == std::string::npos) {
      std::fprintf(stderr, "not a ConfigError or a stall: %s\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a ConfigError: %s\n", e.what());
    std::abort();
  }
  return 0;
}
