// Hand-built plans (rank r on GPU r, canonical groups, no topology) and per-rank sums of work
// and traffic for the WallFacer, all-gather and LSS schedule tests.
#pragma once

#include <string>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer::team_testing {

Workload workload(int64_t seq, int heads, int kv_heads, bool causal, int batch = 1, int head_dim = 2);
Plan plan_of(StrategyKind kind, const StrategyParams& params, const Workload& workload);
// WallFacer's parameters (team size C, placement), or those of `kind` (C and placement only where
// it is WallFacer).
StrategyParams params_of(int S, int D = 1, int C = 1, Placement placement = Placement::Default);
StrategyParams params_of(StrategyKind kind, int S, int D = 1, int C = 1, Placement placement = Placement::Default);

// Bytes one rank sends, by phase and kind of op (the weight-gradient all-reduce is left out of
// `collective`).
struct Traffic {
  int64_t p2p[2] = {0, 0};
  int64_t all_gather[2] = {0, 0}, reduce_scatter[2] = {0, 0}, all_to_all[2] = {0, 0}, all_reduce[2] = {0, 0};
  int64_t sends[2] = {0, 0};
  double flops[2] = {0, 0};
};
Traffic traffic(const RankProgram& program);

// Exact attention FLOPs of the whole layer (docs/algorithms.md §1.3): 4 B h d x live pairs
// forward, 2.5x that backward, live pairs counted by brute force over (query, key).
double closed_form_flops(const Workload& w, Phase phase);

// Builds the schedule and runs the checker; returns its errors joined ("" when it passes).
std::string check_errors(const Plan& plan, Schedule* out = nullptr);

}  // namespace wallfacer::team_testing
