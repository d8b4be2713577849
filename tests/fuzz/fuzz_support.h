// Shared by the libFuzzer targets: the registry, a per-process scratch folder, and the rule
// every target enforces — an input either loads or fails with the reader's own error type
// (ConfigError, TableError); any other exception, a crash, a hang or a sanitizer report is a bug.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "run/scenario.h"
#include "registry/registry.h"

namespace sluice::fuzz {

inline const Registry& registry() { return builtin_registry(); }

// A folder of this process's own under the temp directory (removed at exit).
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("sluice-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::temp_directory_path() / ("sluice-fuzz-" + std::to_string(::getpid())), ec);
    });
    return d;
  }();
  return dir;
}

inline void write(const std::filesystem::path& p, const uint8_t* data, size_t size) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// Loads (validates and builds) a scenario; only a ConfigError is an acceptable failure.
inline void load_expecting_config_errors_only(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    load_scenario_text(yaml, "fuzz.yaml", sets, registry());
  } catch (const ConfigError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a ConfigError: %s\n", e.what());
    std::abort();
  }
}

}  // namespace sluice::fuzz
