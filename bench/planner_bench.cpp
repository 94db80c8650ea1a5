// Planner benchmark: wall time of `wallfacer plan` style searches (DGX H100 nodes, 1M-token
// sequence, every strategy, auto search mode) at 64, 1,024 and 16,384 GPUs, on one thread: the
// attention-layer search of Llama-3-8B, and the whole-step search (tensor parallel 1, 2, 4, 8, as
// `wallfacer plan` runs it) of Llama-3-8B and of Llama-3-70B with ZeRO-3 and full recomputation. Prints one row per
// case and the ratios defined in docs/benchmarks.md. Last, the exhaustive whole-step search of
// Llama-3-8B at 128K tokens on the 32-GPU A100 cluster of bench/a100-32.yaml (every GPU order up
// to the cluster's symmetries, tensor parallel 1 to 8, pipeline 1, 2 and 4 stages, as `wallfacer
// plan --topology bench/a100-32.yaml` runs it), and the whole-step searches at 256 and 512 GPUs
// with the CLI's pipeline degrees ("pp" rows). Whole-step searches are timed again with one
// pricing thread per usable CPU (at most 8), as `wallfacer plan --jobs` defaults to: the
// ranking is the same, only the wall time differs.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <wallfacer/core/allocator.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/search/search.hpp>
#include <wallfacer/topology/topology.hpp>

namespace {

using Clock = std::chrono::steady_clock;

// CPU seconds of this thread: the figure that does not depend on other load on the machine.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Pricing threads of the threaded timing: one per usable CPU, at most 8 (the CLI's --jobs default).
int threads() {
  return int(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

struct Row {
  std::string what;
  int gpus = 0;
  double load_s = 0, search_s = 0, search_cpu_s = 0;
  double threaded_s = 0;  // wall time with `threads` pricing threads (whole step only; 0 = not run)
  size_t candidates = 0, feasible = 0, pruned = 0;
  std::string best;
};

Row run(int gpus, const wallfacer::Workload& workload, const wallfacer::SearchOptions& options, int repeats,
        const std::string& topology_file = {}) {
  Row row;
  row.gpus = gpus;
  row.what = fmt::format("{} {}", workload.model, wallfacer::to_string(options.scope));
  row.search_s = 1e30;
  row.search_cpu_s = 1e30;
  for (int i = 0; i < repeats; ++i) {
    // A fresh topology each time: its route cache must not carry over between repeats.
    const auto t0 = Clock::now();
    const wallfacer::Topology topology = topology_file.empty() ? wallfacer::Topology::load("dgx-h100", gpus / 8)
                                                               : wallfacer::Topology::load(topology_file);
    const auto t1 = Clock::now();
    const double cpu0 = thread_cpu_seconds();
    const wallfacer::CostModel model(topology, wallfacer::Calibration::defaults());
    const wallfacer::SearchResult result = wallfacer::search_plans(topology, workload, model, options);
    const auto t2 = Clock::now();
    row.search_cpu_s = std::min(row.search_cpu_s, thread_cpu_seconds() - cpu0);
    const double search = std::chrono::duration<double>(t2 - t1).count();
    if (search < row.search_s) {
      row.search_s = search;
      row.load_s = std::chrono::duration<double>(t1 - t0).count();
    }
    row.candidates = result.candidates.size();
    row.feasible = size_t(
        std::count_if(result.candidates.begin(), result.candidates.end(), [](const auto& c) { return c.feasible; }));
    row.pruned = size_t(
        std::count_if(result.candidates.begin(), result.candidates.end(), [](const auto& c) { return c.pruned; }));
    if (result.best >= 0) {
      const auto& best = result.candidates[size_t(result.best)];
      row.best = fmt::format("{} {} ({:.2f} ms)", wallfacer::to_string(best.plan.strategy), best.describe_params(),
                             best.cost.step_ms);
    }
  }
  if (options.scope == wallfacer::Scope::Step && threads() > 1) {
    wallfacer::SearchOptions threaded = options;
    threaded.threads = threads();
    row.threaded_s = 1e30;
    for (int i = 0; i < repeats; ++i) {
      const wallfacer::Topology topology = topology_file.empty() ? wallfacer::Topology::load("dgx-h100", gpus / 8)
                                                                 : wallfacer::Topology::load(topology_file);
      const wallfacer::CostModel model(topology, wallfacer::Calibration::defaults());
      const auto t0 = Clock::now();
      const wallfacer::SearchResult result = wallfacer::search_plans(topology, workload, model, threaded);
      row.threaded_s = std::min(row.threaded_s, std::chrono::duration<double>(Clock::now() - t0).count());
      if (result.candidates.size() != row.candidates) fmt::print(stderr, "threaded search differs: {}\n", row.what);
    }
  }
  return row;
}

void print_row(const Row& r) {
  const std::string threaded = r.threaded_s > 0 ? fmt::format("{:.3f}", r.threaded_s) : "-";
  fmt::print("{:<22} {:>6} {:>8.3f} {:>9.3f} {:>8.3f} {:>9} {:>10} {:>8} {:>6} {:>13.2f}  {}\n", r.what, r.gpus,
             r.load_s, r.search_s, r.search_cpu_s, threaded, r.candidates, r.feasible, r.pruned,
             1e3 * r.search_cpu_s / double(std::max<size_t>(r.candidates, 1)), r.best);
}

}  // namespace

int main(int argc, char** argv) {
  wallfacer::keep_freed_memory();  // as the CLI
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  // Further arguments pick rows: a row runs when its label ("llama-3-8b step 1024", "a100-32
  // exhaustive step 32") contains one of them; every row without.
  std::vector<std::string> picks(argv + std::min(argc, 2), argv + argc);
  auto wanted = [&](const std::string& label) {
    return picks.empty() || std::any_of(picks.begin(), picks.end(),
                                        [&](const std::string& p) { return label.find(p) != std::string::npos; });
  };
  wallfacer::WorkloadOverrides overrides;
  overrides.seq = int64_t(1) << 20;
  const wallfacer::Workload llama8 = wallfacer::load_workload("llama-3-8b", overrides);
  // 70B at 1M tokens fits only with every state sharded and the layers recomputed.
  wallfacer::WorkloadOverrides sharded = overrides;
  sharded.zero_stage = 3;
  sharded.checkpointing = "full";
  const wallfacer::Workload llama70 = wallfacer::load_workload("llama-3-70b", sharded);
  wallfacer::SearchOptions attention;  // scope attention, tensor parallel 1
  wallfacer::SearchOptions step;
  step.scope = wallfacer::Scope::Step;
  step.tensor_degrees = {1, 2, 4, 8};

  std::vector<Row> rows;
  for (const auto& [workload, options] : {std::pair{&llama8, &attention}, {&llama8, &step}, {&llama70, &step}})
    for (int gpus : {64, 1024, 16384})
      if (wanted(fmt::format("{} {} {}", workload->model, wallfacer::to_string(options->scope), gpus)))
        rows.push_back(run(gpus, *workload, *options, repeats));
  // Between those sizes, as `wallfacer plan --nodes 32|64` runs them (--pp auto: 1, 2, 4, ...
  // stages of whole nodes): no screen below 513 GPUs, so every feasible candidate, pipelines
  // included, has its step memory and compute bound taken.
  std::vector<Row> middle;
  for (const wallfacer::Workload* workload : {&llama8, &llama70})
    for (int gpus : {256, 512}) {
      if (!wanted(fmt::format("{} step pp {}", workload->model, gpus))) continue;
      wallfacer::SearchOptions pipelined = step;
      pipelined.pipeline_degrees.clear();
      for (int p = 1; p <= gpus / 8; p *= 2)
        pipelined.pipeline_degrees.push_back(p);
      middle.push_back(run(gpus, *workload, pipelined, repeats));
      middle.back().what += " pp";
    }
  wallfacer::SearchOptions a100 = step;  // what `wallfacer plan` runs by default at 32 GPUs
  a100.pipeline_degrees = {1, 2, 4};
  const wallfacer::Workload llama8_128k = wallfacer::load_workload("llama-3-8b", {});
  std::optional<Row> exhaustive;
  if (wanted("a100-32 exhaustive step 32")) {
    exhaustive = run(32, llama8_128k, a100, repeats, WALLFACER_BENCH_DIR "/a100-32.yaml");
    exhaustive->what = "a100-32 exhaustive step";
  }

  fmt::print("planner benchmark: dgx-h100, seq {} tokens, auto search, 1 thread (and {} pricing threads), best of {}\n",
             llama8.seq, threads(), repeats);
  fmt::print("{:<22} {:>6} {:>8} {:>9} {:>8} {:>9} {:>10} {:>8} {:>6} {:>13}  {}\n", "search", "GPUs", "load s",
             "search s", "cpu s", fmt::format("{} thr. s", threads()), "candidates", "feasible", "pruned",
             "cpu ms/cand.", "best plan (predicted step)");
  for (const Row& r : rows)
    print_row(r);
  for (const Row& r : middle)
    print_row(r);
  if (exhaustive) print_row(*exhaustive);
  // Growth of the search time from 64 to 16,384 GPUs against the 256x growth in GPUs, per search.
  for (size_t i = 0; picks.empty() && i + 2 < rows.size(); i += 3) {
    const double growth = rows[i + 2].search_cpu_s / rows[i].search_cpu_s;
    fmt::print("scaling, {}: cpu(16384) / cpu(64) = {:.1f} for 256x the GPUs (growth exponent {:.2f})\n", rows[i].what,
               growth, std::log(growth) / std::log(256.0));
  }
  return 0;
}
