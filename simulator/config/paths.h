// File tests that never throw: a path from user input may be too long or unreadable, and
// that must end in a clear ConfigError, not a std::filesystem_error.
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

namespace sluice {

inline bool path_exists(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec) && !ec;
}
inline bool path_is_regular_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) && !ec;
}
inline bool path_is_directory(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_directory(p, ec) && !ec;
}

// A whole file's bytes ("" when it cannot be read: callers check the path first).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace sluice
