// The topology scheduler: searches strategies, degrees (WallFacer C, Ulysses x ring, data x
// sequence parallel), placements and intra-node ring orders to minimise predicted step time
// within the GPU memory budget. Exhaustive on small clusters; a heuristic that scales. The same
// inputs give the same ranking and a byte-identical plan.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/plan.hpp>

namespace wallfacer {

class Topology;

enum class SearchMode { Auto, Exhaustive, Heuristic };

struct SearchOptions {
  std::optional<StrategyKind> strategy;  // only this strategy; all when empty
  int ranks = 0;                         // GPUs to use; 0 = every GPU of the topology
  SearchMode mode = SearchMode::Auto;    // Auto = Exhaustive up to exhaustive_max_gpus
  int exhaustive_max_gpus = 32;
  double memory_budget_fraction = 0.9;  // of the GPU memory
  size_t max_orders = 5040;             // exhaustive: more distinct node-local orders -> heuristic ones
  // Heuristic mode above this many GPUs: a closed-form screen, rescaled per strategy by pricing
  // each strategy's best-screened candidate, picks `screen_keep` more candidates to price; the
  // others are listed with their (rescaled) screening estimate.
  int screen_above_gpus = 512;
  int screen_keep = 4;
  int screen_ties = 8;  // candidates of one strategy tied for its best estimate that are bounded
  // Every all-reduce (over groups of three or more) as this algorithm; empty: chosen per group.
  std::optional<AllReduceAlgorithm> all_reduce;
  // What the ranking prices. Step: strategies, parameters and GPU orders are searched on the
  // attention layer as before, then every feasible candidate is priced as a whole step in its
  // chosen order and the ranking is by whole-step time within the step's memory.
  Scope scope = Scope::Attention;
  // Tensor parallel degrees to try (each must divide the GPUs, heads and kv heads; others are
  // skipped), and fixed sequence / data parallel degrees (0 = any).
  std::vector<int> tensor_degrees = {1};
  int sequence_parallel = 0, data_parallel = 0;
  // Pipeline parallel degrees to try (each must divide the GPUs and the layers). With Pp > 1 and
  // `auto_microbatches`, a candidate runs batch / D micro-batches of one sequence (the smallest
  // bubble, (Pp - 1) / (M + Pp - 1) of the step); otherwise the workload's micro-batches.
  std::vector<int> pipeline_degrees = {1};
  bool auto_microbatches = true;
  // Virtual stages per pipeline rank to try with Pp > 1 (interleaved 1F1B, docs/step.md); a degree
  // that does not divide the stage's layers, or whose Pp does not divide the micro-batches, is
  // skipped. Without pipelining only 1.
  std::vector<int> virtual_stages = {1};
  // Memory settings a whole-step search may choose per candidate (empty: the workload's only): for
  // each checkpointing mode, the lowest of these ZeRO stages whose step memory fits the budget.
  std::vector<int> zero_stages;
  std::vector<Checkpointing> checkpointing_modes;
  // Whole step: candidates are pruned on their bounds against the `priced_top`-th best step priced
  // so far, so the best `priced_top` candidates are all priced, the ones pricing every candidate
  // would rank first (a table of that many rows shows what it would show).
  int priced_top = 1;
  // Whole step: a candidate is also priced while its bound is below the best step of its strategy
  // priced so far (or none of its strategy is priced yet), so that every strategy's best candidate
  // is priced, the one pricing every candidate would find (what an explanation compares the winner
  // with: complete_strategy_bests then has nothing left to price).
  bool strategy_bests = false;
  // Whole step: the memory a candidate rejected for it reports is its step's, its attention
  // programs built for their footprint. False rejects a candidate whose memory without those
  // programs (its model state, step_memory with an empty footprint: a lower bound) exceeds the
  // budget as it is, reporting that lower bound: a suggestion's trial needs only whether some
  // candidate fits and the best that does, which are the same.
  bool exact_rejected_memory = true;
  // Threads the search bounds and prices candidates on: independent bounds one candidate per
  // thread, and the candidates it will price next priced ahead; what is bounded, priced and
  // pruned, and the ranking, do not depend on the count (docs/cost-model.md).
  int threads = 1;
  // Called after each candidate is priced, with the stage ("orders": under every GPU order, which
  // a whole-step search under one node-local order skips; "bounds": the whole step's memory and
  // compute bound; "steps": as a whole step), the candidates done and the total of that stage.
  // Always on the thread that called search_plans: with several threads "bounds" counts what all
  // of them did when the calling thread finished one, and ends at the total. Empty: none.
  std::function<void(const char* stage, size_t done, size_t total)> progress;
};

struct Candidate {
  Plan plan;  // complete plan, prediction filled when feasible
  bool feasible = false;
  std::string reason;  // why not feasible
  CostBreakdown cost;
  // Heuristic search only: not fully priced. Either its first timed rank alone already took longer
  // than the best plan (cost is then a lower bound), or the closed-form screen left it out on a
  // large cluster (cost.step_ms is then that estimate). `reason` says which.
  bool pruned = false;
  bool screened = false;               // pruned by the screen: cost.step_ms is an estimate, not a bound
  std::vector<int> local_order;        // node-local GPU order used (empty when the rules reject it)
  bool chose_memory_settings = false;  // the search picked its ZeRO stage and checkpointing mode
  // Set by the explanation of a ranking (wallfacer/search/explain.hpp): the candidates that build
  // the same schedule as this one ("double-ring w=1 T=4 (default)"), merged into it, and whether
  // its step is within the cost model's expected error of the best one's.
  std::vector<std::string> same_schedule_as;
  bool tie = false;
  std::string describe_params() const;  // "C=2", "u=4 r=2", "w=4", "S=8 D=2"; "Z1/s" when chosen
  std::string describe_placement() const;
};

struct SearchResult {
  std::vector<Candidate> candidates;  // feasible ones by predicted step time, then rejected
  int best = -1;                      // index of the best feasible candidate, -1 when none
};

SearchResult search_plans(const Topology& topology, const Workload& workload, const CostModel& model,
                          const SearchOptions& options);

}  // namespace wallfacer
