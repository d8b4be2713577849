// Recorder: the one place where a run's records become output. Studies hand it metrics
// (JSON), tables and trace events; it writes them all atomically into a run directory.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "recorder/output_dir.h"

namespace sluice {

using Json = nlohmann::ordered_json;

// One numeric argument of a trace event (shown in the viewer's details pane).
struct TraceArg {
  const char* key;  // a string literal
  double value;
};

// Chrome/Perfetto trace-event collector ("X" complete events, "C" counters and "M" metadata),
// in microseconds. Components hand it plain values; it keeps compact records (names interned)
// and formats the JSON once, when the trace is written.
class TraceWriter {
 public:
  void enable(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  // Names a track (pid = group, tid = track) for the viewer.
  void name_process(int pid, std::string_view name);
  void name_thread(int pid, int tid, std::string_view name);
  void complete(int pid, int tid, std::string_view name, const char* category, int64_t start_ns, int64_t dur_ns,
                std::initializer_list<TraceArg> args = {});
  void counter(int pid, std::string_view name, int64_t t_ns, const char* series, double value);
  size_t size() const { return events_.size(); }
  std::string dump() const;

 private:
  struct Event {
    char ph;
    int pid, tid;
    uint32_t name;          // index into names_
    const char* category;   // a string literal, or the series of a counter
    int64_t ts_ns, dur_ns;
    uint32_t args_begin, args_count;
  };
  uint32_t intern(std::string_view s);
  bool enabled_ = false;
  std::vector<Event> events_;
  std::vector<TraceArg> args_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> index_;
};

class Recorder {
 public:
  static constexpr int kSchemaVersion = 1;

  Json& metrics() { return metrics_; }
  TraceWriter& trace() { return trace_; }
  // A human summary line printed by `sluice run` after the run.
  void summary(std::string line) { summary_.push_back(std::move(line)); }
  const std::vector<std::string>& summary_lines() const { return summary_; }
  // An extra output file (e.g. requests.csv), already formatted by a recorder-side formatter.
  void file(std::string name, std::string content) { files_.emplace_back(std::move(name), std::move(content)); }
  const std::vector<std::pair<std::string, std::string>>& files() const { return files_; }

  // Writes metrics.json (with the header), the extra files and trace.json into `dir`:
  // everything goes to a hidden sibling directory first, which is renamed into place at
  // the end, so an interrupted run never leaves a directory that looks complete.
  // Refuses (OutputError) a path that holds anything but an empty directory or an earlier
  // sluice result (see OutputDir).
  void write_atomically(const std::string& dir, const Json& header) const;
  // Writes everything into `out`'s staging directory and commits it.
  void write_into(OutputDir& out, const Json& header) const;
  // Run warnings (clipped lengths, overload, ignored settings): printed on stderr by the CLI
  // and kept in metrics.json as `warnings`.
  void warn(std::string message);
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  Json metrics_ = Json::object();
  TraceWriter trace_;
  std::vector<std::string> summary_;
  std::vector<std::pair<std::string, std::string>> files_;
  std::vector<std::string> warnings_;
};

// Writes one file atomically (temp file in the same directory, fsync, rename); the temp file
// is removed if anything fails. Refuses (OutputError) a path that exists and is not a
// regular file: a rename would replace a directory entry or a device.
void write_file_atomically(const std::string& path, const std::string& content);

// Percentile summary used by every report: p25 p50 p75 p90 p95 p99 mean min max stddev count.
Json summarize(std::vector<double> values);

}  // namespace sluice
