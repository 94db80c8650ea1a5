// The 'export' subcommand: reserved entry point for exporting plans to other tools. This version
// has no exporter, so it refuses clearly instead of pretending.
#include <cstdio>

#include "commands.hpp"

namespace wallfacer::cli {

void register_export_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "export", "Export a plan to other tools' formats (entry point; not available in this version)");
  cmd->allow_extras()->fallthrough(false);  // whatever the arguments, the answer is the same message
  cmd->footer("Not available in this version: plan files (docs/formats/plan.md) are the exchange format.");
  cmd->callback([] {
    std::fprintf(stderr,
                 "wallfacer export: error: not available yet in this version; plan files (docs/formats/plan.md) "
                 "are the exchange format\n");
    exit_code() = 2;
  });
}

}  // namespace wallfacer::cli
