// A small CSV table (header + rows of strings) for the calibration tables in
// results/calibration/<device>/. Plain C++ with no dependencies, so the CUDA calibration
// harness (tools/calibrate) compiles the same reader on a GPU machine that has none of
// sluice's libraries.
#pragma once
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::calibration {

// A calibration table file that cannot be read or does not match what is expected; the
// message names the file (and line where there is one).
class TableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One CSV file: the header and its rows, every row as wide as the header. No quoting: the
// tables hold numbers, names and True/False only.
struct CsvTable {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;

  // Index of a column, or -1.
  int column_index(const std::string& name) const;
};

// Parses CSV text; `origin` names the source in errors ("file.csv").
CsvTable parse_csv(const std::string& text, const std::string& origin);
// Reads and parses a CSV file; throws TableError if it is missing or malformed.
CsvTable read_csv(const std::filesystem::path& file);
// The CSV text of a table (header line, then one line per row, '\n' endings).
std::string to_csv(const CsvTable& table);

}  // namespace sluice::calibration
