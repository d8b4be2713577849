// `sluice monkey SCENARIO`: fail one component at a time at a spread of instants; report runs
// that hang, crash or break an invariant. Exit 1 when any did.
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "run/monkey.h"

namespace sluice::cli {

void add_monkey(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("monkey", "Re-run a world scenario failing one component at a time at a spread of instants: "
                                           "report every run that hangs, crashes or breaks an invariant");
  struct Opts {
    std::string file;
    std::vector<std::string> sets;
    MonkeyOptions o;
    std::string classes;
    bool verbose = false;
  };
  auto opt = std::make_shared<Opts>();
  cmd->add_option("scenario", opt->file, "world scenario YAML file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", opt->sets, "override a key, e.g. --set seed=7 (the scenario's own faults are replaced)")->take_all();
  cmd->add_option("--instants", opt->o.instants, "failure instants per component, spread over the run (default 3)")->check(CLI::Range(1, 1000));
  cmd->add_option("--per-class", opt->o.per_class, "components tried per class, evenly spaced (0: all; default 4)")->check(CLI::Range(0, 1000000));
  cmd->add_option("--classes", opt->classes, "comma-separated classes to fail (default: all the cluster has): chip,host,node,rack,link,switch,ocs");
  cmd->add_option("--repair-after", opt->o.repair_after_s, "seconds after which the component comes back (default: never)")->check(CLI::Range(0.0, 1e9));
  cmd->add_flag("--verbose", opt->verbose, "print every run, not only the bad ones");
  cmd->callback([opt, &ctx] {
    ctx.action = [opt, &ctx]() -> int {
      try {
        if (!opt->classes.empty()) {
          size_t a = 0;
          while (a <= opt->classes.size()) {
            const size_t b = std::min(opt->classes.find(',', a), opt->classes.size());
            opt->o.classes.push_back(opt->classes.substr(a, b - a));
            a = b + 1;
          }
        }
        const auto rep = run_monkey(opt->file, opt->sets, ctx.registry, opt->o, [&](const MonkeyRun& r, int done, int total) {
          if (opt->verbose || r.outcome != "ok")
            std::cout << fmt::format("[{}/{}] {} down at {:.6g} s: {}{}\n", done, total, r.component, r.at_s, r.outcome,
                                     r.message.empty() ? "" : " — " + r.message);
        });
        std::cout << fmt::format("monkey: {} runs (baseline {:.6g} s, {} events); {} hangs, {} crashes, {} invariant violations{}\n",
                                 rep.runs, rep.baseline_s, rep.baseline_events, rep.hangs, rep.crashes, rep.invariants,
                                 rep.stalls ? fmt::format("; {} stalls (a workload waits for a failure never repaired: --repair-after)", rep.stalls)
                                            : std::string());
        return rep.hangs + rep.crashes + rep.invariants > 0 ? 1 : 0;
      } catch (const std::exception& e) {
        return report_error(e);
      }
    };
  });
}

}  // namespace sluice::cli
