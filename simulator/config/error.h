// ConfigError: a bad input, named by file, line, column, key path, value and what is valid.
#pragma once
#include <stdexcept>
#include <string>

namespace sluice {

// Where a value came from: a file position, or a command-line override.
struct Origin {
  std::string file;  // path of the YAML file, or "--set" for a command-line override
  int line = 0;      // 1-based; 0 when unknown
  int column = 0;    // 1-based
  std::string str() const;
};

class ConfigError : public std::runtime_error {
 public:
  ConfigError(Origin origin, std::string key_path, std::string value, std::string problem, std::string valid);
  const Origin& origin() const { return origin_; }
  const std::string& key_path() const { return key_path_; }
  const std::string& value() const { return value_; }
  const std::string& problem() const { return problem_; }
  const std::string& valid() const { return valid_; }

 private:
  Origin origin_;
  std::string key_path_, value_, problem_, valid_;
};

}  // namespace sluice
