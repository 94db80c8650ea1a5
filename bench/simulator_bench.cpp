// Simulator benchmark: for DGX H100 clusters of 64, 512 and 4,096 GPUs, picks the best plan for
// one Llama-3-8B attention layer over a 1M-token sequence (the planner's search; or the best of one
// strategy with --strategy NAME), simulates its forward and backward pass, and prints the wall and
// CPU time and the replay's events (activities) per CPU second next to the predicted and simulated
// step times. Times are the best and the median of --repeats runs; "CPU s" is the simulation
// process's CPU time (each simulation runs in a child process), steadier than wall time on a
// shared machine; activities/s divides by the median CPU time.
//
// Where the simulation runs its actors on more than one thread (SimOptions::threads, automatic from
// 2,048 ranks up), each repeat also runs it on one thread, right after, and the "x 1 thread" column
// is the one-thread median wall time over the threaded one (the results are checked equal).
//
// Side by side, the same run measures SimGrid's floor at each size: as many actors as GPUs pass
// 1 MB messages around a ring of private links through the simulator's own adapter (post a send
// and a receive, wait for both; no compute, no dependencies, no contention), and the table gives
// its CPU microseconds per transfer. A replay cannot be cheaper per transfer than that; the last
// column is the replay's median CPU time per transfer (collective steps included) over the floor.
//
// With --scope step the plans are the search's best for the whole training step (32 layers), which
// simulate() composes from replays of 1 and 2 layers per stage (docs/simulator.md, "Composed
// step"); --full-replay also replays every layer of the same plan after each composed run, and the
// "full" line gives its step, CPU time and the ratio full CPU s / composed CPU s.
//
//   bench_simulator [--gpus 64,512,4096] [--strategy wallfacer] [--seq TOKENS] [--repeats N]
//                   [--threads N] [--scope attention|step] [--full-replay]
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/search/search.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include <wallfacer/topology/topology.hpp>
#include "isolated_run.hpp"
#include "simgrid_adapter.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<int> gpus = {64, 512, 4096};
  std::optional<wallfacer::StrategyKind> strategy;
  int64_t seq = int64_t(1) << 20;
  int repeats = 1;
  int threads = 0;  // SimOptions::threads (0: automatic)
  wallfacer::Scope scope = wallfacer::Scope::Attention;
  bool full_replay = false;  // step scope: also replay every layer
};

constexpr const char* kUsage =
    "usage: bench_simulator [--gpus LIST (default 64,512,4096)] [--strategy NAME (default: the search's best)]\n"
    "                       [--seq TOKENS (default 1048576)] [--repeats N (default 1)]\n"
    "                       [--threads N (default 0: automatic)] [--scope attention|step (default attention)]\n"
    "                       [--full-replay (step scope: also replay every layer)]\n";

// A positive integer flag value, or exit status 2 with a message naming the flag.
int64_t positive_value(const std::string& flag, const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value <= 0) {
    fmt::print(stderr, "{}: '{}' is not a positive integer\n{}", flag, text, kUsage);
    std::exit(2);
  }
  return value;
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      fmt::print("{}", kUsage);
      std::exit(0);
    }
    if (flag == "--full-replay") {
      args.full_replay = true;
      --i;  // takes no value
      continue;
    }
    if (i + 1 >= argc) {
      fmt::print(stderr, "{} needs a value\n{}", flag, kUsage);
      std::exit(2);
    }
    std::string value = argv[i + 1];
    if (flag == "--gpus") {
      args.gpus.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');)
        args.gpus.push_back(int(positive_value(flag, item)));
    } else if (flag == "--strategy") {
      try {
        args.strategy = wallfacer::parse_strategy(value);
      } catch (const std::exception& e) {
        fmt::print(stderr, "--strategy: {}\n{}", e.what(), kUsage);
        std::exit(2);
      }
    } else if (flag == "--seq") {
      args.seq = positive_value(flag, value);
    } else if (flag == "--repeats") {
      args.repeats = int(positive_value(flag, value));
    } else if (flag == "--scope") {
      if (value != "attention" && value != "step") {
        fmt::print(stderr, "--scope: '{}' is not attention or step\n{}", value, kUsage);
        std::exit(2);
      }
      args.scope = value == "step" ? wallfacer::Scope::Step : wallfacer::Scope::Attention;
    } else if (flag == "--threads") {
      args.threads = int(positive_value(flag, value));
    } else {
      fmt::print(stderr, "unknown flag {}\n{}", flag, kUsage);
      std::exit(2);
    }
  }
  return args;
}

// CPU seconds used by the terminated child processes so far.
double children_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_CHILDREN, &usage);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// CPU microseconds per transfer of a bare ring of `actors` SimGrid actors (see the header).
double simgrid_floor_us(int actors, int rounds) {
  const double cpu_before = children_cpu_seconds();
  wallfacer::sim::run_in_child_process([&] {
    wallfacer::sim::SimEngine engine(wallfacer::sim::EngineConfig{});
    for (int i = 0; i < actors; ++i) {
      engine.add_host({fmt::format("h{}", i), {1e15}});
      engine.add_link({fmt::format("l{}", i), 50e9, 1e-6, true});
    }
    for (int i = 0; i < actors; ++i)
      engine.add_route(i, (i + 1) % actors, {{i, true}, {(i + 1) % actors, false}});
    engine.seal();
    for (int i = 0; i < actors; ++i)
      engine.add_channel(fmt::format("ring{}", i));
    for (int i = 0; i < actors; ++i)
      engine.spawn("a", i, [i, actors, rounds] {
        wallfacer::sim::ActivitySet set;
        for (int r = 0; r < rounds; ++r) {
          static int payload = 0;  // SimGrid refuses null payloads
          set.send((i + 1) % actors, 1e6, &payload, 0);
          set.recv(i, 1);
          set.wait_any();
          set.wait_any();
        }
      });
    engine.run();
    return std::string();
  });
  return (children_cpu_seconds() - cpu_before) / (double(actors) * rounds) * 1e6;
}

struct Row {
  int gpus = 0;
  std::string plan;
  double search_s = 0, predicted_ms = 0;
  std::vector<double> wall_s, cpu_s;  // one per repeat
  int threads = 1;
  std::vector<double> one_thread_wall_s;  // one per repeat when threads > 1
  wallfacer::SimResult result;
  double floor_us = 0;                          // simgrid_floor_us at this size
  std::vector<double> full_wall_s, full_cpu_s;  // --full-replay: every layer replayed
  wallfacer::SimResult full;
};

double best(std::vector<double> v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

// The middle value (the mean of the two middle ones for an even count).
double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Wall time of the same simulation on one thread; stops the benchmark if its result differs.
double one_thread_wall_s(const wallfacer::Plan& plan, const wallfacer::Topology& topology,
                         const wallfacer::SimResult& threaded) {
  wallfacer::SimOptions sim;
  sim.threads = 1;
  const wallfacer::SimResult alone = wallfacer::simulate(plan, topology, sim);
  if (alone.step_ms != threaded.step_ms || alone.activities != threaded.activities) {
    fmt::print(stderr, "one thread gives {} ms and {} activities, threads {} ms and {}\n", alone.step_ms,
               alone.activities, threaded.step_ms, threaded.activities);
    std::exit(1);
  }
  return alone.wall_seconds;
}

Row run(int gpus, const wallfacer::Workload& workload, const Args& args) {
  Row row;
  row.gpus = gpus;
  const wallfacer::Topology topology = wallfacer::Topology::load("dgx-h100", gpus / 8);
  const wallfacer::CostModel model(topology, wallfacer::Calibration::defaults());
  wallfacer::SearchOptions options;
  options.strategy = args.strategy;
  options.scope = args.scope;
  // A whole step of Llama-3-8B at 1M tokens fits only with its matrices split: tensor degrees as
  // `wallfacer plan --tp auto` tries them on an 8-GPU node.
  if (args.scope == wallfacer::Scope::Step) options.tensor_degrees = {1, 2, 4, 8};
  const auto t0 = Clock::now();
  const wallfacer::SearchResult found = wallfacer::search_plans(topology, workload, model, options);
  row.search_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (found.best < 0) {
    row.plan = "no feasible plan";
    return row;
  }
  const wallfacer::Candidate& best = found.candidates[size_t(found.best)];
  row.plan = fmt::format("{} {}", wallfacer::to_string(best.plan.strategy), best.describe_params());
  row.predicted_ms = best.cost.step_ms;
  wallfacer::SimOptions sim;
  sim.threads = args.threads;
  // A composed step runs its two replays side by side, one thread each (with two usable CPUs).
  row.threads = args.scope == wallfacer::Scope::Step ? 1 : wallfacer::simulation_threads(sim, best.plan.num_ranks());
  for (int i = 0; i < args.repeats; ++i) {
    const double cpu_before = children_cpu_seconds();
    row.result = wallfacer::simulate(best.plan, topology, sim);
    row.cpu_s.push_back(children_cpu_seconds() - cpu_before);
    row.wall_s.push_back(row.result.wall_seconds);
    if (row.threads > 1) row.one_thread_wall_s.push_back(one_thread_wall_s(best.plan, topology, row.result));
    if (args.full_replay && args.scope == wallfacer::Scope::Step) {
      wallfacer::SimOptions full = sim;
      full.composition = wallfacer::SimOptions::Composition::Never;
      const double full_cpu_before = children_cpu_seconds();
      row.full = wallfacer::simulate(best.plan, topology, full);
      row.full_cpu_s.push_back(children_cpu_seconds() - full_cpu_before);
      row.full_wall_s.push_back(row.full.wall_seconds);
    }
  }
  row.floor_us = simgrid_floor_us(gpus, 200);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  wallfacer::WorkloadOverrides overrides;
  overrides.seq = args.seq;
  const wallfacer::Workload workload = wallfacer::load_workload("llama-3-8b", overrides);
  fmt::print(
      "simulator benchmark: dgx-h100, llama-3-8b, seq {} tokens, {}, {}, {} runs "
      "(best and median)\n",
      workload.seq,
      args.scope == wallfacer::Scope::Step ? "whole training step (composed)" : "one attention layer fwd+bwd",
      args.strategy ? wallfacer::to_string(*args.strategy) : "best plan of the search", args.repeats);
  fmt::print("{:>6}  {:<26} {:>9} {:>9} {:>9} {:>10} {:>10} {:>7} {:>8} {:>8} {:>8} {:>8} {:>12} {:>9} {:>8} {:>10}\n",
             "GPUs", "plan", "search s", "pred. ms", "sim. ms", "activities", "transfers", "threads", "wall s",
             "median", "CPU s", "median", "activities/s", "floor us", "x floor", "x 1 thread");
  for (int gpus : args.gpus) {
    const Row r = run(gpus, workload, args);
    // Events per second of CPU time, over the median run.
    const double cpu = median(r.cpu_s);
    const double rate = cpu > 0 ? double(r.result.activities) / cpu : 0.0;
    // Replay CPU microseconds per transfer over SimGrid's floor at the same size.
    const double per_transfer_us = r.result.transfers > 0 ? cpu / double(r.result.transfers) * 1e6 : 0.0;
    const double over_floor = r.floor_us > 0 ? per_transfer_us / r.floor_us : 0.0;
    // One-thread median wall time over the threaded median ("-" when the replay ran on one).
    const std::string speedup =
        r.one_thread_wall_s.empty() ? "-" : fmt::format("{:.2f}", median(r.one_thread_wall_s) / median(r.wall_s));
    fmt::print(
        "{:>6}  {:<26} {:>9.2f} {:>9.3f} {:>9.3f} {:>10} {:>10} {:>7} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f} {:>12.0f} "
        "{:>9.2f} {:>8.1f} {:>10}\n",
        r.gpus, r.plan, r.search_s, r.predicted_ms, r.result.step_ms, r.result.activities, r.result.transfers,
        r.threads, best(r.wall_s), median(r.wall_s), best(r.cpu_s), cpu, rate, r.floor_us, over_floor, speedup);
    // The same plan with every layer replayed; "x faster" = its median CPU s / the composed median.
    if (!r.full_cpu_s.empty())
      fmt::print(
          "{:>6}  {:<26} {:>9} {:>9} {:>9.3f} {:>10} {:>10} {:>7} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f}   x faster "
          "{:.2f}\n",
          "full", "(every layer replayed)", "", "", r.full.step_ms, r.full.activities, r.full.transfers, "",
          best(r.full_wall_s), median(r.full_wall_s), best(r.full_cpu_s), median(r.full_cpu_s),
          cpu > 0 ? median(r.full_cpu_s) / cpu : 0.0);
    std::fflush(stdout);
  }
  return 0;
}
