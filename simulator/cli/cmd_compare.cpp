// `sluice compare A.yaml B.yaml ... [--vary key=v1,v2]`: run scenario variants and print a
// side-by-side table of their metrics with ratios to the first; write it as CSV and JSON.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/progress.h"
#include "run/runner.h"
#include "engine/rng.h"

namespace sluice::cli {

void add_compare(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("compare",
                                 "Run scenario variants (several files, and/or --vary key=v1,v2,...) and print their metrics "
                                 "side by side with ratios to the first; writes compare.csv and metrics.json");
  struct Opts {
    std::vector<std::string> files, sets, vary, metrics;
    std::string out;
    bool force = false;
    RunLimitOptions limits;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("scenarios", o->files, "scenario YAML files (one or more)")->required();
  cmd->add_option("--vary", o->vary, "an axis to vary, e.g. --vary scheduler.kind=vllm,orca (several axes: cartesian product)")->take_all();
  cmd->add_option("--set", o->sets, "override applied to every variant, e.g. --set seed=7")->take_all();
  cmd->add_option("--metric", o->metrics,
                  "metric paths to tabulate, e.g. serving.latency_ms.ttft.p99 (default: every numeric metric)")->take_all();
  cmd->add_option("--out", o->out,
                  "results directory (default results/compare/<first scenario>-<n>-variants); must be new, empty, or an "
                  "earlier sluice result with --force");
  cmd->add_flag("--force", o->force, "replace an earlier sluice result at --out (never anything else)");
  o->limits.add_to(cmd);
  cmd->callback([o, &ctx] {
    ctx.action = [o, &ctx]() -> int {
      auto variants = expand_variants(o->files, o->sets, o->vary);
      if (variants.size() < 2) {
        std::cerr << "sluice: compare needs at least two variants (two files, or --vary with two values)\n";
        return 2;
      }
      // The default directory is named by what is compared (files, overrides and the scenarios'
      // hashes), and an existing directory holding another comparison is never replaced.
      Json want = Json::array();
      std::string key;
      for (const auto& v : variants) {
        const std::string h = load_scenario(v.file, v.sets, ctx.registry).hash;
        want.push_back(Json{{"name", v.name}, {"file", v.shown.empty() ? v.file : v.shown}, {"set", v.sets}, {"scenario_hash", h}});
        key += h + ";";
      }
      const std::string dir = o->out.empty() ? fmt::format("results/compare/{}-{}-variants-{:08x}", std::filesystem::path(o->files[0]).stem().string(),
                                                           variants.size(), fnv1a(key) & 0xffffffffULL)
                                             : o->out;
      if (std::filesystem::exists(dir)) {
        const Json* had = nullptr;
        Json old;
        try {
          std::ifstream in(dir + "/metrics.json");
          old = Json::parse(in);
          had = json_path(old, "metrics.compare.variants");
        } catch (const std::exception&) {
        }
        if (!had || *had != want) {
          std::cerr << fmt::format("sluice: {} already holds other results (another comparison, or not a comparison); "
                                   "choose another --out or remove it\n", dir);
          return 2;
        }
      }
      // The output is checked and claimed before any variant is simulated; an earlier directory
      // of this same comparison may be replaced.
      OutputDir out(dir, o->force || std::filesystem::exists(dir));
      Recorder rec;
      ProgressBar bar(true);
      o->limits.apply();
      compare_variants(variants, o->metrics, ctx.registry, rec, [&](double f) { bar.update(f); });
      bar.finish();
      Json header = Json{{"schema_version", Recorder::kSchemaVersion}, {"sluice_version", SLUICE_VERSION}};
      rec.write_into(out, header);
      print_warnings(rec);
      for (const auto& l : rec.summary_lines()) std::cout << l << "\n";
      std::cout << fmt::format("results in {}/ (compare.csv, metrics.json)\n", dir);
      return 0;
    };
  });
}

}  // namespace sluice::cli
