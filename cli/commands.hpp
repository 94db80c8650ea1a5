// The `wallfacer` subcommands. main.cpp builds the CLI11 app and calls each register function;
// each subcommand lives in its own file and returns the process exit status through `exit_code`
// (0 ok, 1 a check failed, 2 bad input). Errors of type InputError are printed by main.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace wallfacer::cli {

// Set by a subcommand callback, returned by main.
int& exit_code();

void register_topo_command(CLI::App& app);      // topo check | topo show      (topo_cmd.cpp)
void register_plan_command(CLI::App& app);      // plan                        (plan_cmd.cpp)
void register_simulate_command(CLI::App& app);  // simulate                    (simulate_cmd.cpp)
void register_run_command(CLI::App& app);       // run                         (run_cmd.cpp)
void register_train_command(CLI::App& app);     // train                       (train_cmd.cpp)
void register_export_command(CLI::App& app);    // export                      (export_cmd.cpp)

}  // namespace wallfacer::cli
