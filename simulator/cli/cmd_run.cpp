// `sluice run SCENARIO`: validate, simulate, print a summary, write the results directory.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "config/scenario.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

namespace sluice::cli {

namespace {

// A progress bar with ETA on stderr, shown only on a terminal and only once a run is slow.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO)), start_(Clock::now()) {}
  void update(double f) {
    if (!enabled_) return;
    const auto now = Clock::now();
    const double el = std::chrono::duration<double>(now - start_).count();
    if (el < 1.0 || std::chrono::duration<double>(now - last_).count() < 0.2) return;
    last_ = now;
    shown_ = true;
    const int width = 40, filled = static_cast<int>(f * width);
    const double eta = f > 0 ? el * (1 - f) / f : 0;
    std::fprintf(stderr, "\r[%s%s] %5.1f%%  elapsed %.0fs  ETA %.0fs ", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), 100 * f, el, eta);
    std::fflush(stderr);
  }
  ~ProgressBar() {
    if (shown_) std::fprintf(stderr, "\r%80s\r", "");
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  bool shown_ = false;
  Clock::time_point start_, last_{};
};

}  // namespace

// Runs one scenario and writes its results; shared by `run` and `compare`.
Json run_scenario(const std::string& file, const std::vector<std::string>& sets, const std::string& out_dir_opt,
                  const Registry& reg, bool progress, bool print_summary, std::string* out_dir_used) {
  Scenario sc = load_scenario(file, sets, reg);
  Recorder rec;
  ProgressBar bar(progress);
  RunEnv env{rec, [&](double f) { bar.update(f); }};
  const auto t0 = std::chrono::steady_clock::now();
  sc.world->run(env);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string run_id = fmt::format("seed{}-{}", sc.seed, sc.hash.substr(0, 8));
  const std::string dir = out_dir_opt.empty() ? fmt::format("results/{}/{}", sc.name, run_id) : out_dir_opt;
  Json header = Json::object();
  header["schema_version"] = Recorder::kSchemaVersion;
  header["sluice_version"] = SLUICE_VERSION;
  header["run_id"] = run_id;
  header["seed"] = sc.seed;
  header["scenario"] = Json{{"name", sc.name}, {"study", sc.study->name}, {"hash", sc.hash},
                            {"resolved", node_to_json(sc.resolved)}};
  rec.write_atomically(dir, header);
  if (out_dir_used) *out_dir_used = dir;
  if (print_summary) {
    std::cout << fmt::format("sluice {} · {} ({} study, seed {})\n", SLUICE_VERSION, sc.name, sc.study->name, sc.seed);
    for (const auto& l : rec.summary_lines()) std::cout << "  " << l << "\n";
    std::cout << fmt::format("  simulated in {:.2f} s wall; results in {}/\n", wall, dir);
  }
  Json m = rec.metrics();
  return m;
}

void add_run(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("run", "Simulate a scenario: print a summary, write metrics.json (and more) to a results folder");
  struct Opts {
    std::string file, out;
    std::vector<std::string> sets;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("scenario", o->file, "scenario YAML file, e.g. scenarios/quickstart.yaml")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", o->sets, "override a key before validation, e.g. --set workload.rate=20/s --set seed=7")->take_all();
  cmd->add_option("--out", o->out, "results directory (default results/<scenario>/seed<seed>-<hash>/)");
  cmd->add_flag("--no-progress", o->quiet, "never draw the progress bar");
  cmd->callback([o, &ctx] {
    ctx.action = [o, &ctx]() -> int {
      run_scenario(o->file, o->sets, o->out, ctx.registry, !o->quiet, true, nullptr);
      return 0;
    };
  });
}

}  // namespace sluice::cli
