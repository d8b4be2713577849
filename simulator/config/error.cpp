#include "config/error.h"

#include <fmt/format.h>

namespace sluice {

std::string Origin::str() const {
  if (file == "--set") return "command line (--set)";
  if (line <= 0) return file;
  return fmt::format("{}:{}:{}", file, line, column);
}

static std::string compose(const Origin& o, const std::string& key, const std::string& value, const std::string& problem,
                           const std::string& valid) {
  std::string s = fmt::format("{}: error: {}", o.str(), key.empty() ? std::string("(top level)") : key);
  if (!value.empty()) s += fmt::format(" = '{}'", value);
  s += fmt::format(": {}", problem);
  if (!valid.empty()) s += fmt::format(" (valid: {})", valid);
  return s;
}

ConfigError::ConfigError(Origin origin, std::string key_path, std::string value, std::string problem, std::string valid)
    : std::runtime_error(compose(origin, key_path, value, problem, valid)),
      origin_(std::move(origin)),
      key_path_(std::move(key_path)),
      value_(std::move(value)),
      problem_(std::move(problem)),
      valid_(std::move(valid)) {}

}  // namespace sluice
