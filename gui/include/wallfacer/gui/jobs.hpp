// What the GUI's "Plan and simulate" runs, with the CLI's settings: the planner's search, the
// simulation of its best few candidates, and a simulation of the chosen plan that keeps every
// link's load and writes a trace. Runs on a worker thread; reports progress and stops at the
// next candidate when cancelled; a simulation under way is killed at once. Widget-free.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <wallfacer/search/search.hpp>
#include <wallfacer/simulator/simulator.hpp>

namespace wallfacer::gui {

// The settings of `wallfacer plan` the form offers, with the CLI's defaults.
struct PlanSettings {
  std::string topology = "dgx-h100";  // preset name or file
  int nodes = 0;                      // 0: the file's node count
  std::string model = "llama-3-8b";   // preset name or file
  int64_t seq = 0;                    // tokens per sequence; 0: the model's
  int gpus = 0;                       // 0: every GPU of the topology
  std::string strategy = "auto";
  std::string scope = "step";
  std::string tensor = "auto";  // a degree, or 'auto': powers of two up to one node's GPUs
  double memory_fraction = 0.9;
  int simulate_top = 3;  // candidates to simulate for the comparison (0: none)
  int step_layers = 2;   // layers the chosen plan's trace replays of a step-scope plan (0: all)
};

// Thrown out of a job when its cancel flag is set.
struct Cancelled {};

struct JobProgress {
  std::function<void(const std::string& stage, double fraction)> report;  // may be empty
  const std::atomic<bool>* cancel = nullptr;
  void operator()(const std::string& stage, double fraction) const;  // throws Cancelled
};

struct PlanOutcome {
  SearchResult result;
  std::vector<std::optional<double>> simulated_ms;  // per candidate
  double budget_GiB = 0;
};

// Searches as `wallfacer plan` does and simulates the best `simulate_top` feasible candidates.
// Throws InputError for bad settings, Cancelled when cancelled.
PlanOutcome run_planning(const PlanSettings& settings, const Topology& topology, const JobProgress& progress);
// Loads the settings' topology (a preset or file, scaled to `nodes`).
Topology load_topology(const std::string& path_or_preset, int nodes);

struct SimOutcome {
  SimResult result;  // every used link in busiest_links
  std::string trace_path;
};
// Simulates the plan with every link's load kept and a trace written to trace_path.
// `cancel`, when given, abandons the simulation as soon as it turns true (SimulationCancelled).
SimOutcome run_simulation(const Plan& plan, const Topology& topology, const std::string& trace_path, int step_layers,
                          const std::atomic<bool>* cancel = nullptr);

}  // namespace wallfacer::gui
