// File tests that never throw: a path from user input may be too long or unreadable, and
// that must end in a clear ConfigError, not a std::filesystem_error.
#pragma once
#include <filesystem>
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

}  // namespace sluice
