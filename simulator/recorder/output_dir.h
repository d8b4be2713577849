// OutputDir: a result directory claimed before a run and written atomically after it.
//
// Safety rules (issue 9): sluice never removes or renames over anything it did not create.
//  * The target may be absent, an empty directory, or an earlier sluice result (it holds the
//    marker file `.sluice-result`); replacing an earlier result needs `replace_result`
//    (`--force`, or the default run directory, whose name is the scenario's hash).
//    Anything else — a directory with a user's files, a regular file, a device, a symbolic
//    link, the working directory or one above it — is refused with an OutputError.
//  * The path is checked (length, parent creatable, writable) and a hidden staging directory
//    `.<name>.partial.<pid>` (marked by `.sluice-partial`) is created beside it *before* the
//    simulation, so output problems surface in milliseconds, not after the run.
//  * commit() renames the staging directory into place. A staging directory of a process
//    that no longer runs (a SIGKILLed run) is removed by the next OutputDir in that folder;
//    SIGINT/SIGTERM stop a run through RunControl, and the destructor removes its staging.
// A sweep reuses it per point: prepare each point's directory up front (or as it starts),
// write into staging(), commit(); a point whose directory holds `.sluice-result` is done,
// so resuming skips it.
#pragma once
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice {

// A result path that sluice refuses to write; the message names the path and the remedy.
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class OutputDir {
 public:
  static constexpr const char* kResultMarker = ".sluice-result";
  static constexpr const char* kPartialMarker = ".sluice-partial";

  // Checks `dir` and creates the staging directory; throws OutputError.
  OutputDir(const std::string& dir, bool replace_result);
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;
  ~OutputDir();  // removes the staging directory unless committed

  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& staging() const { return staging_; }
  // Writes the result marker and moves staging into place (replacing an earlier result).
  void commit();

  // True when `dir` holds a complete sluice result.
  static bool is_result(const std::filesystem::path& dir);
  // Removes, in `folder`, staging directories left by processes that no longer run; returns how many.
  static int remove_stale(const std::filesystem::path& folder);

 private:
  void check_target() const;
  std::filesystem::path target_, staging_;
  std::vector<std::filesystem::path> made_;  // folders above the target this OutputDir created, innermost first
  bool replace_result_;
  bool committed_ = false;
};

// Installs SIGINT/SIGTERM/SIGHUP handlers that ask the run to stop (RunControl::interrupt);
// a second signal ends the process at once (its staging directory is then stale and removed
// by the next run in that folder).
void install_interrupt_handlers();

}  // namespace sluice
