// placeholder: the 'simulate' subcommand is registered by its owner.
#include "cli/commands.hpp"

namespace wallfacer::cli {
void register_simulate_command(CLI::App& app) { (void)app; }
}  // namespace wallfacer::cli
