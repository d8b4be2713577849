// sluice: a discrete-event simulator of AI clusters and their token pipelines.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "config/error.h"
#include "config/units.h"
#include "engine/run_control.h"
#include "recorder/output_dir.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

namespace sluice::cli {

int report_error(const std::exception& e) {
  if (const auto* stop = dynamic_cast<const RunStopped*>(&e)) {
    std::cerr << "sluice: " << e.what() << "; no results were written\n";
    return stop->why() == RunStopped::Why::Interrupted ? 128 + stop->signal_number() : 3;
  }
  std::cerr << "sluice: " << e.what() << "\n";
  return dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const OutputError*>(&e) ? 2 : 1;
}

void check_writable_file(const std::string& path, const std::string& option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const auto st = fs::symlink_status(p, ec);
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw OutputError(fmt::format("{} '{}' exists and is not a regular file; sluice does not replace it", option, path));
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  fs::create_directories(dir, ec);
  const fs::path probe = dir / fmt::format(".{}.probe.{}", p.filename().string(), ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) throw OutputError(fmt::format("{} '{}' cannot be written: {}", option, path, std::strerror(errno)));
  ::close(fd);
  fs::remove(probe, ec);
}

void RunLimitOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--max-wall", max_wall, "stop (exit 3, no results) after this much wall-clock time, e.g. 30s or 5min");
  cmd->add_option("--max-events", max_events, "stop (exit 3, no results) after this many simulated events");
  cmd->add_flag("--no-fast-forward", no_fast_forward,
                "run every serving iteration as its own events instead of fast-forwarding steady decode (same results, slower)");
}

void RunLimitOptions::apply() const {
  double wall_s = 0;
  if (!max_wall.empty()) {
    const Origin o{"--max-wall", 0, 0};
    if (auto plain = parse_real(max_wall)) wall_s = *plain;
    else if (auto t = parse_time(max_wall)) wall_s = t->to_seconds();
    else throw ConfigError(o, "--max-wall", max_wall, "not a duration", "e.g. 30s, 5min, or plain seconds");
    if (!(wall_s > 0)) throw ConfigError(o, "--max-wall", max_wall, "must be positive", "e.g. 30s");
  }
  RunControl::get().set_limits(max_events, wall_s);
  RunControl::get().set_fast_forward(!no_fast_forward);
}

void print_warnings(const Recorder& rec) {
  for (const auto& w : rec.warnings()) std::cerr << "sluice: warning: " << w << "\n";
}

}  // namespace sluice::cli

int main(int argc, char** argv) {
  using namespace sluice;
  Registry registry;
  register_builtin_components(registry);
  cli::Action action;
  cli::CliContext ctx{registry, action};

  CLI::App app{"sluice " SLUICE_VERSION
               " - a discrete-event simulator of AI clusters and the token pipelines that run on them.\n"
               "Describe a cluster, model, scheduler and workload in YAML; get latency percentiles,\n"
               "throughput, memory and utilization. Start with:  sluice run scenarios/quickstart.yaml"};
  app.set_version_flag("--version", SLUICE_VERSION);
  app.require_subcommand(1);
  cli::add_run(app, ctx);
  cli::add_validate(app, ctx);
  cli::add_list(app, ctx);
  cli::add_bench(app, ctx);
  cli::add_cost(app, ctx);
  cli::add_compare(app, ctx);
  cli::add_topo(app, ctx);
  cli::add_calibrate(app, ctx);
  cli::add_sweep(app, ctx);
  cli::add_search(app, ctx);
  cli::add_check(app, ctx);
  cli::add_schema(app, ctx);
  cli::add_report(app, ctx);
  cli::add_monkey(app, ctx);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and --version exit 0; every command-line error is bad input, exit 2 as the README
    // says (CLI11's own codes, 105 for a missing file and so on, are not ours).
    return app.exit(e) == 0 ? 0 : 2;
  }
  install_interrupt_handlers();
  try {
    return action ? action() : 0;
  } catch (const std::exception& e) {
    return cli::report_error(e);
  }
}
