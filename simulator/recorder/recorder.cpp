#include "recorder/recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace fs = std::filesystem;

namespace sluice {

void TraceWriter::name_process(int pid, const std::string& name) {
  if (!enabled_) return;
  events_.push_back(Json{{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "process_name"}, {"args", {{"name", name}}}});
}
void TraceWriter::name_thread(int pid, int tid, const std::string& name) {
  if (!enabled_) return;
  events_.push_back(Json{{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", name}}}});
}
void TraceWriter::complete(int pid, int tid, const std::string& name, const char* category, int64_t start_ns,
                           int64_t dur_ns, Json args) {
  if (!enabled_) return;
  Json e{{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"name", name}, {"cat", category},
         {"ts", static_cast<double>(start_ns) / 1e3}, {"dur", static_cast<double>(dur_ns) / 1e3}};
  if (!args.is_null()) e["args"] = std::move(args);
  events_.push_back(std::move(e));
}
void TraceWriter::counter(int pid, const std::string& name, int64_t t_ns, const std::string& series, double value) {
  if (!enabled_) return;
  events_.push_back(Json{{"ph", "C"}, {"pid", pid}, {"name", name}, {"ts", static_cast<double>(t_ns) / 1e3},
                         {"args", {{series, value}}}});
}
std::string TraceWriter::dump() const {
  std::string s = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  for (size_t i = 0; i < events_.size(); ++i) {
    s += events_[i].dump();
    s += i + 1 < events_.size() ? ",\n" : "\n";
  }
  s += "]}\n";
  return s;
}

static void write_and_sync(const fs::path& p, const std::string& content) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("cannot write {}: {}", p.string(), std::strerror(errno)));
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      ::close(fd);
      throw std::runtime_error(fmt::format("write to {} failed: {}", p.string(), std::strerror(errno)));
    }
    off += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomically(const std::string& path, const std::string& content) {
  fs::path p(path);
  std::error_code ec;
  const auto st = fs::symlink_status(p, ec);
  if (!ec && fs::exists(st) && !fs::is_regular_file(st))
    throw OutputError(fmt::format("'{}' exists and is not a regular file; sluice does not replace it", path));
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) throw OutputError(fmt::format("cannot create the folder of '{}': {}", path, ec.message()));
  }
  fs::path tmp = p;
  tmp += fmt::format(".tmp.{}", ::getpid());
  try {
    write_and_sync(tmp, content);
    fs::rename(tmp, p);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
}

void Recorder::warn(std::string message) {
  if (std::find(warnings_.begin(), warnings_.end(), message) == warnings_.end()) warnings_.push_back(std::move(message));
}

void Recorder::write_atomically(const std::string& dir, const Json& header) const {
  OutputDir out(dir, /*replace_result=*/true);
  write_into(out, header);
}

void Recorder::write_into(OutputDir& out, const Json& header) const {
  const fs::path& tmp = out.staging();
  for (const auto& [name, content] : files_) write_and_sync(tmp / name, content);
  if (trace_.enabled()) write_and_sync(tmp / "trace.json", trace_.dump());
  Json doc = header;
  if (!warnings_.empty()) doc["warnings"] = warnings_;
  doc["metrics"] = metrics_;
  write_and_sync(tmp / "metrics.json", doc.dump(2) + "\n");
  out.commit();  // the result marker is written last, then the directory moves into place
}

Json summarize(std::vector<double> v) {
  Json j = Json::object();
  j["count"] = v.size();
  if (v.empty()) return j;
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) {  // linear interpolation between closest ranks (numpy's default)
    const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(idx));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
  };
  double sum = 0;
  for (double x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  j["mean"] = mean;
  j["min"] = v.front();
  j["p25"] = pct(25);
  j["p50"] = pct(50);
  j["p75"] = pct(75);
  j["p90"] = pct(90);
  j["p95"] = pct(95);
  j["p99"] = pct(99);
  j["max"] = v.back();
  j["stddev"] = v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0;
  return j;
}

}  // namespace sluice
