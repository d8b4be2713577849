#include "calibration/csv_table.h"

#include <fstream>
#include <sstream>

namespace sluice::calibration {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) out.push_back(trim(cell));
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

}  // namespace

int CsvTable::column_index(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return static_cast<int>(i);
  return -1;
}

CsvTable parse_csv(const std::string& text, const std::string& origin) {
  CsvTable t;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    // A UTF-8 byte-order mark (spreadsheets write one) is not part of the first column's name.
    if (line_no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    if (trim(line).empty()) continue;
    auto cells = split_line(line);
    if (t.columns.empty()) {
      for (const auto& c : cells)
        if (c.empty()) throw TableError(origin + ":" + std::to_string(line_no) + ": empty column name in header");
      t.columns = std::move(cells);
      continue;
    }
    if (cells.size() != t.columns.size())
      throw TableError(origin + ":" + std::to_string(line_no) + ": " + std::to_string(cells.size()) +
                       " cells, but the header has " + std::to_string(t.columns.size()) + " columns");
    t.rows.push_back(std::move(cells));
  }
  if (t.columns.empty()) throw TableError(origin + ": no header line (empty file)");
  return t;
}

CsvTable read_csv(const std::filesystem::path& file) {
  // A device or FIFO would be read until memory runs out (or block); a table is a few MB.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw TableError(file.string() + ": not a regular file");
  if (std::filesystem::file_size(file, ec) > (256u << 20)) throw TableError(file.string() + ": larger than 256 MiB");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw TableError(file.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_csv(ss.str(), file.string());
}

std::string to_csv(const CsvTable& table) {
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i) out += ',';
      out += cells[i];
    }
    out += '\n';
  };
  line(table.columns);
  for (const auto& r : table.rows) {
    if (r.size() != table.columns.size())
      throw TableError("row of " + std::to_string(r.size()) + " cells in a table of " +
                       std::to_string(table.columns.size()) + " columns");
    line(r);
  }
  return out;
}

}  // namespace sluice::calibration
