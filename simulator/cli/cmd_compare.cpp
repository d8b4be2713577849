#include "cli/commands.h"
namespace sluice::cli {
void add_compare(CLI::App&, CliContext&) {}
}  // namespace sluice::cli
