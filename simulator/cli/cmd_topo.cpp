#include "cli/commands.h"
namespace sluice::cli {
void add_topo(CLI::App&, CliContext&) {}
}  // namespace sluice::cli
