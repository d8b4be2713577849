// The tables the harness writes: one CSV per operation in exactly the columns of the
// PyTorch reference tables (so the simulator's cost model and `sluice calibrate compare`
// read both), plus meta.json and README.md describing the device and the method.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "calibration/csv_table.h"

namespace sluice::calib {

using sluice::calibration::CsvTable;

// The file names and their columns, in the order the reference writes them.
const std::vector<std::pair<std::string, std::vector<std::string>>>& table_schemas();
// The columns of one table file; throws std::invalid_argument for an unknown file.
const std::vector<std::string>& schema_of(const std::string& file);
// An empty table with the schema's columns.
CsvTable make_table(const std::string& file);

// Number formats of the reference tables: ms rounded to 6 decimals without trailing zeros
// (0.0318, 3.458048), microseconds to 3, ceilings to 4; booleans as True/False.
std::string format_decimal(double v, int decimals);
std::string format_ms(double ms);
std::string format_us(double us);
std::string format_bool(bool b);

// Facts about the device and the run, written to meta.json.
struct Metadata {
  std::string device_name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int sm_clock_mhz = 0, mem_clock_mhz = 0;  // maximum clocks the device reports
  double memory_bytes = 0, l2_bytes = 0;
  std::string driver_version, cuda_runtime_version, cublaslt_version;
  std::string date_utc;  // ISO 8601
  std::string host, git_commit, command;
  int graph_target_us = 2000, repeats = 10, warmup_replays = 2;
  std::vector<std::map<std::string, std::string>> checks;  // kernel, shape, rel_error, pass
  std::map<std::string, double> summary;                   // headline kernel figures
};

// A directory name for a device: "NVIDIA H200" -> "h200", "NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3".
std::string device_slug(const std::string& device_name);

// Current UTC time in ISO 8601 (2026-11-30T13:03:00Z).
std::string utc_now_iso8601();
// meta.json text for a run that wrote `tables` (file -> row count).
std::string metadata_json(const Metadata& m, const std::map<std::string, std::size_t>& tables);
// A short README.md for a table directory, from the metadata.
std::string directory_readme(const Metadata& m, const std::map<std::string, std::size_t>& tables);

// Writes `text` to `file` through a temporary file and a rename, so a reader never sees a
// half-written table.
void write_file_atomically(const std::filesystem::path& file, const std::string& text);

// Writes every table (checking each row against the schema), meta.json and README.md into
// `dir` (created if needed). Throws std::invalid_argument on a row that does not fit.
void write_tables_dir(const std::filesystem::path& dir, const std::vector<std::pair<std::string, CsvTable>>& tables,
                      const Metadata& meta);

}  // namespace sluice::calib
