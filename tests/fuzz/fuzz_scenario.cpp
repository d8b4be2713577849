// libFuzzer target: arbitrary bytes as a scenario. Every input must either validate and build
// or fail with a ConfigError; any other exception, a crash or undefined behaviour is a bug.
// Build and run: see tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "run/scenario.h"
#include "registry/registry.h"

namespace {
const sluice::Registry& registry() { return sluice::builtin_registry(); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    sluice::load_scenario_text(text, "fuzz.yaml", {}, registry());
  } catch (const sluice::ConfigError&) {
    // the expected way to refuse bad input
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a ConfigError: %s\n", e.what());
    std::abort();
  }
  return 0;
}
