#include "cli/commands.h"
namespace sluice::cli {
void add_cost(CLI::App&, CliContext&) {}
}  // namespace sluice::cli
