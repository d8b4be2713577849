// Recorder: the one place where a run's records become output. Studies hand it metrics
// (JSON), tables and trace events; it writes them all atomically into a run directory.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/json.h"
#include "recorder/output_dir.h"

namespace sluice {

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
  // The same JSON in pieces of about a megabyte each, handed to `out` as they fill (so
  // writing a large trace never holds the whole text).
  void dump_to(const std::function<void(const std::string&)>& out) const;

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

// An output file written while the run goes (requests.csv): rows are appended to buffer();
// when the recorder streams into a staging directory, the buffer goes to the file there in
// writes of about a megabyte (never a syscall per row); otherwise it is kept and written
// with the other files at the end. Either way the file appears only when the result is
// committed (the staging directory is renamed into place).
class RecordStream {
 public:
  static constexpr size_t kChunk = 1 << 20;
  RecordStream(std::string name, const std::filesystem::path& dir);  // dir empty: in memory
  RecordStream(const RecordStream&) = delete;
  RecordStream& operator=(const RecordStream&) = delete;
  ~RecordStream();
  std::string& buffer() { return buf_; }
  // After appending: writes the buffer out once it holds a chunk.
  void maybe_flush() {
    if (fd_ >= 0 && buf_.size() >= kChunk) flush();
  }
  const std::string& name() const { return name_; }
  bool on_disk() const { return fd_ >= 0 || closed_; }
  uint64_t bytes() const { return written_ + buf_.size(); }

 private:
  friend class Recorder;
  void flush();
  void close();  // flushes and closes the file (on disk) or leaves the text in buf_
  std::string name_;
  std::string buf_;
  int fd_ = -1;
  bool closed_ = false;
  uint64_t written_ = 0;
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
  // Streams go straight into `staging` (OutputDir::staging() of the run's result directory)
  // from now on; call before the run. Without it they are kept in memory and written at the end.
  void stream_into(const std::filesystem::path& staging) { stream_dir_ = staging; }
  const std::filesystem::path& stream_dir() const { return stream_dir_; }
  // A file written as the run goes (see RecordStream); the recorder owns it.
  RecordStream& stream(std::string name);
  // Ends a stream: on disk, its last bytes are written and the file closed; in memory, its
  // text becomes one of files().
  void close_stream(RecordStream& s);

  // Writes metrics.json (with the header), the extra files and trace.json into `dir`:
  // everything goes to a hidden sibling directory first, which is renamed into place at
  // the end, so an interrupted run never leaves a directory that looks complete.
  // Refuses (OutputError) a path that holds anything but an empty directory or an earlier
  // sluice result (see OutputDir).
  void write_atomically(const std::string& dir, const Json& header);
  // Writes everything into `out`'s staging directory and commits it (streams still open are
  // closed first; a recorder that streamed must be written into the OutputDir it streamed into).
  void write_into(OutputDir& out, const Json& header);
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
  std::filesystem::path stream_dir_;
  std::vector<std::unique_ptr<RecordStream>> streams_;
};

// Writes one file atomically (temp file in the same directory, fsync, rename); the temp file
// is removed if anything fails. Refuses (OutputError) a path that exists and is not a
// regular file: a rename would replace a directory entry or a device.
void write_file_atomically(const std::string& path, const std::string& content);

// Percentile summary used by every report: p25 p50 p75 p90 p95 p99 mean min max stddev count.
Json summarize(std::vector<double> values);
// The summary object summarize() writes, in its key order (count, mean, min, p25, p50, p75,
// p90, p95, p99, max, stddev), from figures already computed: StreamingSummary's sketch writes
// the same object from its buckets.
Json summary_json(uint64_t count, double mean, double min, const std::array<double, 6>& p25_p50_p75_p90_p95_p99, double max,
                  double stddev);

}  // namespace sluice
