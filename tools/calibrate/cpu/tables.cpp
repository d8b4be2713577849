#include "tables.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <stdexcept>

namespace sluice::calib {

namespace fs = std::filesystem;

const std::vector<std::pair<std::string, std::vector<std::string>>>& table_schemas() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> s = {
      {"ceilings.csv", {"metric", "value"}},
      {"gemm.csv", {"op", "M", "K", "N", "ms"}},
      {"attention_prefill.csv", {"heads", "kv_heads", "head_dim", "batch", "seq", "causal", "ms"}},
      {"attention_decode.csv", {"heads", "kv_heads", "head_dim", "batch", "kv_len", "ms"}},
      {"attention_slice.csv", {"heads", "head_dim", "slice", "prefix", "ms"}},
      {"elementwise.csv", {"op", "tokens", "hidden", "ffn", "heads", "head_dim", "ms", "min_bytes"}},
      {"d2h.csv", {"batch", "mode", "us_median", "us_p99"}},
  };
  return s;
}

const std::vector<std::string>& schema_of(const std::string& file) {
  for (const auto& [f, cols] : table_schemas())
    if (f == file) return cols;
  throw std::invalid_argument("unknown calibration table '" + file + "'");
}

CsvTable make_table(const std::string& file) {
  CsvTable t;
  t.columns = schema_of(file);
  return t;
}

std::string format_decimal(double v, int decimals) {
  if (!std::isfinite(v)) throw std::invalid_argument("a table value must be finite");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s += '0';
  }
  if (s == "-0.0") s = "0.0";
  return s;
}

std::string format_ms(double ms) { return format_decimal(ms, 6); }
std::string format_us(double us) { return format_decimal(us, 3); }
std::string format_bool(bool b) { return b ? "True" : "False"; }

std::string device_slug(const std::string& device_name) {
  std::string s;
  for (char c : device_name) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s.rfind("nvidia ", 0) == 0) s = s.substr(7);
  std::string out;
  for (char c : s) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c));
    if (keep)
      out += c;
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown-device" : out;
}

std::string utc_now_iso8601() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

}  // namespace

std::string metadata_json(const Metadata& m, const std::map<std::string, std::size_t>& tables) {
  std::string j = "{\n";
  j += "  \"format\": \"sluice-calibration/1\",\n";
  j += "  \"date_utc\": " + json_string(m.date_utc) + ",\n";
  j += "  \"device\": {\n";
  j += "    \"name\": " + json_string(m.device_name) + ",\n";
  j += "    \"compute_capability\": " + json_string(std::to_string(m.cc_major) + "." + std::to_string(m.cc_minor)) + ",\n";
  j += "    \"sm_count\": " + std::to_string(m.sm_count) + ",\n";
  j += "    \"sm_clock_mhz\": " + std::to_string(m.sm_clock_mhz) + ",\n";
  j += "    \"mem_clock_mhz\": " + std::to_string(m.mem_clock_mhz) + ",\n";
  j += "    \"memory_bytes\": " + json_number(m.memory_bytes) + ",\n";
  j += "    \"l2_bytes\": " + json_number(m.l2_bytes) + "\n";
  j += "  },\n";
  j += "  \"driver_version\": " + json_string(m.driver_version) + ",\n";
  j += "  \"cuda_runtime_version\": " + json_string(m.cuda_runtime_version) + ",\n";
  j += "  \"cublaslt_version\": " + json_string(m.cublaslt_version) + ",\n";
  j += "  \"host\": " + json_string(m.host) + ",\n";
  j += "  \"git_commit\": " + json_string(m.git_commit) + ",\n";
  j += "  \"command\": " + json_string(m.command) + ",\n";
  j += "  \"timing\": {\"method\": \"cuda-graph replay of back-to-back calls, CUDA events, median\", ";
  j += "\"graph_target_us\": " + std::to_string(m.graph_target_us) + ", \"repeats\": " + std::to_string(m.repeats) +
       ", \"warmup_replays\": " + std::to_string(m.warmup_replays) + "},\n";
  j += "  \"tables\": {";
  bool first = true;
  for (const auto& [f, n] : tables) {
    j += (first ? "" : ", ") + json_string(f) + ": " + std::to_string(n);
    first = false;
  }
  j += "},\n  \"summary\": {";
  first = true;
  for (const auto& [k, v] : m.summary) {
    j += (first ? "" : ", ") + json_string(k) + ": " + json_number(v);
    first = false;
  }
  j += "},\n  \"checks\": [";
  for (std::size_t i = 0; i < m.checks.size(); ++i) {
    j += i ? ",\n    {" : "\n    {";
    bool f2 = true;
    for (const auto& [k, v] : m.checks[i]) {
      j += (f2 ? "" : ", ") + json_string(k) + ": " + json_string(v);
      f2 = false;
    }
    j += "}";
  }
  j += m.checks.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return j;
}

std::string directory_readme(const Metadata& m, const std::map<std::string, std::size_t>& tables) {
  std::string r = "# Kernel cost tables measured on " + m.device_name + " (sluice kernels)\n\n";
  r += "Measured " + m.date_utc + " by `sluice-calibrate` (tools/calibrate) on one " + m.device_name + " (" +
       std::to_string(m.sm_count) + " SMs, compute capability " + std::to_string(m.cc_major) + "." +
       std::to_string(m.cc_minor) + ", driver " + m.driver_version + ", CUDA runtime " + m.cuda_runtime_version +
       ", cuBLASLt " + m.cublaslt_version + "). Every kernel in bf16 with fp32 accumulation.\n\n";
  r += "Each row is the median of " + std::to_string(m.repeats) +
       " CUDA-graph replays; a replay holds enough back-to-back calls to run about " +
       std::to_string(m.graph_target_us / 1000) +
       " ms and the figure is per call (d2h: host wall time per copy). The columns are those of the "
       "PyTorch reference tables; tools/calibrate/README.md describes each file and meta.json.\n\n";
  r += "| file | rows |\n| --- | --- |\n";
  for (const auto& [f, n] : tables) r += "| " + f + " | " + std::to_string(n) + " |\n";
  if (!m.summary.empty()) {
    r += "\nHeadline figures:\n\n";
    for (const auto& [k, v] : m.summary) {
      char b[160];
      std::snprintf(b, sizeof b, "- %s: %.4g\n", k.c_str(), v);
      r += b;
    }
  }
  return r;
}

void write_file_atomically(const fs::path& file, const std::string& text) {
  const fs::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(tmp.string() + ": cannot write");
    out << text;
    out.flush();
    if (!out) throw std::runtime_error(tmp.string() + ": write failed");
  }
  fs::rename(tmp, file);
}

void write_tables_dir(const fs::path& dir, const std::vector<std::pair<std::string, CsvTable>>& tables,
                      const Metadata& meta) {
  std::map<std::string, std::size_t> counts;
  for (const auto& [file, t] : tables) {
    if (t.columns != schema_of(file))
      throw std::invalid_argument(file + ": columns do not match the table format");
    for (const auto& row : t.rows)
      if (row.size() != t.columns.size())
        throw std::invalid_argument(file + ": a row of " + std::to_string(row.size()) + " cells in a table of " +
                                    std::to_string(t.columns.size()) + " columns");
    counts[file] = t.rows.size();
  }
  fs::create_directories(dir);
  for (const auto& [file, t] : tables) write_file_atomically(dir / file, sluice::calibration::to_csv(t));
  write_file_atomically(dir / "meta.json", metadata_json(meta, counts));
  write_file_atomically(dir / "README.md", directory_readme(meta, counts));
}

}  // namespace sluice::calib
