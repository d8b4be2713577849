// `sluice bench NAME`: how fast the simulator itself is (engine, serving, network...).
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"

namespace sluice::cli {

void add_bench(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("bench", "Benchmark the simulator itself; prints figures (see `sluice list bench`)");
  auto names = std::make_shared<std::vector<std::string>>();
  auto quick = std::make_shared<bool>(false);
  cmd->add_option("names", *names, "benchmarks to run: " + ctx.registry.names("bench") + " (default: all)");
  cmd->add_flag("--quick", *quick, "smaller sizes, for a smoke test");
  cmd->callback([names, quick, &ctx] {
    ctx.action = [names, quick, &ctx]() -> int {
      std::vector<std::string> todo = *names;
      if (todo.empty())
        for (const auto* i : ctx.registry.in("bench")) todo.push_back(i->name);
      int rc = 0;
      for (const auto& n : todo) {
        const auto* info = ctx.registry.find("bench", n);
        if (!info) {
          std::cerr << fmt::format("sluice: unknown benchmark '{}' (valid: {})\n", n, ctx.registry.names("bench"));
          return 2;
        }
        rc = std::max(rc, ctx.registry.factory<BenchFn>(*info)(*quick));
      }
      return rc;
    };
  });
}

}  // namespace sluice::cli
