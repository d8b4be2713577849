// `sluice calibrate compare A B`: the ratio of two calibration table directories, point by
// point (our kernels against the PyTorch reference, or one GPU against another). The tables
// themselves are measured by the CUDA harness in tools/calibrate (`sluice-calibrate`).
#include <iostream>
#include <memory>

#include "calibration/compare.h"
#include "cli/commands.h"

namespace sluice::cli {

void add_calibrate(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand(
      "calibrate", "Work with measured kernel cost tables (results/calibration/<device>/); "
                   "tools/calibrate measures them on a GPU");
  cmd->require_subcommand(1);
  auto* cmp = cmd->add_subcommand(
      "compare", "Ratio A/B of two tables directories, row by row (matched on key columns), "
                 "with a geometric mean per file");
  struct Opts {
    std::string a, b;
  };
  auto o = std::make_shared<Opts>();
  cmp->add_option("A", o->a, "tables directory, e.g. results/calibration/h200")->required();
  cmp->add_option("B", o->b, "tables directory to divide by, e.g. results/calibration/h200-torch")->required();
  cmp->callback([o, &ctx] {
    ctx.action = [o]() -> int {
      const auto result = calibration::compare_dirs(o->a, o->b);
      calibration::print_comparison(std::cout, result);
      return 0;
    };
  });
}

}  // namespace sluice::cli
