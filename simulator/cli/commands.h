// The sluice CLI: one small file per subcommand. Each add_* registers its subcommand on the
// app and, when chosen, stores the action to run after parsing.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "recorder/recorder.h"
#include "registry/registry.h"

namespace sluice::cli {

using Action = std::function<int()>;

// Under mpirun (sweep, search): how many ranks the launcher started (1 without it), and this
// process's share of the host's cores (all of them, split among the ranks on this host).
int launcher_ranks();
int default_threads();

struct CliContext {
  Registry& registry;
  Action& action;
};

void add_run(CLI::App& app, CliContext& ctx);
void add_validate(CLI::App& app, CliContext& ctx);
void add_list(CLI::App& app, CliContext& ctx);
void add_bench(CLI::App& app, CliContext& ctx);
void add_cost(CLI::App& app, CliContext& ctx);
void add_compare(CLI::App& app, CliContext& ctx);
void add_topo(CLI::App& app, CliContext& ctx);
void add_calibrate(CLI::App& app, CliContext& ctx);
void add_sweep(CLI::App& app, CliContext& ctx);
void add_search(CLI::App& app, CliContext& ctx);
void add_check(CLI::App& app, CliContext& ctx);
void add_schema(CLI::App& app, CliContext& ctx);
void add_report(CLI::App& app, CliContext& ctx);
void add_monkey(CLI::App& app, CliContext& ctx);

// `sluice list hardware|model|topology [NAME]`: the catalogs; nullopt when KIND is no catalog.
std::optional<int> list_catalog(const std::string& kind, const std::string& name, const Registry& reg);

// Prints a ConfigError (or any error) the same way for every subcommand; returns the exit code:
// 2 for bad input (scenario or output path), 3 for a run stopped on --max-wall/--max-events,
// 128+N for a run stopped by signal N, 1 otherwise.
int report_error(const std::exception& e);

// --max-wall and --max-events, shared by the commands that simulate.
struct RunLimitOptions {
  std::string max_wall;      // a time ("30s", "5min") or plain seconds
  uint64_t max_events = 0;   // 0: no limit
  bool no_fast_forward = false;  // every serving iteration as its own events (same results)
  void add_to(CLI::App* cmd);
  // Arms RunControl (the wall clock starts now); throws ConfigError on a bad --max-wall.
  void apply() const;
};

// Checks, before anything runs, that `path` can be written later by write_file_atomically:
// not a directory, a link or a device, and its folder creatable and writable (a probe file is
// made and removed there). Throws OutputError naming `option`.
void check_writable_file(const std::string& path, const std::string& option);

// Prints the run's warnings on stderr ("sluice: warning: ...").
void print_warnings(const Recorder& rec);

}  // namespace sluice::cli
