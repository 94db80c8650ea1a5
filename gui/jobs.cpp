#include <wallfacer/gui/jobs.hpp>

#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::gui {
namespace {

// A trace of more ranks than this keeps the first ones only (the timeline stays quick to open).
constexpr int kTracedRanksMax = 32;

std::vector<int> tensor_degrees(const std::string& text, const Topology& topology) {
  if (text == "auto") {
    std::vector<int> degrees;
    for (int t = 1; t <= topology.gpus_per_node(); t *= 2)
      degrees.push_back(t);
    return degrees;
  }
  int t = 0;
  try {
    size_t used = 0;
    t = std::stoi(text, &used);
    if (used != text.size()) t = 0;
  } catch (const std::exception&) {
    t = 0;
  }
  if (t < 1)
    throw InputError("tensor parallel", 0, fmt::format("expects 'auto' or a degree of at least 1, got '{}'", text));
  return {t};
}

// As `wallfacer plan --pp auto`: 1, 2, 4, ... stages of whole nodes each.
std::vector<int> pipeline_degrees(const Topology& topology, int gpus) {
  const int nodes = gpus > 0 ? std::max(1, gpus / std::max(1, topology.gpus_per_node())) : topology.num_nodes();
  std::vector<int> degrees;
  for (int p = 1; p <= nodes; p *= 2)
    degrees.push_back(p);
  return degrees;
}

SearchOptions search_options(const PlanSettings& s, const Topology& topology, const JobProgress& progress) {
  SearchOptions o;
  if (s.strategy != "auto") o.strategy = parse_strategy(s.strategy);
  o.ranks = s.gpus;
  if (s.memory_fraction <= 0 || s.memory_fraction > 1)
    throw InputError("memory fraction", 0, fmt::format("expects a fraction in (0, 1], got {}", s.memory_fraction));
  o.memory_budget_fraction = s.memory_fraction;
  o.scope = parse_scope(s.scope);
  o.tensor_degrees = tensor_degrees(s.tensor, topology);
  o.pipeline_degrees = pipeline_degrees(topology, s.gpus);
  o.progress = [&progress](const char* stage, size_t done, size_t total) {
    progress(fmt::format("pricing candidates ({})", stage), total > 0 ? double(done) / double(total) : 0.0);
  };
  return o;
}

}  // namespace

void JobProgress::operator()(const std::string& stage, double fraction) const {
  if (cancel && cancel->load()) throw Cancelled{};
  if (report) report(stage, fraction);
}

Topology load_topology(const std::string& path_or_preset, int nodes) {
  return Topology::load(path_or_preset, nodes > 0 ? std::optional<int>(nodes) : std::nullopt);
}

PlanOutcome run_planning(const PlanSettings& settings, const Topology& topology, const JobProgress& progress) {
  WorkloadOverrides overrides;
  if (settings.seq > 0) overrides.seq = settings.seq;
  const Workload workload = load_workload(settings.model, overrides);
  const CostModel model(topology, Calibration::defaults());
  const SearchOptions options = search_options(settings, topology, progress);
  progress("searching", 0);
  PlanOutcome outcome{search_plans(topology, workload, model, options), {}, 0};
  outcome.budget_GiB = options.memory_budget_fraction * topology.gpu().memory_GiB;
  auto& candidates = outcome.result.candidates;
  outcome.simulated_ms.assign(candidates.size(), std::nullopt);
  std::vector<size_t> chosen;
  for (size_t i = 0; i < candidates.size() && int(chosen.size()) < settings.simulate_top && candidates[i].feasible; ++i)
    if (!candidates[i].plan.ranks.empty()) chosen.push_back(i);
  SimOptions sim;
  sim.cancel = progress.cancel;
  for (size_t k = 0; k < chosen.size(); ++k) {
    progress(fmt::format("simulating candidate {} of {}", k + 1, chosen.size()), double(k) / double(chosen.size()));
    Candidate& c = candidates[chosen[k]];
    if (c.pruned) {  // priced in part only: price it in full first, as `wallfacer plan --simulate-top`
      c.cost = model.evaluate(c.plan);
      c.plan.prediction = c.cost.to_prediction();
      c.pruned = false;
      c.reason.clear();
    }
    // The whole step, as predicted: the comparison is like for like.
    outcome.simulated_ms[chosen[k]] = simulate(c.plan, topology, sim).step_ms;
  }
  WF_LOG_INFO("gui", "search on {}: {} candidates, best #{}, {} simulated", topology.name(), candidates.size(),
              outcome.result.best, chosen.size());
  progress("done", 1);
  return outcome;
}

SimOutcome run_simulation(const Plan& plan, const Topology& topology, const std::string& trace_path, int step_layers,
                          const std::atomic<bool>* cancel) {
  SimOptions options;
  options.cancel = cancel;
  options.trace_path = trace_path;
  options.busiest_links = 0;
  if (plan.scope == Scope::Step && step_layers > 0) options.step_layers = std::min(step_layers, plan.workload.layers);
  if (plan.num_ranks() > kTracedRanksMax)
    for (int r = 0; r < kTracedRanksMax; ++r)
      options.trace_ranks.push_back(r);
  SimOutcome outcome{simulate(plan, topology, options), trace_path};
  WF_LOG_INFO("gui", "simulated {} on {}: step {:.3f} ms, {} links used, trace {}", to_string(plan.strategy),
              topology.name(), outcome.result.step_ms, outcome.result.busiest_links.size(), trace_path);
  return outcome;
}

}  // namespace wallfacer::gui
