// The topology scheduler: searches strategies, degrees (WallFacer C, Ulysses x ring, data x
// sequence parallel), placements and intra-node ring orders to minimise predicted step time
// within the GPU memory budget. Exhaustive on small clusters; a heuristic that scales. The same
// inputs give the same ranking and a byte-identical plan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/cost_model.hpp"
#include "planner/plan.hpp"

namespace wallfacer {

class Topology;

enum class SearchMode { Auto, Exhaustive, Heuristic };

struct SearchOptions {
  std::optional<StrategyKind> strategy;  // only this strategy; all when empty
  int ranks = 0;                         // GPUs to use; 0 = every GPU of the topology
  SearchMode mode = SearchMode::Auto;    // Auto = Exhaustive up to exhaustive_max_gpus
  int exhaustive_max_gpus = 32;
  double memory_budget_fraction = 0.9;   // of the GPU memory
};

struct Candidate {
  Plan plan;  // complete plan, prediction filled when feasible
  bool feasible = false;
  std::string reason;  // why not feasible
  CostBreakdown cost;
  std::string describe_params() const;  // "C=2", "u=4 r=2", "w=4", "S=8 D=2"
  std::string describe_placement() const;
};

struct SearchResult {
  std::vector<Candidate> candidates;  // feasible ones by predicted step time, then rejected
  int best = -1;                      // index of the best feasible candidate, -1 when none
};

SearchResult search_plans(const Topology& topology, const Workload& workload, const CostModel& model,
                          const SearchOptions& options);

}  // namespace wallfacer
