// The 'train' subcommand: reserved entry point for end-to-end training with a planned attention
// strategy. This version has no training loop, so it refuses clearly instead of pretending.
#include <cstdio>

#include "commands.hpp"

namespace wallfacer::cli {

void register_train_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a model with a planned attention strategy (entry point; not available in this version)");
  cmd->allow_extras()->fallthrough(false);  // whatever the arguments, the answer is the same message
  cmd->footer("Not available in this version: use 'plan', 'simulate' and 'run' for one attention layer.");
  cmd->callback([] {
    std::fprintf(stderr,
                 "wallfacer train: error: not available yet in this version; 'plan', 'simulate' and 'run' cover "
                 "one attention layer\n");
    exit_code() = 2;
  });
}

}  // namespace wallfacer::cli
