// Helpers the subcommands share: the workload and topology flags (same names, defaults and help
// everywhere), JSON output for --json, and the process exit status (exit_code in commands.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <optional>
#include <string>

#include <wallfacer/cost/calibration.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::cli {

// The flag structs are written by CLI11 while parsing: keep them alive as long as the CLI::App.

// --model plus one override flag per Workload field (--layers, --seq, --causal/--no-causal, ...).
struct WorkloadFlags {
  std::string model = "llama-3-8b";  // preset name or model file
  WorkloadOverrides overrides;
};
void add_workload_flags(CLI::App* app, WorkloadFlags& flags);

// Validator for integer flags with a lower bound: "--jobs: must be at least 1 (got 0)".
CLI::Validator at_least(long long minimum);
// Validator for real-valued flags: finite (no nan, inf), and >= minimum (`inclusive`) or > minimum.
CLI::Validator finite_at_least(double minimum, bool inclusive);
// Loads the model and applies the overrides; InputError names the file line or the flag.
Workload resolve(const WorkloadFlags& flags);

// --topology (preset name or file) and --nodes (node count of a compact topology file).
struct TopologyFlags {
  std::string topology = "dgx-h100";
  std::optional<int> nodes;
};
void add_topology_flags(CLI::App* app, TopologyFlags& flags);
Topology load(const TopologyFlags& flags);
// Whether --topology names a file rather than an embedded preset.
bool is_topology_file(const std::string& topology);
// The path of `topology_path` relative to the folder `plan_path` is written in (what a plan
// records as topology.file).
std::string path_from_plan(const std::string& topology_path, const std::string& plan_path);
// The topology a plan file is simulated or run on: --topology when given; else the file the plan
// records (relative to the plan) when it exists and its hash matches; else the plan's topology by
// name when that is a preset. A compact topology is scaled to the plan's node count unless --nodes
// is given. An InputError names the --topology FILE to pass when none of these works.
Topology plan_topology(const Plan& plan, const std::string& plan_path, const TopologyFlags& flags, bool given);

// Prints to stderr, once per command, what the inputs leave to assumptions: a GPU model the
// calibration does not know (priced at fallback efficiencies) and topology blocks whose numbers
// cite no source.
void warn_about_assumptions(const Topology& topology, const Calibration& calibration, const Workload& workload,
                            bool whole_step);

// --progress SECONDS for commands that run simulations: how often each prints how far it got to
// stderr; 10 s when stderr is a terminal, else 0 (never).
CLI::Option* add_progress_flag(CLI::App* app, double& seconds);
// --sim-threads N for commands that run simulations (SimOptions::threads; 0 = automatic).
CLI::Option* add_sim_threads_flag(CLI::App* app, int& threads);

// The workload as a JSON object with the keys of the model files (docs/formats/workload.md).
nlohmann::json to_json(const Workload& workload);
// Writes indented JSON and a newline; stdout carries nothing else when --json is given.
void print_json(const nlohmann::json& value, std::ostream& out = std::cout);

// Whether `--backend` (auto, mpi or another) makes this process one rank of the MPI backend:
// mpi, or auto under mpirun. InputError for mpi in a build without MPI.
bool use_mpi_backend(const std::string& backend);

// --backend cuda: the GPU this process would use must exist before anything else happens, an
// exit-2 message naming the problem ("this build has no CUDA support", "no usable CUDA device
// here: ...") rather than a failure in the middle of the run.
void require_gpu();

// This process's share of the node for a memory check: 0 for every rank as threads here, else
// the ranks the launcher put on this node (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, or all of
// them); only the node's first process checks, for all of them.
int processes_on_this_node(int launched_ranks);
bool first_process_on_this_node(int rank);

}  // namespace wallfacer::cli
