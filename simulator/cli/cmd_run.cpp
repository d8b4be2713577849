// `sluice run SCENARIO`: validate, simulate, print a summary, write the results directory.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/progress.h"
#include "engine/run_control.h"
#include "run/bands.h"
#include "run/runner.h"
#include "engine/rng.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

namespace sluice::cli {

// Runs one scenario and writes its results. The output directory is checked and claimed
// before anything is simulated.
static void run_scenario(const std::string& file, const std::vector<std::string>& sets, const std::string& out_dir_opt,
                         bool force, const RunLimitOptions& limits, const Registry& reg, bool progress, int bands) {
  Scenario sc = load_scenario(file, sets, reg);
  const std::string dir = out_dir_opt.empty() ? default_run_dir(sc) : out_dir_opt;
  // The default directory is named by the scenario's hash: an earlier result there is this same run.
  OutputDir out(dir, force || out_dir_opt.empty());
  Recorder rec;
  rec.stream_into(out.staging());  // per-request records go to disk as the run goes
  ProgressBar bar(progress);
  const auto t0 = std::chrono::steady_clock::now();
  limits.apply();
  Json header = run_into(sc, rec, [&](double f) { bar.update(f); });
  bar.finish();
  // Error bands: the scenario's `bands:` block, or --bands; -2 (--no-bands) turns them off.
  const int replications = bands == -2 ? -1 : bands >= 0 ? bands : sc.band_replications;
  if (replications >= 0) {
    if (progress) std::cerr << fmt::format("error bands: {} more runs (both ends of the cost model's error, {} other seeds)\n", 2 + replications, replications);
    std::vector<std::string> warnings;
    try {
      header["bands"] = error_bands(BandRequest{file, sets, sc.seed, replications, 0}, rec.metrics(), reg, warnings);
    } catch (const RunStopped& e) {
      if (e.why() == RunStopped::Why::Interrupted) throw;
      // The run itself finished: its results are kept, without bands.
      warnings.push_back(fmt::format("error bands not computed: their runs share the run's limits and {}", e.what()));
    } catch (const std::exception& e) {
      warnings.push_back(fmt::format("error bands not computed: {}", e.what()));
    }
    for (auto& w : warnings) rec.warn(std::move(w));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rec.write_into(out, header);
  print_warnings(rec);
  std::cout << fmt::format("sluice {} · {} ({} study, seed {})\n", SLUICE_VERSION, sc.name, sc.study->name, sc.seed);
  for (const auto& l : rec.summary_lines()) std::cout << "  " << l << "\n";
  if (header.contains("bands"))
    for (const auto& l : band_summary_lines(header["bands"])) std::cout << "  " << l << "\n";
  std::cout << fmt::format("  the simulation took {:.2f} s of real time; results in {}/\n", wall, dir);
}

void add_run(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("run", "Simulate a scenario: print a summary, write metrics.json (and more) to a results folder");
  struct Opts {
    std::string file, out;
    std::vector<std::string> sets;
    bool quiet = false, force = false, no_bands = false;
    int bands = -1;
    RunLimitOptions limits;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("scenario", o->file, "scenario YAML file, e.g. scenarios/quickstart.yaml")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", o->sets,
                  "override a key before validation, e.g. --set workload.arrival.clients=20 --set seed=7 "
                  "(a mapping replaces a section: --set \"workload.arrival={kind: poisson, rate: 20/s}\")")
      ->take_all();
  cmd->add_option("--out", o->out,
                  "results directory (default results/<scenario>/seed<seed>-<hash>/); must be new, empty, or an earlier "
                  "sluice result with --force");
  cmd->add_flag("--force", o->force, "replace an earlier sluice result at --out (never anything else)");
  cmd->add_option("--bands", o->bands,
                  "error bands with N runs at other seeds besides both ends of the cost model's error (0: the cost model's part "
                  "only); default: the scenario's `bands:` block, if any")
      ->check(CLI::Range(0, 64));
  cmd->add_flag("--no-bands", o->no_bands, "no error bands, even if the scenario asks for them")->excludes("--bands");
  o->limits.add_to(cmd);
  cmd->add_flag("--no-progress", o->quiet, "never draw the progress bar");
  cmd->callback([o, &ctx] {
    ctx.action = [o, &ctx]() -> int {
      run_scenario(o->file, o->sets, o->out, o->force, o->limits, ctx.registry, !o->quiet, o->no_bands ? -2 : o->bands);
      return 0;
    };
  });
}

}  // namespace sluice::cli
