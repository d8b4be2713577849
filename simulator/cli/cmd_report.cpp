// `sluice report RUN_OR_SWEEP_DIR`: pictures (PNG and SVG) and one self-contained HTML page,
// drawn by tools/report.py with matplotlib and Graphviz (installed by tools/setup.sh); sluice
// draws no charts itself.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "config/paths.h"
#include "config/schema.h"
#include "recorder/output_dir.h"

namespace sluice::cli {

namespace {

// The Python that has matplotlib: $SLUICE_PYTHON, else Debian's, else the first on PATH.
std::string python() {
  if (const char* p = std::getenv("SLUICE_PYTHON")) return p;
  if (path_exists("/usr/bin/python3")) return "/usr/bin/python3";
  return "python3";
}

int run_script(const std::vector<std::string>& argv) {
  const pid_t pid = ::fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::perror(("sluice: cannot run " + argv[0]).c_str());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// Marks a report's directory, beside OutputDir's result marker: only such a directory is
// replaced by a later report.
constexpr const char* kReportMarker = ".sluice-report";

// What `dir` holds, checked before anything is drawn or written: a run's result (metrics.json
// with its metrics) or a sweep's (sweep.json with its rows). Anything else — a folder that is
// no result, an empty, truncated or `[]` metrics.json — is refused with the reason (exit 2),
// and nothing is created inside it.
void check_report_input(const std::string& dir) {
  namespace fs = std::filesystem;
  auto refuse = [&](const std::string& file, const std::string& why) {
    throw ConfigError(Origin{file, 0, 0}, "", "", why, "a results directory that `sluice run`, `sluice compare`, `sluice sweep` or `sluice search` wrote");
  };
  auto parse = [&](const fs::path& f) {
    if (!path_is_regular_file(f)) refuse(f.string(), "not a regular file");
    try {
      return nlohmann::json::parse(slurp(f));
    } catch (const std::exception& e) {
      refuse(f.string(), fmt::format("not valid JSON (empty or truncated?): {}", e.what()));
    }
    return nlohmann::json();
  };
  const fs::path sweep = fs::path(dir) / "sweep.json", run = fs::path(dir) / "metrics.json", search = fs::path(dir) / "search.json";
  std::error_code ec;
  if (fs::exists(fs::symlink_status(search, ec))) {
    const auto j = parse(search);
    if (!j.is_object() || !j.contains("rows") || !j["rows"].is_array() || !j.contains("pareto") || !j.contains("objectives"))
      refuse(search.string(), "not a search's table (an object with objectives, pareto and rows)");
    return;
  }
  if (fs::exists(fs::symlink_status(sweep, ec))) {
    const auto j = parse(sweep);
    if (!j.is_object() || !j.contains("rows") || !j["rows"].is_array() || !j.contains("keys") || !j.contains("metrics"))
      refuse(sweep.string(), "not a sweep's table (an object with keys, metrics and rows)");
    return;
  }
  if (fs::exists(fs::symlink_status(run, ec))) {
    const auto j = parse(run);
    if (!j.is_object()) refuse(run.string(), fmt::format("the top level is a JSON {}, not the object a run writes", j.type_name()));
    if (!j.contains("metrics") || !j["metrics"].is_object() || j["metrics"].empty())
      refuse(run.string(), "it holds no metrics object (not a complete run's metrics.json)");
    return;
  }
  refuse(dir, "neither a run's result (no metrics.json) nor a sweep's (no sweep.json) nor a search's (no search.json)");
}

}  // namespace

void add_report(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("report",
                                 "Draw a run's or a sweep's results (latency CDFs, gap histograms, KV/queue/batch over time, "
                                 "timelines, throughput-latency curves, availability, topology) as PNG/SVG and one HTML page");
  struct Opts {
    std::string dir, out;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("dir", o->dir, "a results directory of `sluice run`, `sluice sweep` or `sluice search`")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--out", o->out, "where the pictures and index.html go (default DIR/report/)");
  cmd->callback([o, &ctx] {
    (void)ctx;
    ctx.action = [o]() -> int {
      const std::string script = (std::filesystem::path(catalog_root()) / "tools" / "report.py").string();
      if (!path_is_regular_file(script)) {
        std::cerr << fmt::format("sluice: {} not found (set SLUICE_HOME to the sluice checkout)\n", script);
        return 2;
      }
      std::error_code ec;
      const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
      const std::string out = o->out.empty() ? (std::filesystem::path(o->dir) / "report").string() : o->out;
      try {
        check_report_input(o->dir);
        // The same rule as `run --out`: a new or empty directory, or an earlier report (marked
        // .sluice-report, which a new one replaces); never a user's index.html, never a run's
        // or a sweep's results (they carry .sluice-result too), never the input or a folder
        // holding it. Drawn into staging, renamed into place.
        namespace fs = std::filesystem;
        std::error_code e1, e2;
        const fs::path in_abs = fs::weakly_canonical(o->dir, e1), out_abs = fs::weakly_canonical(out, e2);
        const fs::path rel = in_abs.lexically_relative(out_abs);
        if (!e1 && !e2 && !rel.empty() && (rel == "." || *rel.begin() != ".."))
          throw OutputError(fmt::format("the report's --out '{}' is the results directory it reads or holds it; choose another (default DIR/report)", out));
        if (OutputDir::is_result(out) && !path_exists(fs::path(out) / kReportMarker))
          throw OutputError(fmt::format("'{}' holds sluice results, not an earlier report; a report never replaces them (choose another --out)", out));
        OutputDir dest(out, /*replace_result=*/true);
        std::ofstream(dest.staging() / kReportMarker) << "a sluice report (index.html and its pictures); `sluice report` replaces it\n";
        std::vector<std::string> argv{python(), script, o->dir, dest.staging().string()};
        if (!self.empty()) {
          argv.push_back("--sluice");
          argv.push_back(self);
        }
        const int rc = run_script(argv);
        if (rc == 2) return 2;  // the script refused its input and said why
        if (rc != 0) {
          std::cerr << fmt::format("sluice: the report script failed (exit {}); it needs python3-matplotlib and graphviz (tools/setup.sh)\n", rc);
          return 1;
        }
        dest.commit();
      } catch (const std::exception& e) {
        return report_error(e);
      }
      std::cout << fmt::format("report in {}/index.html\n", out);
      return 0;
    };
  });
}

}  // namespace sluice::cli
