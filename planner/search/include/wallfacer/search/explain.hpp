// Why a ranking came out as it did, and what to change when nothing fits: candidates that build
// the same schedule merged under one row, ties within the cost model's expected error, sentences
// that compare the winner with the runner-up and with the best of every other strategy in terms
// of where their steps go (StepParts), and, when no candidate is feasible, the nearest changes of
// the inputs that make one feasible, each checked by planning with it (docs/cost-model.md,
// "Explaining the ranking").
#pragma once

#include <string>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/search/search.hpp>

namespace wallfacer {

// "usp u=2 r=2 T=4 (head-first)".
std::string candidate_label(const Candidate& candidate);

// Prices in full the best candidate of each strategy when the step search left it pruned at its
// bound (so every strategy's best has its parts), checks its memory against the budget again, and
// keeps the ranking order: the candidates pruned at a bound below their strategy's best step, as
// pricing every candidate would find that best (lowest bound first, until none is left), and a
// strategy's first candidate when none of it was priced (a screened one's estimate is no bound).
// The candidates are priced on up to `threads` threads; the result does not depend on how many.
void complete_strategy_bests(SearchResult& result, const CostModel& model, double memory_budget_GiB, int threads = 1);

// Merges feasible candidates that build the same schedule (equal predicted steps and equal
// schedule_hash of their timed ranks, tensor and data degrees included) into the best-ranked of
// them, which lists the others in same_schedule_as. The schedules are hashed on up to `threads`
// threads; the result does not depend on how many.
void merge_same_schedules(SearchResult& result, const CostModel& model, int threads = 1);

// Marks the fully priced feasible candidates whose step is within `relative_error` of the best's.
void mark_ties(SearchResult& result, double relative_error = kCostModelExpectedError);

// Sentences comparing the best candidate with the runner-up, then with the best candidate of
// each other strategy; empty when there is no best.
std::vector<std::string> explain_ranking(const SearchResult& result, double relative_error = kCostModelExpectedError);

// The parts of `other` against `best` that make it slower, largest first, as text
// ("exposed network 31.2 vs 4.0 ms, compute 810.0 vs 805.1 ms").
std::string compare_parts(const Candidate& best, const Candidate& other, int max_parts = 2);

// A change of the inputs that makes a plan feasible, as found by planning with it.
struct Suggestion {
  std::string flags;    // what to pass: "--zero-stage 3", "--seq 131072", "--gpus 16"
  std::string change;   // in words: "ZeRO stage 3 shards the weights too"
  std::string outcome;  // the best plan it gives: "usp u=2 r=2 T=4 (head-first), 2594.4 ms, 43.1 GiB"
  double step_ms = 0;
};

// When `options` finds no feasible candidate: tries a higher ZeRO stage, stronger activation
// checkpointing, the nearest sequence lengths, fewer and more GPUs, a larger memory fraction and,
// with a fixed strategy, any strategy; returns those that plan a feasible candidate, nearest
// change first within each kind. `options.progress`, when set, hears each trial's search under
// its stage's name for a suggestion ("steps for a suggestion", ...).
std::vector<Suggestion> suggest_fixes(const Topology& topology, const Workload& workload, const CostModel& model,
                                      const SearchOptions& options);

}  // namespace wallfacer
