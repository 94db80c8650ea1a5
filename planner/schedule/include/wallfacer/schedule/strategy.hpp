// Every sequence-parallel strategy (docs/algorithms.md): its feasibility rules, its communication
// groups and rank placement (the communication configuration generator), and its schedule
// builder. This is the one place that knows each algorithm; everything else reads schedules.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer {

class Topology;

// Why a candidate cannot run; empty when it can.
struct Feasibility {
  bool ok = true;
  std::string reason;  // e.g. "heads (32) not divisible by Ulysses degree 12"
};

// Checks the strategy rules of docs/algorithms.md §12 for `ranks` ranks (sequence and data parallel
// degrees in params) on this workload. Memory is checked by the cost model, not here.
Feasibility check_feasible(StrategyKind strategy, const StrategyParams& params, const Workload& workload, int ranks);

// Every parameter combination worth considering for `ranks` ranks: data-parallel splits,
// WallFacer team sizes, USP degrees, double-ring windows, placements. Includes infeasible ones
// (the planner reports their reasons).
std::vector<StrategyParams> enumerate_params(StrategyKind strategy, const Workload& workload, int ranks);

// Logical communication groups of the strategy, in canonical form, for ranks 0..P-1.
std::vector<CommGroup> make_groups(StrategyKind strategy, const StrategyParams& params, int ranks);

// A complete plan for a strategy: groups from make_groups, rank r placed on gpu_order[r]
// (default: GPU r). The placement parameter may permute logical ranks (e.g. P2PIntra). All-reduces
// run as `all_reduce` where given, else as the planner chooses per group (all_reduce.hpp).
Plan make_plan(StrategyKind strategy, const StrategyParams& params, const Workload& workload, const Topology& topology,
               int ranks, const std::vector<int>& gpu_order = {},
               std::optional<AllReduceAlgorithm> all_reduce = std::nullopt);

// Builds the schedule of a plan. Validates the plan first (throws InputError naming what is
// wrong: unknown group, wrong group sizes, params that break the rules).
class ScheduleBuilder {
 public:
  explicit ScheduleBuilder(const Plan& plan);
  ~ScheduleBuilder();
  ScheduleBuilder(ScheduleBuilder&&) noexcept;

  int num_ranks() const;
  ScheduleDims dims() const;
  // The flows each flow set holds (all ranks), independent of which ranks are built.
  std::vector<FlowSet> flow_sets() const;
  // One rank's program; token sets are interned into `pool`.
  RankProgram build_rank(int rank, TokenSetPool& pool, BuildMode mode = BuildMode::Full) const;
  // Whether rank `a`'s program can be made from rank `b`'s by renaming: the tensor slices of one
  // slice rank build the same program, with their own heads, peers and groups, and so do the
  // ranks of one stage rank in every pipeline stage, with their own peers and groups. (The
  // tensor slices of a pipeline stage are not renamed so far.)
  bool renames(int a, int b) const;
  // Rank `rank`'s program made from `sibling`, the program this builder built (into the same
  // pool) for a rank renames(rank, sibling.rank) holds: equal to build_rank(rank, pool).
  RankProgram rename(int rank, RankProgram sibling) const;
  // Programs of the given ranks (all when empty), with flow sets and dims filled in.
  Schedule build(const std::vector<int>& ranks = {}) const;
  // Every rank's program, built on up to `threads` threads (blocks of consecutive ranks, each
  // with a token pool of its own, merged in rank order): the same schedule as build(), token ids
  // included. For one large schedule built alone (the simulator's); a search that prices
  // candidates on several threads already keeps the CPUs busy.
  Schedule build_all(int threads) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Convenience: ScheduleBuilder(plan).build().
Schedule build_schedule(const Plan& plan);

}  // namespace wallfacer
