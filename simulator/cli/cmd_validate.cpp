// `sluice validate SCENARIO...`: check scenarios (units, keys, catalog references, ranges) without running.
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "run/scenario.h"

namespace sluice::cli {

void add_validate(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("validate", "Check scenarios without simulating: prints OK or the errors (file:line:col, key, value, what is valid)");
  auto files = std::make_shared<std::vector<std::string>>();
  auto sets = std::make_shared<std::vector<std::string>>();
  cmd->add_option("scenarios", *files, "scenario YAML files")->required();
  cmd->add_option("--set", *sets, "override a key before validation, e.g. --set seed=7")->take_all();
  cmd->callback([files, sets, &ctx] {
    ctx.action = [files, sets, &ctx]() -> int {
      int rc = 0;
      for (const auto& f : *files) {
        try {
          Scenario sc = load_scenario(f, *sets, ctx.registry);
          std::cout << fmt::format("{}: OK ({} study '{}', hash {})\n", f, sc.study->name, sc.name, sc.hash);
        } catch (const std::exception& e) {
          rc = std::max(rc, report_error(e));
        }
      }
      return rc;
    };
  });
}

}  // namespace sluice::cli
