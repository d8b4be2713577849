// `sluice check SUITE [--junit FILE] [--update]`: CI regression mode. Runs a suite's
// scenarios, compares their metrics with results/baselines/, prints what moved and exits 1
// on a regression (2 on bad input).
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "recorder/recorder.h"
#include "run/check.h"

namespace sluice::cli {

void add_check(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("check",
                                 "CI regression check: run a suite's scenarios, compare with stored baselines under tolerances, "
                                 "print what moved, write JUnit XML, exit 1 on a regression");
  struct Opts {
    std::string suite, junit, baselines, markdown;
    std::vector<std::string> sets;
    bool update = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("suite", o->suite, "suite YAML file, e.g. scenarios/suites/ci.yaml")->required()->check(CLI::ExistingFile);
  cmd->add_option("--junit", o->junit, "write JUnit XML (one testcase per checked metric) to FILE");
  cmd->add_option("--markdown", o->markdown, "write the published-figure table (a validation suite's) as Markdown to FILE");
  cmd->add_option("--baselines", o->baselines, "baseline directory (default: the suite's, results/baselines/<suite>/)");
  cmd->add_flag("--update", o->update, "re-baseline on purpose: write the current metrics as the new baselines");
  cmd->add_option("--set", o->sets, "override applied to every scenario (e.g. to try a policy setting against the baselines)")->take_all();
  cmd->add_option("-j,--jobs", o->threads, "scenarios run at once (default: all cores)")->check(CLI::Range(1, 4096));
  cmd->callback([o, &ctx] {
    ctx.action = [o, &ctx]() -> int {
      Suite suite = load_suite(o->suite, ctx.registry, o->sets);
      if (!o->baselines.empty()) suite.baselines = o->baselines;
      // Where the JUnit XML goes is checked before the suite runs, not after.
      if (!o->junit.empty()) check_writable_file(o->junit, "--junit");
      if (!o->markdown.empty()) check_writable_file(o->markdown, "--markdown");
      const int threads = o->threads > 0 ? o->threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      const CheckReport rep = run_check(suite, ctx.registry, threads, o->update);
      std::cout << fmt::format("sluice check {} · {} scenario{}{}\n", suite.name, suite.entries.size(), suite.entries.size() == 1 ? "" : "s",
                               suite.description.empty() ? "" : " · " + suite.description);
      if (o->update) {
        for (const auto& n : rep.notes) std::cout << "  " << n << "\n";
        std::cout << fmt::format("baselines updated in {:.2f} s; review and commit {}/\n", rep.seconds, suite.baselines);
        return 0;
      }
      std::cout << rep.table();
      if (!o->junit.empty()) write_file_atomically(o->junit, rep.junit(suite));
      if (!o->markdown.empty()) write_file_atomically(o->markdown, rep.validation_markdown(suite));
      const int bad = rep.regressions();
      std::cout << fmt::format("{}: {} metrics{} checked in {:.2f} s, {} regression{}{}\n", bad ? "FAIL" : "PASS", rep.checks.size(),
                               rep.validation.empty() ? "" : fmt::format(" and {} published figures", rep.validation.size()), rep.seconds, bad,
                               bad == 1 ? "" : "s", o->junit.empty() ? "" : "; JUnit XML in " + o->junit);
      return bad ? 1 : 0;
    };
  });
}

}  // namespace sluice::cli
