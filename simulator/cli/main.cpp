// sluice: a discrete-event simulator of AI clusters and their token pipelines.
#include <iostream>

#include "cli/commands.h"
#include "config/error.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

namespace sluice::cli {

int report_error(const std::exception& e) {
  std::cerr << "sluice: " << e.what() << "\n";
  return dynamic_cast<const ConfigError*>(&e) ? 2 : 1;
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
  cli::add_check(app, ctx);
  cli::add_schema(app, ctx);
  cli::add_report(app, ctx);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return action ? action() : 0;
  } catch (const std::exception& e) {
    return cli::report_error(e);
  }
}
