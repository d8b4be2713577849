// `sluice run SCENARIO`: validate, simulate, print a summary, write the results directory.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/progress.h"
#include "run/runner.h"
#include "engine/rng.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

namespace sluice::cli {

// Runs one scenario and writes its results.
static void run_scenario(const std::string& file, const std::vector<std::string>& sets, const std::string& out_dir_opt,
                         const Registry& reg, bool progress) {
  Scenario sc = load_scenario(file, sets, reg);
  Recorder rec;
  ProgressBar bar(progress);
  const auto t0 = std::chrono::steady_clock::now();
  Json header = run_into(sc, rec, [&](double f) { bar.update(f); });
  bar.finish();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string dir = out_dir_opt.empty() ? default_run_dir(sc) : out_dir_opt;
  // A comparison's run id covers the study file, not the variant files it names: when those
  // changed, the earlier results stay where they are and these go beside them.
  std::string kept;
  if (out_dir_opt.empty() && rec.metrics().contains("compare")) {
    std::ifstream in(dir + "/metrics.json");
    Json old = in ? Json::parse(in, nullptr, false) : Json();
    const Json* had = old.is_discarded() ? nullptr : json_path(old, "metrics.compare.variants");
    const Json& now = rec.metrics()["compare"]["variants"];
    if (had && *had != now) {
      kept = dir;
      dir += fmt::format("-{:08x}", fnv1a(now.dump()) & 0xffffffffULL);
    }
  }
  rec.write_atomically(dir, header);
  std::cout << fmt::format("sluice {} · {} ({} study, seed {})\n", SLUICE_VERSION, sc.name, sc.study->name, sc.seed);
  for (const auto& l : rec.summary_lines()) std::cout << "  " << l << "\n";
  std::cout << fmt::format("  simulated in {:.2f} s wall; results in {}/\n", wall, dir);
  if (!kept.empty()) std::cout << fmt::format("  (an earlier run of other variant scenarios stays in {}/)\n", kept);
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
      run_scenario(o->file, o->sets, o->out, ctx.registry, !o->quiet);
      return 0;
    };
  });
}

}  // namespace sluice::cli
