// wallfacer: plan, simulate and run sequence-parallel attention on GPU clusters.
#include <cstdio>

#include "cli/commands.hpp"
#include "planner/errors.hpp"

int main(int argc, char** argv) {
  CLI::App app{"wallfacer: plans, simulates and runs sequence-parallel attention on GPU clusters"};
  app.require_subcommand(1);
  wallfacer::cli::register_topo_command(app);
  wallfacer::cli::register_plan_command(app);
  wallfacer::cli::register_simulate_command(app);
  wallfacer::cli::register_run_command(app);
  wallfacer::cli::register_train_command(app);
  wallfacer::cli::register_export_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const wallfacer::InputError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return wallfacer::cli::exit_code();
}
