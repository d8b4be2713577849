// `sluice report RUN_OR_SWEEP_DIR`: pictures (PNG and SVG) and one self-contained HTML page,
// drawn by tools/report.py with matplotlib and Graphviz (installed by tools/setup.sh); sluice
// draws no charts itself.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "config/paths.h"
#include "config/schema.h"

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

}  // namespace

void add_report(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("report",
                                 "Draw a run's or a sweep's results (latency CDFs, gap histograms, KV/queue/batch over time, "
                                 "timelines, throughput-latency curves, availability, topology) as PNG/SVG and one HTML page");
  struct Opts {
    std::string dir, out;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("dir", o->dir, "a results directory of `sluice run` or `sluice sweep`")->required()->check(CLI::ExistingDirectory);
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
      std::vector<std::string> argv{python(), script, o->dir, out};
      if (!self.empty()) {
        argv.push_back("--sluice");
        argv.push_back(self);
      }
      const int rc = run_script(argv);
      if (rc == 0) std::cout << fmt::format("report in {}/index.html\n", out);
      else std::cerr << fmt::format("sluice: the report script failed (exit {}); it needs python3-matplotlib and graphviz (tools/setup.sh)\n", rc);
      return rc == 0 ? 0 : 1;
    };
  });
}

}  // namespace sluice::cli
