#include "recorder/output_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "engine/run_control.h"

namespace fs = std::filesystem;

namespace sluice {

namespace {

// Built by append: GCC 12's -Wrestrict misfires on const char* + std::string&& here.
std::string q(const fs::path& p) {
  std::string s = "'";
  s += p.string();
  s += '\'';
  return s;
}

bool process_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// The pid at the end of ".<name>.partial.<pid>" or ".<name>.old.<pid>", or -1.
long staging_pid(const std::string& name) {
  if (name.empty() || name[0] != '.') return -1;
  for (const char* tag : {".partial.", ".old."}) {
    const auto at = name.rfind(tag);
    if (at == std::string::npos || at == 0) continue;
    const std::string digits = name.substr(at + std::strlen(tag));
    if (digits.empty() || digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    return std::stol(digits);
  }
  return -1;
}

}  // namespace

bool OutputDir::is_result(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(fs::symlink_status(dir, ec)) && fs::is_regular_file(fs::symlink_status(dir / kResultMarker, ec));
}

int OutputDir::remove_stale(const fs::path& folder) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const long pid = staging_pid(name);
    if (pid < 0 || process_alive(pid)) continue;
    std::error_code e2;
    // Only what sluice marked as its own is removed.
    if (!fs::is_directory(fs::symlink_status(it->path(), e2))) continue;
    const bool ours = fs::exists(it->path() / kPartialMarker, e2) || fs::exists(it->path() / kResultMarker, e2);
    if (!ours) continue;
    if (fs::remove_all(it->path(), e2) != static_cast<std::uintmax_t>(-1) && !e2) ++removed;
  }
  return removed;
}

void OutputDir::check_target() const {
  std::error_code ec;
  const auto st = fs::symlink_status(target_, ec);
  if (ec || !fs::exists(st)) return;
  if (fs::is_symlink(st))
    throw OutputError(fmt::format("the output path {} is a symbolic link; sluice does not write through or replace it "
                                  "(choose another --out)", q(target_)));
  if (!fs::is_directory(st))
    throw OutputError(fmt::format("the output path {} exists and is not a directory; sluice never replaces what it did "
                                  "not create (choose another --out, or remove it yourself)", q(target_)));
  if (is_result(target_)) {
    if (!replace_result_)
      throw OutputError(fmt::format("the output directory {} holds an earlier sluice result; --force replaces it",
                                    q(target_)));
    return;
  }
  if (!fs::is_empty(target_, ec) || ec)
    throw OutputError(fmt::format("the output directory {} exists, is not empty and is not a sluice result (no {}); sluice "
                                  "never deletes files it did not write (choose another --out, or empty it yourself)",
                                  q(target_), kResultMarker));
}

OutputDir::OutputDir(const std::string& dir, bool replace_result) : replace_result_(replace_result) {
  if (dir.empty()) throw OutputError("the output path is empty");
  std::error_code ec;
  const fs::path abs = fs::absolute(fs::path(dir), ec).lexically_normal();
  if (ec) throw OutputError(fmt::format("the output path {} cannot be resolved: {}", q(dir), ec.message()));
  target_ = abs;
  if (target_.has_filename() == false) target_ = target_.parent_path();  // "x/" -> "x"
  const std::string name = target_.filename().string();
  for (const auto& part : target_)
    if (part.string().size() > 200)
      throw OutputError(fmt::format("the output path {} has a component of {} characters; at most 200 are allowed "
                                    "(file systems refuse 255, and sluice adds a suffix while writing)",
                                    q(dir), part.string().size()));
  if (target_.string().size() > 3000) throw OutputError(fmt::format("the output path {} is too long", q(dir)));
  // The working directory (--out .) or a folder above it would be replaced, not written into.
  const fs::path cwd = fs::current_path(ec).lexically_normal();
  if (!ec) {
    const fs::path rel = cwd.lexically_relative(target_);  // "." or "a/b" when the target is cwd or above it
    if (!rel.empty() && (rel == "." || *rel.begin() != ".."))
      throw OutputError(fmt::format("the output path {} is the working directory or contains it; choose a new "
                                    "directory such as results/mine", q(dir)));
  }
  if (name.empty() || name == "." || name == ".." || target_ == target_.root_path())
    throw OutputError(fmt::format("the output path {} does not name a directory to create", q(dir)));
  check_target();
  const fs::path parent = target_.parent_path();
  // The folders about to be made, so an abandoned run removes them again (results/compare/
  // was left empty by a compare that failed after claiming its directory).
  for (fs::path p = parent; !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
    made_.push_back(p);
    if (p == p.parent_path()) break;
  }
  fs::create_directories(parent, ec);
  if (ec || !fs::is_directory(parent))
    throw OutputError(fmt::format("cannot create the folder {} for the results: {}", q(parent),
                                  ec ? ec.message() : "a part of it is not a directory"));
  remove_stale(parent);
  staging_ = parent / fmt::format(".{}.partial.{}", name, ::getpid());
  if (fs::exists(fs::symlink_status(staging_, ec))) {
    // Our own pid: an earlier OutputDir of this process for the same target that was not cleaned.
    if (!fs::exists(staging_ / kPartialMarker, ec))
      throw OutputError(fmt::format("{} exists and was not made by sluice", q(staging_)));
    fs::remove_all(staging_, ec);
  }
  if (::mkdir(staging_.c_str(), 0755) != 0)
    throw OutputError(fmt::format("cannot create {} in {}: {}", q(staging_.filename()), q(parent), std::strerror(errno)));
  std::ofstream(staging_ / kPartialMarker) << "an unfinished sluice result (process " << ::getpid()
                                           << "); safe to delete when that process no longer runs\n";
  if (!fs::exists(staging_ / kPartialMarker, ec)) {
    fs::remove_all(staging_, ec);
    throw OutputError(fmt::format("cannot write into {}", q(parent)));
  }
}

OutputDir::~OutputDir() {
  if (committed_) return;
  std::error_code ec;
  if (!staging_.empty()) fs::remove_all(staging_, ec);
  for (const auto& p : made_) fs::remove(p, ec);  // only while empty: remove() never deletes a folder with anything in it
}

void OutputDir::commit() {
  RunControl::get().check_interrupt();
  check_target();  // again: something may have appeared while the run was simulating
  std::error_code ec;
  fs::remove(staging_ / kPartialMarker, ec);
  {
    std::ofstream m(staging_ / kResultMarker);
    m << "a complete sluice result\n";
    if (!m) throw OutputError(fmt::format("cannot write {}", q(staging_ / kResultMarker)));
  }
  const fs::path old = target_.parent_path() / fmt::format(".{}.old.{}", target_.filename().string(), ::getpid());
  const bool had = fs::exists(fs::symlink_status(target_, ec));
  if (had) {
    // An empty directory or an earlier sluice result (check_target): moved aside, then removed.
    fs::rename(target_, old, ec);
    if (ec) throw OutputError(fmt::format("cannot move the earlier result {} aside: {}", q(target_), ec.message()));
  }
  fs::rename(staging_, target_, ec);
  if (ec) {
    std::error_code e2;
    if (had) fs::rename(old, target_, e2);
    throw OutputError(fmt::format("cannot move the results into {}: {}", q(target_), ec.message()));
  }
  committed_ = true;
  if (had) fs::remove_all(old, ec);
}

namespace {
extern "C" void on_interrupt(int signal_number) {
  if (RunControl::get().interrupted()) {
    // Second signal: stop now; the staging directory is then stale and removed by the next run.
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
    return;
  }
  RunControl::interrupt(signal_number);
}
}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);
}

}  // namespace sluice
