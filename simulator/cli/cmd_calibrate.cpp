#include "cli/commands.h"
namespace sluice::cli {
void add_calibrate(CLI::App&, CliContext&) {}
}  // namespace sluice::cli
