// placeholder: the 'topo' subcommand is registered by its owner.
#include "cli/commands.hpp"

namespace wallfacer::cli {
void register_topo_command(CLI::App& app) { (void)app; }
}  // namespace wallfacer::cli
