// Tensor parallelism around a strategy (docs/step.md "Tensor parallelism"): T tensor slices, each
// running the strategy over its S * D ranks on heads / T, and the tensor groups that join the T
// ranks of one slice position. Global rank g = r * T + t for slice rank r of slice t. Private to
// the schedule stage: strategy.cpp lifts plans, groups, placements and programs with it.
#pragma once

#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer::detail {

// The rules tensor parallelism adds: T >= 1 divides the ranks, the heads and the kv heads.
Feasibility tensor_feasibility(const Workload& workload, int tensor, int ranks);
// What one slice sees: heads / T and kv_heads / T (hidden = heads / T * head_dim); params with T = 1.
Workload slice_workload(const Workload& workload, int tensor);
StrategyParams slice_params(const StrategyParams& params);
// The global group list: every slice's groups (names prefixed "t<t>.", ranks lifted), slice after
// slice, then the tensor groups "tp<r>" of ranks r * T .. r * T + T - 1.
std::vector<CommGroup> lift_groups(const std::vector<CommGroup>& slice_groups, int tensor, int slice_ranks);
// Placement of global rank g: slice position of g / T, times T, plus g % T (a tensor group on
// consecutive GPUs of the order).
std::vector<int> lift_positions(const std::vector<int>& slice_positions, int tensor);
// The plan of slice t (S * D ranks, the slice's GPUs and groups) of a tensor-parallel plan.
Plan slice_plan(const Plan& plan, int slice);
// Moves slice t's program (built from slice_plan(plan, t)) into the global plan: rank ids, group
// indices, and head ranges (query heads by t * heads / T, kv heads by t * kv_heads / T).
void lift_program(RankProgram& program, const Plan& plan, int slice, int slice_groups);
// The same for a program already lifted to slice `from`: every slice builds the same program for a
// slice rank (the strategies read no GPU placement), so lifting it again by the difference gives
// slice `to`'s.
void relift_program(RankProgram& program, const Plan& plan, int from, int to, int slice_groups);
// A slice flow set with every slice's flows (they run at the same time).
FlowSet lift_flow_set(const FlowSet& slice_set, int tensor);

}  // namespace wallfacer::detail
