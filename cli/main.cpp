// wallfacer: plan, simulate and run sequence-parallel attention on GPU clusters.
// Builds the command line (global options, one subcommand per file, see commands.hpp), runs it,
// and turns errors into exit statuses: 0 ok, 1 a check failed, 2 bad input, 3 internal error.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <wallfacer/core/allocator.hpp>
#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include "arg_errors.hpp"
#include "commands.hpp"
#include "interrupt.hpp"

#ifndef WALLFACER_VERSION
#define WALLFACER_VERSION "0.1.0"
#endif

namespace {

std::string version_text() {
  std::string text = "wallfacer " WALLFACER_VERSION;
#ifdef WALLFACER_WITH_MPI
  text += " (CPU/MPI runtime: yes)";
#else
  text += " (CPU/MPI runtime: no)";
#endif
  return text;
}

void add_global_options(CLI::App& app) {
  app.set_version_flag("--version", version_text());
  app.add_option_function<std::vector<std::string>>(
         "--log",
         [](const std::vector<std::string>& specs) {
           for (const std::string& spec : specs)
             wallfacer::log::configure(spec);
         },
         "Log thresholds CAT=LEVEL[,CAT=LEVEL...]; categories topology, planner, schedule, cost, search, "
         "simulator, runtime, cli or all; levels trace, debug, info, warn, error, off (also WALLFACER_LOG)")
      ->type_name("CAT=LEVEL")
      ->allow_extra_args(false);  // one spec per --log, so `--log x=debug topo` leaves the subcommand alone
  // Global options may also follow the subcommand: `wallfacer plan --log planner=debug`.
  app.fallthrough();
}

// Ctrl-C names the command from the first argument that is one (interrupt.hpp); the commands
// that write their outputs only at the end say that nothing was written.
void name_the_command_for_interrupts(CLI::App& app, int argc, char** argv) {
  static std::string command = "wallfacer";
  const char* outcome = "";
  for (int i = 1; i < argc && command == "wallfacer"; ++i)
    for (const CLI::App* sub : app.get_subcommands({}))
      if (sub->get_name() == argv[i]) {
        command = "wallfacer " + sub->get_name();
        if (sub->get_name() != "run" && sub->get_name() != "train") outcome = "nothing written";
      }
  wallfacer::cli::set_interrupt_context(command.c_str(), outcome);
  wallfacer::cli::stop_cleanly_on_interrupt();
}

}  // namespace

int main(int argc, char** argv) {
  wallfacer::keep_freed_memory();
  CLI::App app{"wallfacer: plans, simulates and runs sequence-parallel attention on GPU clusters", "wallfacer"};
  app.require_subcommand(1);
  add_global_options(app);
  wallfacer::cli::register_topo_command(app);
  wallfacer::cli::register_plan_command(app);
  wallfacer::cli::register_simulate_command(app);
  wallfacer::cli::register_run_command(app);
  wallfacer::cli::register_train_command(app);
  wallfacer::cli::register_export_command(app);
  name_the_command_for_interrupts(app, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are parse "errors" with status 0; CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fputs(wallfacer::cli::describe_parse_error(app, e).c_str(), stderr);
    return 2;
  } catch (const wallfacer::InputError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const wallfacer::ScheduleError& e) {
    // Schedules come from plans; a broken one is most often a hand-edited plan file.
    std::fprintf(stderr, "error: invalid schedule: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wallfacer: internal error: %s\n", e.what());
    return 3;
  }
  return wallfacer::cli::exit_code();
}
