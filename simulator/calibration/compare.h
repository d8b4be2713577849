// Point-by-point comparison of two calibration table directories
// (`sluice calibrate compare A B`): our kernels against the PyTorch reference, or one GPU
// against another. Rows are matched by their key columns; the ratio is A / B for each
// measured column, with a geometric mean per file.
#pragma once
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "calibration/csv_table.h"

namespace sluice::calibration {

// Columns that hold a measurement (compared); every other column is a key, except the
// derived ones below.
const std::vector<std::string>& measured_columns();
// Columns computed from the key (e.g. min_bytes): neither a key nor compared, so two
// tables that count an op's least traffic differently still match.
const std::vector<std::string>& derived_columns();

// One matched row: its key as "col=value" pairs and the values on each side.
struct RowComparison {
  std::vector<std::string> key;  // one "col=value" per key column
  std::vector<double> a, b;      // one per measured column
};

// The comparison of one CSV file present in both directories.
struct FileComparison {
  std::string file;
  std::vector<std::string> key_columns;
  std::vector<std::string> measured;       // the measured columns present in this file
  std::vector<RowComparison> rows;         // matched rows, in A's order
  std::vector<std::string> only_in_a, only_in_b;  // keys with no partner
  std::vector<double> geomean_ratio;       // per measured column, over rows with a, b > 0
  std::vector<int> geomean_points;         // how many rows entered each geometric mean
};

struct DirComparison {
  std::filesystem::path a, b;
  std::vector<FileComparison> files;                    // CSV files present in both, by name
  std::vector<std::string> files_only_in_a, files_only_in_b;
};

// Compares two tables (already read); `file` names them in errors. Throws TableError when
// the columns differ or a key repeats.
FileComparison compare_tables(const std::string& file, const CsvTable& a, const CsvTable& b);

// Compares every *.csv present in both directories. Throws TableError when a directory is
// missing, holds no CSV file, the two share no CSV file, or a shared file's columns differ.
DirComparison compare_dirs(const std::filesystem::path& a, const std::filesystem::path& b);

// Prints the comparison point by point, then a geometric-mean line per file.
void print_comparison(std::ostream& os, const DirComparison& cmp);

}  // namespace sluice::calibration
