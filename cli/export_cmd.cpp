// placeholder: the 'export' subcommand is registered by its owner.
#include "cli/commands.hpp"

namespace wallfacer::cli {
void register_export_command(CLI::App& app) { (void)app; }
}  // namespace wallfacer::cli
