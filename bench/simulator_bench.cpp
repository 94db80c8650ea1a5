// Simulator benchmark: for DGX H100 clusters of 64, 512 and 4,096 GPUs, picks the best plan for
// one Llama-3-8B attention layer over a 1M-token sequence (the planner's search; or a fixed
// strategy with --strategy NAME), simulates its forward and backward pass, and prints the wall
// time and SimGrid activities per second next to the predicted and simulated step times.
//
//   bench_simulator [--gpus 64,512,4096] [--strategy wallfacer] [--seq TOKENS]
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "planner/cost_model.hpp"
#include "planner/search.hpp"
#include "planner/topology.hpp"
#include "planner/workload.hpp"
#include "simulator/simulator.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<int> gpus = {64, 512, 4096};
  std::optional<wallfacer::StrategyKind> strategy;
  int64_t seq = int64_t(1) << 20;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--gpus") {
      args.gpus.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) args.gpus.push_back(std::stoi(item));
    } else if (flag == "--strategy") {
      args.strategy = wallfacer::parse_strategy(value);
    } else if (flag == "--seq") {
      args.seq = std::stoll(value);
    } else {
      fmt::print(stderr, "unknown flag {} (--gpus LIST, --strategy NAME, --seq TOKENS)\n", flag);
      std::exit(2);
    }
  }
  return args;
}

struct Row {
  int gpus = 0;
  std::string plan;
  double search_s = 0, predicted_ms = 0;
  wallfacer::SimResult result;
};

Row run(int gpus, const wallfacer::Workload& workload, const Args& args) {
  Row row;
  row.gpus = gpus;
  const wallfacer::Topology topology = wallfacer::Topology::load("dgx-h100", gpus / 8);
  const wallfacer::CostModel model(topology, wallfacer::Calibration::defaults());
  wallfacer::SearchOptions options;
  options.strategy = args.strategy;
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
  row.result = wallfacer::simulate(best.plan, topology);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  wallfacer::WorkloadOverrides overrides;
  overrides.seq = args.seq;
  const wallfacer::Workload workload = wallfacer::load_workload("llama-3-8b", overrides);
  fmt::print("simulator benchmark: dgx-h100, llama-3-8b, seq {} tokens, one attention layer fwd+bwd, {}\n",
             workload.seq, args.strategy ? wallfacer::to_string(*args.strategy) : "best plan of the search");
  fmt::print("{:>6}  {:<24} {:>12} {:>12} {:>12} {:>10} {:>12}\n", "GPUs", "plan", "predicted ms", "simulated ms",
             "activities", "wall s", "activities/s");
  for (int gpus : args.gpus) {
    Row r = run(gpus, workload, args);
    fmt::print("{:>6}  {:<24} {:>12.3f} {:>12.3f} {:>12} {:>10.2f} {:>12.0f}\n", r.gpus, r.plan, r.predicted_ms,
               r.result.step_ms, r.result.activities, r.result.wall_seconds,
               r.result.wall_seconds > 0 ? double(r.result.activities) / r.result.wall_seconds : 0.0);
    std::fflush(stdout);
  }
  return 0;
}
