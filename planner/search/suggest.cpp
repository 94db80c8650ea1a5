// The nearest changes that make a plan feasible (explain.hpp, suggest_fixes): each kind of change
// is tried from the nearest value outwards, and the first that plans a feasible candidate is kept.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/search/explain.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

constexpr const char* kLog = "search";
// Sequence lengths and GPU counts tried per direction before a kind of change is given up.
constexpr int kTriesPerDirection = 3;

// A trial's progress, under the name of its stage for a suggestion. The names are literals: a
// caller may keep the pointer (the CLI's interrupt message does).
std::function<void(const char*, size_t, size_t)> trial_progress(
    const std::function<void(const char*, size_t, size_t)>& progress) {
  if (!progress) return {};
  return [progress](const char* stage, size_t done, size_t total) {
    const std::string_view s(stage);
    progress(s == "orders"   ? "orders for a suggestion"
             : s == "bounds" ? "bounds for a suggestion"
             : s == "steps"  ? "steps for a suggestion"
                             : "candidates for a suggestion",
             done, total);
  };
}

struct Trial {
  const Topology& topology;
  const CostModel& model;
  std::vector<Suggestion> found;
  // A change every trial makes on top of its own (flags, description), none when empty.
  std::pair<std::string, std::string> prefix;

  // Plans with the changed inputs; records the suggestion when a candidate is feasible.
  bool attempt(const Workload& workload, SearchOptions options, std::string flags, std::string change) {
    if (!prefix.first.empty()) {
      flags = flags.empty() ? prefix.first : prefix.first + " " + flags;
      change = change.empty() ? prefix.second : prefix.second + ", and " + change;
    }
    // Feasibility does not depend on how hard the search looks for the best order, and a
    // suggestion names the best plan alone, which pricing one step at a time finds the same.
    options.mode = SearchMode::Heuristic;
    options.priced_top = 1;
    options.strategy_bests = false;         // no explanation of a trial
    options.exact_rejected_memory = false;  // nor a list of what it rejects
    options.progress = trial_progress(options.progress);
    try {
      validate(workload, flags);
      const SearchResult result = search_plans(topology, workload, model, options);
      if (result.best < 0) return false;
      const Candidate& best = result.candidates[size_t(result.best)];
      found.push_back({std::move(flags), std::move(change),
                       fmt::format("{}, {:.1f} ms, {:.1f} GiB", candidate_label(best), best.cost.step_ms,
                                   best.cost.memory.total_GiB),
                       best.cost.step_ms});
      return true;
    } catch (const InputError& e) {
      WF_LOG_DEBUG(kLog, "suggestion {} not plannable: {}", flags, e.what());
      return false;
    }
  }
};

// GPU counts on one side of `ranks`, nearest first: whole nodes (halves below one node), the
// nearest few, then doubling up to the whole cluster.
std::vector<int> nearby_gpu_counts(const Topology& topology, int ranks, bool down) {
  const int per_node = std::max(1, topology.gpus_per_node()), total = topology.num_gpus();
  std::vector<int> counts;
  if (down) {
    for (int g = ranks; int(counts.size()) < kTriesPerDirection;) {
      g = g > per_node ? (g - 1) / per_node * per_node : g / 2;
      if (g < 1) break;
      counts.push_back(g);
    }
    return counts;
  }
  int g = ranks;
  while (int(counts.size()) < kTriesPerDirection) {
    g = g < per_node ? g * 2 : (g / per_node + 1) * per_node;
    if (g > total) break;
    counts.push_back(g);
  }
  for (g = std::max(g, ranks) * 2; g <= total; g *= 2)
    counts.push_back(g);
  // The whole cluster last, unless it is what was asked (that search found nothing already).
  if (total > ranks && (counts.empty() || counts.back() < total)) counts.push_back(total);
  return counts;
}

// Sequence lengths near `seq` that many layouts divide: multiples of the GPUs times a power of two.
std::vector<int64_t> nearby_lengths(int64_t seq, int ranks, bool down) {
  std::set<int64_t> values;
  for (int64_t unit = ranks; unit <= int64_t(ranks) * 1024; unit *= 2) {
    const int64_t below = seq / unit * unit, above = (seq + unit - 1) / unit * unit;
    if (down && below > 0 && below < seq) values.insert(below);
    if (!down && above > seq) values.insert(above);
  }
  std::vector<int64_t> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end(),
            [&](int64_t a, int64_t b) { return std::llabs(a - seq) < std::llabs(b - seq); });
  if (int(sorted.size()) > kTriesPerDirection) sorted.resize(kTriesPerDirection);
  return sorted;
}

}  // namespace

std::vector<Suggestion> suggest_fixes(const Topology& topology, const Workload& asked, const CostModel& model,
                                      const SearchOptions& options) {
  Trial trial{topology, model, {}, {}};
  // A dtype the GPU cannot run rejects every candidate, whatever else changes: the nearest dtype
  // it runs is tried alone, and when that is not enough every other change is tried on top of it.
  Workload workload = asked;
  if (!dtype_issue(topology.gpu(), asked.dtype).empty()) {
    std::optional<DType> runs;
    for (DType dtype : {DType::FP16, DType::FP32})
      if (!runs && dtype_issue(topology.gpu(), dtype).empty()) runs = dtype;
    if (!runs) return {};
    workload.dtype = *runs;
    trial.prefix = {fmt::format("--dtype {}", to_string(*runs)),
                    fmt::format("{} instead of {}, which the {} cannot run", to_string(*runs), to_string(asked.dtype),
                                topology.gpu().name)};
    if (trial.attempt(workload, options, "", "")) return trial.found;
  }
  const int ranks = options.ranks > 0 ? options.ranks : topology.num_gpus();
  const bool step = options.scope == Scope::Step;

  if (step)
    for (int stage = workload.zero_stage + 1; stage <= 3; ++stage) {
      Workload w = workload;
      w.zero_stage = stage;
      if (trial.attempt(w, options, fmt::format("--zero-stage {}", stage),
                        fmt::format("ZeRO stage {} shards {}", stage,
                                    stage == 1   ? "the optimizer state"
                                    : stage == 2 ? "the gradients too"
                                                 : "the weights too")))
        break;
    }
  if (step)
    for (Checkpointing mode : {Checkpointing::Selective, Checkpointing::Full}) {
      if (mode <= workload.checkpointing) continue;
      Workload w = workload;
      w.checkpointing = mode;
      if (trial.attempt(w, options, fmt::format("--checkpointing {}", to_string(mode)),
                        fmt::format("{} activation checkpointing keeps fewer activations", to_string(mode))))
        break;
    }
  for (bool down : {true, false})
    for (int64_t seq : nearby_lengths(workload.seq, ranks, down)) {
      Workload w = workload;
      w.seq = seq;
      if (trial.attempt(w, options, fmt::format("--seq {}", seq),
                        fmt::format("{} tokens instead of {}", seq, workload.seq)))
        break;
    }
  for (bool down : {true, false})
    for (int gpus : nearby_gpu_counts(topology, ranks, down)) {
      SearchOptions o = options;
      o.ranks = gpus;
      if (trial.attempt(workload, o, fmt::format("--gpus {}", gpus), fmt::format("{} GPUs instead of {}", gpus, ranks)))
        break;
    }
  if (options.memory_budget_fraction < 1.0) {
    SearchOptions o = options;
    o.memory_budget_fraction = 1.0;
    o.mode = SearchMode::Heuristic;
    o.progress = trial_progress(options.progress);
    const SearchResult all = search_plans(topology, workload, model, o);
    if (all.best >= 0) {
      // The smallest fraction, in hundredths, that holds the plan using the least memory.
      double least = all.candidates[size_t(all.best)].cost.memory.total_GiB;
      for (const Candidate& c : all.candidates)
        if (c.feasible && !c.pruned) least = std::min(least, c.cost.memory.total_GiB);
      const double fraction = std::min(1.0, std::ceil(100 * least / topology.gpu().memory_GiB) / 100);
      o.memory_budget_fraction = fraction;
      trial.attempt(workload, o, fmt::format("--memory-fraction {:.2f}", fraction),
                    fmt::format("let a plan use {:.0f} % of the GPU memory instead of {:.0f} %", 100 * fraction,
                                100 * options.memory_budget_fraction));
    }
  }
  // No single change is enough: all the memory savings at once, on more GPUs where needed.
  if (trial.found.empty() && step) {
    Workload w = workload;
    w.zero_stage = 3;
    w.checkpointing = Checkpointing::Full;
    std::vector<int> counts{ranks};
    for (int gpus : nearby_gpu_counts(topology, ranks, false))
      counts.push_back(gpus);
    for (int gpus : counts) {
      SearchOptions o = options;
      o.ranks = gpus;
      if (trial.attempt(w, o,
                        fmt::format("--zero-stage 3 --checkpointing full{}",
                                    gpus == ranks ? "" : fmt::format(" --gpus {}", gpus)),
                        "ZeRO stage 3 and full checkpointing together" +
                            (gpus == ranks ? std::string() : fmt::format(", on {} GPUs", gpus))))
        break;
    }
  }
  if (options.strategy) {
    SearchOptions o = options;
    o.strategy.reset();
    trial.attempt(workload, o, "--strategy auto",
                  fmt::format("any strategy instead of {} alone", to_string(*options.strategy)));
  }
  return trial.found;
}

}  // namespace wallfacer
