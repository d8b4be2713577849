#include "calibration/compare.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <set>

namespace sluice::calibration {

namespace fs = std::filesystem;

const std::vector<std::string>& measured_columns() {
  static const std::vector<std::string> cols{"ms", "us_median", "us_p99", "value"};
  return cols;
}

const std::vector<std::string>& derived_columns() {
  static const std::vector<std::string> cols{"min_bytes"};
  return cols;
}

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// A key cell in canonical form, so that "128" matches "128.0" and "True" matches "true".
std::string canonical(const std::string& cell) {
  std::string lower = cell;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "true" || lower == "false") return lower;
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  if (!cell.empty() && end == cell.c_str() + cell.size()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.12g", v);
    return buf;
  }
  return cell;
}

double to_number(const std::string& cell, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  // strtod also reads "nan", "inf" and hex floats; a measured time is a plain decimal >= 0.
  if (cell.empty() || end != cell.c_str() + cell.size() || cell.find_first_not_of("0123456789.eE+-") != std::string::npos ||
      !std::isfinite(v))
    throw TableError(where + ": measured value '" + cell + "' is not a number (a finite decimal)");
  if (v < 0) throw TableError(where + ": measured value '" + cell + "' is negative; a time or size is >= 0");
  return v;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::vector<std::string> csv_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw TableError(dir.string() + ": no such tables directory");
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".csv") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  if (out.empty()) throw TableError(dir.string() + ": holds no .csv table");
  return out;
}

}  // namespace

FileComparison compare_tables(const std::string& file, const CsvTable& a, const CsvTable& b) {
  if (a.columns != b.columns)
    throw TableError(file + ": columns differ: A has [" + join(a.columns, ",") + "], B has [" +
                     join(b.columns, ",") + "]");
  FileComparison fc;
  fc.file = file;
  std::vector<int> key_idx, meas_idx;
  for (size_t i = 0; i < a.columns.size(); ++i) {
    const auto& c = a.columns[i];
    if (contains(measured_columns(), c)) {
      fc.measured.push_back(c);
      meas_idx.push_back(static_cast<int>(i));
    } else if (!contains(derived_columns(), c)) {
      fc.key_columns.push_back(c);
      key_idx.push_back(static_cast<int>(i));
    }
  }
  if (fc.measured.empty())
    throw TableError(file + ": no measured column (one of " + join(measured_columns(), ", ") + ")");

  auto key_of = [&](const std::vector<std::string>& row) {
    std::vector<std::string> k;
    for (size_t j = 0; j < key_idx.size(); ++j) k.push_back(fc.key_columns[j] + "=" + canonical(row[key_idx[j]]));
    return k;
  };
  std::map<std::vector<std::string>, size_t> b_rows;
  for (size_t r = 0; r < b.rows.size(); ++r)
    if (!b_rows.emplace(key_of(b.rows[r]), r).second)
      throw TableError(file + " (B): key " + join(key_of(b.rows[r]), " ") + " appears twice");
  std::set<std::vector<std::string>> seen_a;
  std::vector<double> log_sum(fc.measured.size(), 0.0);
  fc.geomean_points.assign(fc.measured.size(), 0);
  for (const auto& row : a.rows) {
    auto k = key_of(row);
    if (!seen_a.insert(k).second) throw TableError(file + " (A): key " + join(k, " ") + " appears twice");
    auto it = b_rows.find(k);
    if (it == b_rows.end()) {
      fc.only_in_a.push_back(join(k, " "));
      continue;
    }
    RowComparison rc;
    rc.key = k;
    for (size_t m = 0; m < meas_idx.size(); ++m) {
      rc.a.push_back(to_number(row[meas_idx[m]], file + " (A)"));
      rc.b.push_back(to_number(b.rows[it->second][meas_idx[m]], file + " (B)"));
      if (rc.a.back() > 0 && rc.b.back() > 0) {
        log_sum[m] += std::log(rc.a.back() / rc.b.back());
        ++fc.geomean_points[m];
      }
    }
    fc.rows.push_back(std::move(rc));
  }
  for (const auto& [k, r] : b_rows)
    if (!seen_a.count(k)) fc.only_in_b.push_back(join(k, " "));
  for (size_t m = 0; m < fc.measured.size(); ++m)
    fc.geomean_ratio.push_back(fc.geomean_points[m] ? std::exp(log_sum[m] / fc.geomean_points[m]) : std::nan(""));
  return fc;
}

DirComparison compare_dirs(const fs::path& a, const fs::path& b) {
  DirComparison cmp;
  cmp.a = a;
  cmp.b = b;
  const auto fa = csv_files(a), fb = csv_files(b);
  for (const auto& f : fa) {
    if (std::find(fb.begin(), fb.end(), f) == fb.end()) {
      cmp.files_only_in_a.push_back(f);
      continue;
    }
    cmp.files.push_back(compare_tables(f, read_csv(a / f), read_csv(b / f)));
  }
  for (const auto& f : fb)
    if (std::find(fa.begin(), fa.end(), f) == fa.end()) cmp.files_only_in_b.push_back(f);
  if (cmp.files.empty())
    throw TableError("no table file in common between " + a.string() + " and " + b.string());
  return cmp;
}

void print_comparison(std::ostream& os, const DirComparison& cmp) {
  char buf[128];
  os << "A = " << cmp.a.string() << "\nB = " << cmp.b.string() << "\nratio = A / B\n";
  for (const auto& fc : cmp.files) {
    os << "\n== " << fc.file << "  (" << fc.rows.size() << " matched rows)\n";
    for (const auto& r : fc.rows) {
      os << "  " << join(r.key, " ");
      for (size_t m = 0; m < fc.measured.size(); ++m) {
        const double ratio = r.b[m] > 0 ? r.a[m] / r.b[m] : std::nan("");
        std::snprintf(buf, sizeof buf, "  %s %.6g / %.6g = %.3f", fc.measured[m].c_str(), r.a[m], r.b[m], ratio);
        os << buf;
      }
      os << "\n";
    }
    for (const auto& k : fc.only_in_a) os << "  only in A: " << k << "\n";
    for (const auto& k : fc.only_in_b) os << "  only in B: " << k << "\n";
    for (size_t m = 0; m < fc.measured.size(); ++m) {
      if (fc.geomean_points[m] == 0)
        std::snprintf(buf, sizeof buf, "  geomean %s A/B: no point with both values > 0\n", fc.measured[m].c_str());
      else
        std::snprintf(buf, sizeof buf, "  geomean %s A/B = %.3f over %d points\n", fc.measured[m].c_str(),
                      fc.geomean_ratio[m], fc.geomean_points[m]);
      os << buf;
    }
  }
  for (const auto& f : cmp.files_only_in_a) os << "\nonly in A: " << f << "\n";
  for (const auto& f : cmp.files_only_in_b) os << "\nonly in B: " << f << "\n";
}

}  // namespace sluice::calibration
