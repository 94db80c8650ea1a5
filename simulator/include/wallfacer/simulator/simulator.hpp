// Replays a plan's schedule in a SimGrid discrete-event simulation of its topology: one actor per
// rank runs its compute, send, receive and collective streams concurrently, honouring the
// schedule's dependencies; flows share the topology's links max-min fairly (chains of links that
// carry the same flows merged, an exact reduction), so they contend like real traffic. Reports
// step, forward and backward time, per-rank compute/communication/idle time, per-link bytes and
// utilisation, and optionally a Chrome trace (Perfetto).
#pragma once

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <wallfacer/cost/calibration.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {

struct SimOptions {
  // SimGrid network model: "CM02" (default; with TCP effects off an uncontended transfer takes
  // exactly latency + bytes / bandwidth), "LV08" (TCP-tuned), "SMPI", "IB".
  std::string network_model = "CM02";
  bool tcp_effects = false;  // cross-traffic and the TCP-gamma window cap (off for CM02 default)
  std::string trace_path;    // write a Chrome trace JSON here when not empty
  // Ranks the trace shows (empty: all). A 4,096-rank trace has millions of events; a few ranks
  // open quickly in Perfetto. Flow arrows are kept between traced ranks only.
  std::vector<int> trace_ranks;
  Calibration calibration = Calibration::defaults();
  bool comm_slowdown = true;  // apply calibration's compute slowdown while communication runs
  // All-gather, reduce-scatter and all-reduce expand into point-to-point steps with this
  // algorithm: "ring" (default, the only one so far).
  std::string collective_algorithm = "ring";
  // All-to-all: "pairwise" (default: p-1 steps, step i sends to member +i and receives from
  // member -i) or "direct" (every piece at once; many more concurrent flows, slower to simulate).
  std::string all_to_all = "pairwise";
  // Rings with more steps (2(p-1) for an all-reduce over p ranks) run as this many merged steps,
  // each carrying the bytes of the steps it replaces and waiting their latency: exact when
  // uncontended, and what keeps a 4,096-rank all-reduce (8,190 steps) simulable. 0 = never merge.
  int max_ring_steps = 64;
  // Exact shortcuts (on by default): chains of links that carry the same routes become one
  // SimGrid link (CM02 without TCP effects only, platform.hpp), and compute ops that always run
  // at full speed are timers rather than SimGrid execs. Off: every physical link and every
  // compute op is its own SimGrid object; slower, for cross-checking.
  bool shortcuts = true;
  // Stack of each rank actor in KiB, and whether a guard page below it turns an overflow into a
  // crash. The deepest use, an error thrown inside an actor, is under 5 KiB; without the guard
  // the stacks share huge pages, which is faster at thousands of ranks (docs/simulator.md).
  int actor_stack_KiB = 32;
  bool stack_guard = false;
  // Threads that run the rank actors (SimGrid's parallel contexts; its kernel, the sharing solver
  // included, stays on one thread, and the results are the same to the byte). 0 = automatic:
  // up to 2 from kParallelFromRanks ranks up, one when simulate_many() runs several simulations
  // at once. Below that size the threads' hand-overs cost what they save (docs/simulator.md).
  int threads = 0;
  // Every this many seconds of wall time, print to stderr how far the replay got in simulated
  // time (0: never): a 4,096-GPU replay runs for a minute or more. Lines start with the label.
  double progress_every_s = 0;
  std::string progress_label = "simulator";
  // A step-scope plan replays the whole step with this many layers (0: all of the model's,
  // 1..workload.layers otherwise): fewer for quick looks at large clusters. An attention-scope
  // plan replays its one attention layer whatever this says.
  int step_layers = 0;
  // A step plan replayed with all its layers may first be replayed with 1, 2 and 3 layers per
  // pipeline stage (two at a time when two CPUs are usable); where the third layer adds what the
  // second added, to SimGrid's nanosecond, the step is composed from them (the 2-layer replay
  // plus the remaining layers times that), else every layer is replayed (docs/simulator.md,
  // "Composed step"). Auto tries it where it is less work than the full replay (an estimate from
  // rank 0's program), Always wherever it is allowed, Never replays every layer at once (as on a
  // topology with irregular nodes). busiest_links = -1 is the composing replays' own: every
  // resource, in resource order.
  enum class Composition { Auto, Always, Never };
  Composition composition = Composition::Auto;
  // Resources SimResult::busiest_links keeps, by utilisation (0: every resource that carried
  // bytes, as the GUI's link-load view wants).
  int busiest_links = 10;
  // When set, the simulation is abandoned as soon as the flag turns true (checked every 50 ms
  // while the replay runs): its process is killed and simulate() throws SimulationCancelled.
  // The GUI's Cancel button sets it.
  const std::atomic<bool>* cancel = nullptr;
};

// Thrown by simulate() and simulate_many() when SimOptions::cancel was set during the replay.
struct SimulationCancelled : std::runtime_error {
  SimulationCancelled() : std::runtime_error("simulation cancelled") {}
};

struct RankStats {
  int rank = 0;
  double compute_ms = 0;  // a compute op running
  double comm_ms = 0;     // any transfer posted and not finished (waiting for the peer included)
  double idle_ms = 0;     // neither, up to the step time
};

struct LinkStats {
  std::string name;  // "n0/gpu3->n0/nvswitch" (direction included for full-duplex links)
  LinkKind kind = LinkKind::NvLink;
  double bytes = 0;
  double utilization = 0;  // bytes / (bandwidth * step time)
};

struct LinkClassStats {
  LinkKind kind = LinkKind::NvLink;
  double bytes = 0;
  double mean_utilization = 0, max_utilization = 0;
  int links = 0;
};

struct SimResult {
  double step_ms = 0, forward_ms = 0, backward_ms = 0;
  std::vector<RankStats> ranks;
  std::vector<LinkClassStats> link_classes;
  std::vector<LinkStats> busiest_links;  // by utilisation, SimOptions::busiest_links of them
  int64_t activities = 0;                // SimGrid activities (execs + comms) run
  int64_t transfers = 0;                 // of which transfers (P2P and collective steps), counted once
  double wall_seconds = 0;               // host time the simulation took
  // Layers of the whole step replayed (step-scope plans; SimOptions::step_layers); 0 when the
  // plan is one attention layer's forward and backward (attention scope) or a given schedule.
  int layers = 0;
  // Layers of the two replays the step was composed from ({1, 2} without pipeline parallelism);
  // empty when every layer was replayed.
  std::vector<int> composed_from;
};

// Automatic SimOptions::threads: 2 (when the process may use 2 CPUs) from this many ranks up.
constexpr int kParallelFromRanks = 2048;
// CPUs this process may run on (its affinity mask).
int usable_cpus();
// Threads a simulation of `ranks` ranks runs its actors on under `options`.
int simulation_threads(const SimOptions& options, int ranks);

// Replays the plan's scope (Plan::scope): the whole training step (StepBuilder) or one attention
// layer (ScheduleBuilder).
// Throws InputError when the plan does not match the topology or an option is invalid, and
// ScheduleError when the schedule cannot run to completion (a deadlock, mismatched messages).
// Each call runs SimGrid in a child process of its own (SimGrid keeps process-wide state), so
// calls are independent and may be repeated.
SimResult simulate(const Plan& plan, const Topology& topology, const SimOptions& options = {});
// Simulates several plans on one topology, up to `jobs` child processes at a time (each on one
// thread unless SimOptions::threads says otherwise); results in the order of `plans`; progress
// labels name each.
// Errors as simulate(); a trace path needs a single plan. wall_seconds runs from a child's start
// to when its result was read.
std::vector<SimResult> simulate_many(const std::vector<Plan>& plans, const Topology& topology,
                                     const SimOptions& options = {}, int jobs = 1);
// Replays a given schedule instead of ScheduleBuilder(plan).build(): for schedules built by hand
// (tests, experiments). The plan supplies the rank -> GPU mapping and the groups; its topology
// name and hash are not checked.
SimResult simulate_schedule(const Plan& plan, const Topology& topology, const Schedule& schedule,
                            const SimOptions& options = {});
// JSON text with step_ms, forward_ms, backward_ms, ranks, links (per class and busiest).
std::string to_json(const SimResult& result);

}  // namespace wallfacer
