#include "recorder/recorder.h"

#include "recorder/csv_format.h"
#include "recorder/sort_values.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <fmt/compile.h>
#include <fmt/format.h>

namespace fs = std::filesystem;

namespace sluice {

uint32_t TraceWriter::intern(std::string_view s) {
  auto it = index_.find(std::string(s));
  if (it != index_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(s);
  index_.emplace(names_.back(), id);
  return id;
}

void TraceWriter::name_process(int pid, std::string_view name) {
  if (!enabled_) return;
  events_.push_back(Event{'P', pid, 0, intern(name), "", 0, 0, 0, 0});
}
void TraceWriter::name_thread(int pid, int tid, std::string_view name) {
  if (!enabled_) return;
  events_.push_back(Event{'T', pid, tid, intern(name), "", 0, 0, 0, 0});
}
void TraceWriter::complete(int pid, int tid, std::string_view name, const char* category, int64_t start_ns, int64_t dur_ns,
                           std::initializer_list<TraceArg> args) {
  if (!enabled_) return;
  events_.push_back(Event{'X', pid, tid, intern(name), category, start_ns, dur_ns, static_cast<uint32_t>(args_.size()),
                          static_cast<uint32_t>(args.size())});
  args_.insert(args_.end(), args.begin(), args.end());
}
void TraceWriter::counter(int pid, std::string_view name, int64_t t_ns, const char* series, double value) {
  if (!enabled_) return;
  events_.push_back(Event{'C', pid, 0, intern(name), series, t_ns, 0, static_cast<uint32_t>(args_.size()), 1});
  args_.push_back(TraceArg{series, value});
}

namespace {
// A JSON string literal: quotes, backslashes and control characters escaped.
void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        else out += c;
    }
  }
  out += '"';
}
}  // namespace

std::string TraceWriter::dump() const {
  std::string all;
  dump_to([&](const std::string& piece) { all += piece; });
  return all;
}

void TraceWriter::dump_to(const std::function<void(const std::string&)>& sink) const {
  std::string s = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  s.reserve(RecordStream::kChunk + 4096);
  auto out = std::back_inserter(s);
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    switch (e.ph) {
      case 'P':
      case 'T':
        fmt::format_to(out, FMT_COMPILE("{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"{}\",\"args\":{{\"name\":"), e.pid, e.tid,
                       e.ph == 'P' ? "process_name" : "thread_name");
        json_string(s, names_[e.name]);
        s += "}}";
        break;
      case 'X':
        fmt::format_to(out, FMT_COMPILE("{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"name\":"), e.pid, e.tid);
        json_string(s, names_[e.name]);
        fmt::format_to(out, FMT_COMPILE(",\"cat\":\"{}\",\"ts\":"), e.category);
        csv::put_us(s, e.ts_ns);
        s += ",\"dur\":";
        csv::put_us(s, e.dur_ns);
        break;
      case 'C':
        fmt::format_to(out, FMT_COMPILE("{{\"ph\":\"C\",\"pid\":{},\"name\":"), e.pid);
        json_string(s, names_[e.name]);
        s += ",\"ts\":";
        csv::put_us(s, e.ts_ns);
        break;
    }
    if (e.ph == 'X' || e.ph == 'C') {
      if (e.args_count > 0) {
        s += ",\"args\":{";
        for (uint32_t a = 0; a < e.args_count; ++a) {
          const TraceArg& arg = args_[e.args_begin + a];
          fmt::format_to(out, FMT_COMPILE("{}\"{}\":"), a ? "," : "", arg.key);
          csv::put_shortest(s, std::isfinite(arg.value) ? arg.value : 0.0);
        }
        s += '}';
      }
      s += '}';
    }
    s += i + 1 < events_.size() ? ",\n" : "\n";
    if (s.size() >= RecordStream::kChunk) {
      sink(s);
      s.clear();
    }
  }
  s += "]}\n";
  sink(s);
}

namespace {
void write_all(int fd, const char* data, size_t size, const fs::path& p) {
  size_t off = 0;
  while (off < size) {
    const ssize_t n = ::write(fd, data + off, size - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("write to {} failed: {}", p.string(), std::strerror(errno)));
    }
    off += static_cast<size_t>(n);
  }
}
int open_for_write(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("cannot write {}: {}", p.string(), std::strerror(errno)));
  return fd;
}
}  // namespace

RecordStream::RecordStream(std::string name, const fs::path& dir) : name_(std::move(name)) {
  if (!dir.empty()) fd_ = open_for_write(dir / name_);
  buf_.reserve(dir.empty() ? 4096 : kChunk + 4096);
}

RecordStream::~RecordStream() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordStream::flush() {
  if (fd_ < 0 || buf_.empty()) return;
  write_all(fd_, buf_.data(), buf_.size(), fs::path(name_));
  written_ += buf_.size();
  buf_.clear();
}

void RecordStream::close() {
  if (closed_) return;
  if (fd_ >= 0) {
    flush();
    ::close(fd_);
    fd_ = -1;
    closed_ = true;
  }
}

RecordStream& Recorder::stream(std::string name) {
  for (const auto& s : streams_)
    if (s->name() == name) throw std::logic_error(fmt::format("internal: two streams write {}", name));
  streams_.push_back(std::make_unique<RecordStream>(std::move(name), stream_dir_));
  return *streams_.back();
}

void Recorder::close_stream(RecordStream& s) {
  if (s.closed_) return;
  if (s.fd_ >= 0) {
    s.close();
    return;
  }
  // In memory: the text becomes an ordinary file of the result.
  s.closed_ = true;
  files_.emplace_back(s.name_, std::move(s.buf_));
  s.buf_.clear();
}

// A whole file in one go. Results need no fsync: they are atomic against a killed run by the
// rename of the staging directory (OutputDir::commit), and an fsync per file only protects
// against a power loss, at a cost that grows with the files' number.
static void write_whole(const fs::path& p, const std::string& content, bool sync) {
  const int fd = open_for_write(p);
  try {
    write_all(fd, content.data(), content.size(), p);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (sync) ::fsync(fd);
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
    write_whole(tmp, content, /*sync=*/true);
    fs::rename(tmp, p);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
}

void Recorder::warn(std::string message) {
  if (std::find(warnings_.begin(), warnings_.end(), message) == warnings_.end()) warnings_.push_back(std::move(message));
}

void Recorder::write_atomically(const std::string& dir, const Json& header) {
  OutputDir out(dir, /*replace_result=*/true);
  write_into(out, header);
}

void Recorder::write_into(OutputDir& out, const Json& header) {
  const fs::path& tmp = out.staging();
  if (!stream_dir_.empty() && stream_dir_ != tmp)
    throw std::logic_error(fmt::format("internal: the recorder streamed into {} but is written into {}", stream_dir_.string(), tmp.string()));
  for (const auto& s : streams_) close_stream(*s);
  for (const auto& [name, content] : files_) write_whole(tmp / name, content, false);
  if (trace_.enabled()) {
    const int fd = open_for_write(tmp / "trace.json");
    try {
      trace_.dump_to([&](const std::string& piece) { write_all(fd, piece.data(), piece.size(), tmp / "trace.json"); });
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }
  Json doc = header;
  if (!warnings_.empty()) doc["warnings"] = warnings_;
  doc["metrics"] = metrics_;
  write_whole(tmp / "metrics.json", doc.dump(2) + "\n", false);
  out.commit();  // the result marker is written last, then the directory moves into place
}

Json summarize(std::vector<double> v) {
  Json j = Json::object();
  j["count"] = v.size();
  if (v.empty()) return j;
  sort_values(v);
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
  return summary_json(v.size(), mean, v.front(), {pct(25), pct(50), pct(75), pct(90), pct(95), pct(99)}, v.back(),
                      v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0);
}

Json summary_json(uint64_t count, double mean, double min, const std::array<double, 6>& p, double max, double stddev) {
  Json j = Json::object();
  j["count"] = count;
  j["mean"] = mean;
  j["min"] = min;
  const char* names[] = {"p25", "p50", "p75", "p90", "p95", "p99"};
  for (size_t k = 0; k < p.size(); ++k) j[names[k]] = p[k];
  j["max"] = max;
  j["stddev"] = stddev;
  return j;
}

}  // namespace sluice
