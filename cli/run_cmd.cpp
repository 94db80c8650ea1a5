// placeholder: the 'run' subcommand is registered by its owner.
#include "cli/commands.hpp"

namespace wallfacer::cli {
void register_run_command(CLI::App& app) { (void)app; }
}  // namespace wallfacer::cli
