// simulate(): builds the schedule, the SimGrid platform and the rank actors in a child process,
// replays the schedule and condenses what happened into a SimResult.
#include <wallfacer/simulator/simulator.hpp>

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <future>
#include <string>
#include <thread>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "compose.hpp"
#include "isolated_run.hpp"
#include "platform.hpp"
#include "replay.hpp"
#include "result_json.hpp"
#include "simgrid_adapter.hpp"
#include "trace.hpp"

namespace wallfacer {
namespace {

RankStats rank_stats(int rank, const sim::RankOutcome& outcome, double step_seconds) {
  RankStats stats;
  stats.rank = rank;
  stats.compute_ms = outcome.compute_s * 1e3;
  stats.comm_ms = outcome.comm_s * 1e3;
  stats.idle_ms = std::max(0.0, step_seconds - outcome.busy_s) * 1e3;
  return stats;
}

void summarize_links(const Topology& topology, const std::vector<double>& resource_bytes, double step_seconds, int keep,
                     SimResult& result) {
  std::vector<LinkClassStats> classes;
  std::vector<LinkStats> used;
  const auto& links = topology.links();
  for (size_t i = 0; i < links.size(); ++i) {
    const Link& link = links[i];
    std::vector<ResourceId> resources = {topology.resource_of(Hop{int(i), true})};
    if (link.full_duplex) resources.push_back(topology.resource_of(Hop{int(i), false}));
    auto it = std::find_if(classes.begin(), classes.end(), [&](const auto& c) { return c.kind == link.kind; });
    if (it == classes.end()) it = classes.insert(classes.end(), LinkClassStats{link.kind, 0, 0, 0, 0});
    for (ResourceId resource : resources) {
      double bytes = resource_bytes[size_t(resource)];
      double capacity = link.bandwidth_GBps * 1e9 * step_seconds;
      double utilization = capacity > 0 ? bytes / capacity : 0;
      it->bytes += bytes;
      it->mean_utilization += utilization;  // divided by the count below
      it->max_utilization = std::max(it->max_utilization, utilization);
      ++it->links;
      // keep < 0 (a composed step's replays, compose.hpp): every resource, in resource order.
      if (bytes > 0 || keep < 0)
        used.push_back({sim::resource_name(topology, resource), link.kind, bytes, utilization});
    }
  }
  for (auto& c : classes)
    c.mean_utilization /= std::max(1, c.links);
  std::sort(classes.begin(), classes.end(), [](const auto& a, const auto& b) { return a.kind < b.kind; });
  // Stable on insertion (link) order, so ties keep a fixed order.
  if (keep >= 0)
    std::stable_sort(used.begin(), used.end(),
                     [](const auto& a, const auto& b) { return a.utilization > b.utilization; });
  if (keep > 0 && used.size() > size_t(keep)) used.resize(size_t(keep));
  result.link_classes = std::move(classes);
  result.busiest_links = std::move(used);
}

SimResult summarize(const sim::Replay& replay, const Topology& topology, int busiest_links) {
  SimResult result;
  double step = 0, forward = 0;
  for (const auto& outcome : replay.outcomes()) {
    step = std::max(step, outcome.finish);
    forward = std::max(forward, outcome.forward_finish);
    result.activities += outcome.activities;
    result.transfers += outcome.transfers;
  }
  result.step_ms = step * 1e3;
  result.forward_ms = forward * 1e3;
  result.backward_ms = (step - forward) * 1e3;
  for (size_t rank = 0; rank < replay.outcomes().size(); ++rank)
    result.ranks.push_back(rank_stats(int(rank), replay.outcomes()[rank], step));
  summarize_links(topology, replay.resource_bytes(), step, busiest_links, result);
  return result;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Prints how far the replay got, every `progress_every_s` of wall time, against the cost model's
// step when the plan records one. The clock is read every 64 advances only: a large replay
// advances millions of times.
class ProgressReport {
 public:
  ProgressReport(const SimOptions& options, const Plan& plan, std::chrono::steady_clock::time_point started)
      : label_(options.progress_label), every_s_(options.progress_every_s), started_(started), next_s_(every_s_) {
    if (plan.prediction && plan.prediction->step_ms > 0)
      predicted_ = fmt::format(" (the cost model's step: {:.3f} ms)", plan.prediction->step_ms);
  }
  void operator()(double now_s) {
    if (++advances_ % 64 != 0) return;
    const double elapsed = seconds_since(started_);
    if (elapsed < next_s_) return;
    next_s_ = elapsed + every_s_;
    fmt::print(stderr, "{}: {:.3f} ms simulated after {:.1f} s{}\n", label_, now_s * 1e3, elapsed, predicted_);
    std::fflush(stderr);
  }

 private:
  std::string label_, predicted_;
  double every_s_;
  std::chrono::steady_clock::time_point started_;
  double next_s_;
  uint64_t advances_ = 0;
};

// The whole simulation; runs inside the child process. `layers`: of a step plan, those the schedule
// holds (0: unknown, a schedule built by hand), for the trace.
SimResult simulate_here(const Plan& plan, const Topology& topology, const Schedule& schedule, const SimOptions& options,
                        int layers) {
  auto started = std::chrono::steady_clock::now();
  sim::EngineConfig config;
  config.network_model = options.network_model;
  config.tcp_effects = options.tcp_effects;
  config.verbose = log::enabled("simulator", log::Level::Debug);
  config.actor_stack_KiB = options.actor_stack_KiB;
  config.stack_guard = options.stack_guard;
  config.threads = simulation_threads(options, plan.num_ranks());
  sim::SimEngine engine(config);
  double peak = kernel_peak_tflops(topology.gpu(), plan.workload.dtype) * 1e12;
  std::vector<double> speeds = {peak};
  if (options.comm_slowdown && options.calibration.compute_slowdown_under_comm() < 1.0)
    speeds.push_back(peak * options.calibration.compute_slowdown_under_comm());
  sim::PlatformLayout layout = sim::declare_hosts(engine, topology, speeds);
  sim::Replay replay(plan, topology, schedule, options, engine, layout.host_of_gpu);
  WF_LOG_DEBUG("simulator", "hosts declared, collectives expanded and channels made after {:.2f} s",
               seconds_since(started));
  // With a second CPU, the ranks' run state is built while this thread declares the platform.
  std::future<void> actors_prepared;
  if (config.threads > 1) actors_prepared = std::async(std::launch::async, [&replay] { replay.prepare_actors(); });
  // Merging chains of links is exact only where sharing is plain max-min with unit weights.
  bool exact_merge = options.shortcuts && options.network_model == "CM02" && !options.tcp_effects;
  sim::NetworkDeclared network =
      sim::declare_network(engine, topology, layout, replay.gpu_pairs(),
                           exact_merge ? sim::LinkDetail::MergedChains : sim::LinkDetail::Physical);
  engine.seal();
  WF_LOG_DEBUG("simulator", "platform sealed after {:.2f} s", seconds_since(started));
  if (actors_prepared.valid()) actors_prepared.get();
  WF_LOG_INFO("simulator",
              "{} ranks, {} GPU pairs routed over {} links, model {}, {} thread(s); platform and replay ready "
              "after {:.2f} s",
              plan.num_ranks(), network.routes, network.links, options.network_model, config.threads,
              seconds_since(started));
  auto running = std::chrono::steady_clock::now();
  if (options.progress_every_s > 0) engine.on_clock_advance(ProgressReport(options, plan, running));
  replay.run();
  WF_LOG_INFO("simulator", "simulation ran {:.2f} s", seconds_since(running));
  SimResult result = summarize(replay, topology, options.busiest_links);
  if (!options.trace_path.empty()) {
    std::vector<int> ranks = options.trace_ranks;
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    sim::TraceContext context{plan,  topology, schedule, replay.outcomes(), options.network_model, result.step_ms / 1e3,
                              ranks, layers};
    sim::write_chrome_trace_file(options.trace_path, context);
  }
  return result;
}

void check_options(const SimOptions& options) {
  const auto& models = sim::supported_network_models();
  if (std::find(models.begin(), models.end(), options.network_model) == models.end())
    throw InputError(fmt::format("--network-model: unknown model '{}' (one of: {})", options.network_model,
                                 fmt::join(models, ", ")));
  if (options.collective_algorithm != "ring")
    throw InputError(
        fmt::format("collective algorithm '{}' is not supported (only 'ring')", options.collective_algorithm));
  if (!(options.progress_every_s >= 0) || !std::isfinite(options.progress_every_s))
    throw InputError(fmt::format("--progress {}: must be a number of seconds, 0 or more", options.progress_every_s));
  if (options.actor_stack_KiB < 4 || options.actor_stack_KiB > 65536)
    throw InputError(fmt::format("actor stack of {} KiB: must be 4 to 65536 KiB", options.actor_stack_KiB));
  if (options.threads < 0 || options.threads > 64)
    throw InputError(fmt::format("--sim-threads {}: must be 0 (automatic) to 64", options.threads));
  if (options.all_to_all != "pairwise" && options.all_to_all != "direct")
    throw InputError(
        fmt::format("all-to-all algorithm '{}' is not supported ('pairwise' or 'direct')", options.all_to_all));
}

// Layers a simulation of `plan` replays: 0 for an attention-scope plan.
int replayed_layers(const Plan& plan, const SimOptions& options) {
  if (plan.scope != Scope::Step) return 0;
  return options.step_layers > 0 ? options.step_layers : plan.workload.layers;
}

// Built in the child: a large schedule never occupies the caller's memory. An attention layer is
// built on as many threads as the replay will run on; the whole step's templates are small (one
// attention program and some 40 ops a rank), so they are built and unrolled on one.
Schedule build_in_child(const Plan& plan, const SimOptions& options) {
  auto started = std::chrono::steady_clock::now();
  const int threads = simulation_threads(options, plan.num_ranks());
  if (plan.scope == Scope::Step) {
    const int layers = replayed_layers(plan, options);
    Schedule schedule = StepBuilder(plan).build({}, layers);
    WF_LOG_INFO("simulator", "whole step of {} ranks and {} layers built in {:.2f} s", plan.num_ranks(), layers,
                seconds_since(started));
    return schedule;
  }
  Schedule schedule = ScheduleBuilder(plan).build_all(threads);
  WF_LOG_INFO("simulator", "schedule of {} ranks built in {:.2f} s on {} thread(s)", plan.num_ranks(),
              seconds_since(started), threads);
  return schedule;
}

// Checks SimOptions::step_layers against the plan.
void check_layers(const Plan& plan, const SimOptions& options) {
  if (options.step_layers < 0 || (plan.scope == Scope::Step && options.step_layers > plan.workload.layers))
    throw InputError(fmt::format("--step-layers {}: must be 0 (all) to the model's {} layers", options.step_layers,
                                 plan.workload.layers));
  const int Pp = plan.params.pipeline_parallel, chunks = Pp * std::max(1, plan.params.virtual_stages);
  if (plan.scope == Scope::Step && options.step_layers % chunks != 0)
    throw InputError(fmt::format("--step-layers {}: must be a multiple of the plan's {} pipeline stages{}",
                                 options.step_layers, Pp,
                                 chunks > Pp ? fmt::format(" times {} virtual stages", chunks / Pp) : std::string()));
}

// One simulation running in a child process.
struct Running {
  size_t index = 0;
  sim::ChildProcess child;
  std::chrono::steady_clock::time_point started;
};

// Starts the simulation of `schedule_of()`'s schedule (called in the child) in a child process.
template <typename ScheduleOf>
Running start_simulation(size_t index, const Plan& plan, const Topology& topology, const SimOptions& options,
                         ScheduleOf schedule_of, int layers) {
  auto work = [&] { return sim::result_to_json(simulate_here(plan, topology, schedule_of(), options, layers), true); };
  return {index, sim::start_child_process(work), std::chrono::steady_clock::now()};
}

// Waits for the simulation's result; wall_seconds runs from its start.
SimResult finish(Running& run, const std::atomic<bool>* cancel) {
  SimResult result = sim::result_from_json(sim::finish_child_process(run.child, cancel));
  result.wall_seconds = seconds_since(run.started);
  return result;
}

// Waits for the children still running when another one failed; their results do not matter.
// After a cancel they are killed instead of waited for.
void reap(std::deque<Running>& running, const std::atomic<bool>* cancel) noexcept {
  for (Running& run : running) {
    if (run.child.pid < 0) continue;
    try {
      sim::finish_child_process(run.child, cancel);
    } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one reported
    }
  }
}

template <typename ScheduleOf>
SimResult simulate_isolated(const Plan& plan, const Topology& topology, const SimOptions& options,
                            ScheduleOf schedule_of) {
  check_options(options);
  Running run = start_simulation(0, plan, topology, options, schedule_of, 0);
  return finish(run, options.cancel);
}

// One replay a call runs: a plan's whole step (part -1), or replay `part` of those a composed
// step is made from (part + 1 layers per stage; compose.hpp).
struct ReplayJob {
  size_t plan = 0;
  int part = -1;
  SimOptions options;
  SimOptions whole;  // a part's: the options of the plan's whole step, for the full replay
};

// The replays of `plans`: one each, or kComposeReplays for a plan whose step is composed, where
// only the longest writes the trace and each lists every resource in resource order.
std::vector<ReplayJob> plan_replays(const std::vector<Plan>& plans, const Topology& topology,
                                    const SimOptions& options) {
  std::vector<ReplayJob> replays;
  for (size_t i = 0; i < plans.size(); ++i) {
    const Plan& plan = plans[i];
    SimOptions own = options;  // progress lines say which plan they are about
    if (plans.size() > 1)
      own.progress_label =
          fmt::format("{} [{}/{} {}]", options.progress_label, i + 1, plans.size(), to_string(plan.strategy));
    if (!sim::composes_step(plan, topology, options)) {
      replays.push_back({i, -1, own, {}});
      continue;
    }
    for (int part = 0; part < sim::kComposeReplays; ++part) {
      ReplayJob replay{i, part, own, own};
      replay.options.step_layers = (part + 1) * plan.params.pipeline_parallel;
      replay.options.busiest_links = -1;
      replay.options.progress_label = fmt::format("{} [{} layers]", own.progress_label, replay.options.step_layers);
      if (part + 1 < sim::kComposeReplays) {
        replay.options.trace_path.clear();
        replay.options.trace_ranks.clear();
      }
      replays.push_back(std::move(replay));
    }
  }
  return replays;
}

// Runs the replays, up to `jobs` child processes at a time, in their order.
std::vector<SimResult> run_jobs(const std::vector<Plan>& plans, const Topology& topology,
                                std::vector<ReplayJob>& replays, int jobs, const SimOptions& options) {
  // Simulations running side by side already share the CPUs.
  if (std::min(size_t(jobs), replays.size()) > 1)
    for (ReplayJob& replay : replays)
      if (replay.options.threads == 0) replay.options.threads = 1;
  std::vector<SimResult> results(replays.size());
  std::deque<Running> running;
  try {
    for (size_t i = 0; i < replays.size(); ++i) {
      if (int(running.size()) >= jobs) {
        results[running.front().index] = finish(running.front(), options.cancel);
        running.pop_front();
      }
      const Plan& plan = plans[replays[i].plan];
      const SimOptions& own = replays[i].options;
      running.push_back(start_simulation(
          i, plan, topology, own, [&] { return build_in_child(plan, own); }, replayed_layers(plan, own)));
    }
    while (!running.empty()) {
      results[running.front().index] = finish(running.front(), options.cancel);
      running.pop_front();
    }
  } catch (...) {
    reap(running, options.cancel);
    throw;
  }
  for (size_t i = 0; i < replays.size(); ++i)
    results[i].layers = replayed_layers(plans[replays[i].plan], replays[i].options);
  return results;
}

// Runs the replays and gives each plan its result: a composed step where its layers repeat
// exactly, else (a second round) the replay of every layer.
std::vector<SimResult> run_replays(const std::vector<Plan>& plans, const Topology& topology,
                                   std::vector<ReplayJob>& replays, int jobs, const SimOptions& options) {
  jobs = std::max(jobs, 1);
  std::vector<SimResult> results = run_jobs(plans, topology, replays, jobs, options);
  std::vector<SimResult> out(plans.size());
  std::vector<ReplayJob> full;
  std::vector<double> spent(plans.size(), 0.0);  // wall seconds of the composing replays
  for (size_t i = 0; i < replays.size(); ++i) {
    const ReplayJob& job = replays[i];
    spent[job.plan] =
        jobs > 1 ? std::max(spent[job.plan], results[i].wall_seconds) : spent[job.plan] + results[i].wall_seconds;
    if (job.part < 0) out[job.plan] = std::move(results[i]);
    if (job.part + 1 != sim::kComposeReplays) continue;
    const Plan& plan = plans[job.plan];
    const SimResult &one = results[i - 2], &two = results[i - 1], &three = results[i];
    std::string why;
    if (sim::repeats_exactly(one, two, three, why)) {
      out[job.plan] = sim::compose_step(two, three, plan.workload.layers, options.busiest_links);
      out[job.plan].wall_seconds = spent[job.plan];
      WF_LOG_INFO("simulator", "whole step of {} layers composed from replays of {} and {} layers",
                  plan.workload.layers, two.layers, three.layers);
    } else {
      WF_LOG_INFO("simulator", "the layers do not repeat exactly ({}); replaying all {}", why, plan.workload.layers);
      full.push_back({job.plan, -1, job.whole, {}});
    }
  }
  if (full.empty()) return out;
  std::vector<SimResult> replayed = run_jobs(plans, topology, full, jobs, options);
  for (size_t i = 0; i < full.size(); ++i) {
    replayed[i].wall_seconds += spent[full[i].plan];
    out[full[i].plan] = std::move(replayed[i]);
  }
  return out;
}

}  // namespace

int usable_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) return CPU_COUNT(&allowed);
  return std::max(1, int(std::thread::hardware_concurrency()));
}

int simulation_threads(const SimOptions& options, int ranks) {
  if (options.threads > 0) return options.threads;
  return ranks >= kParallelFromRanks ? std::min(2, usable_cpus()) : 1;
}

SimResult simulate(const Plan& plan, const Topology& topology, const SimOptions& options) {
  check_plan_against_topology(plan, topology, "plan");
  check_layers(plan, options);
  check_options(options);
  const std::vector<Plan> plans = {plan};
  std::vector<ReplayJob> replays = plan_replays(plans, topology, options);
  // A composed step's two replays run side by side when the process may use two CPUs.
  const int jobs = replays.size() > 1 ? std::min(2, usable_cpus()) : 1;
  return run_replays(plans, topology, replays, jobs, options).front();
}

std::vector<SimResult> simulate_many(const std::vector<Plan>& plans, const Topology& topology,
                                     const SimOptions& options, int jobs) {
  check_options(options);
  if (!options.trace_path.empty() && plans.size() > 1)
    throw InputError("a trace file takes one simulation; simulate the plans one by one to trace them");
  for (const Plan& plan : plans) {
    check_plan_against_topology(plan, topology, "plan");
    check_layers(plan, options);
  }
  std::vector<ReplayJob> replays = plan_replays(plans, topology, options);
  return run_replays(plans, topology, replays, jobs, options);
}

SimResult simulate_schedule(const Plan& plan, const Topology& topology, const Schedule& schedule,
                            const SimOptions& options) {
  return simulate_isolated(plan, topology, options, [&]() -> const Schedule& { return schedule; });
}

std::string to_json(const SimResult& result) {
  return sim::result_to_json(result, false);
}

}  // namespace wallfacer
