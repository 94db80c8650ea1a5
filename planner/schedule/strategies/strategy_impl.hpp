// Internal interface each strategy implements (one file per strategy in planner/schedule/strategies/).
// strategy.cpp dispatches on StrategyKind; nothing outside planner/ includes this header.
#pragma once

#include <memory>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer::detail {

class StrategyImpl {
 public:
  explicit StrategyImpl(StrategyKind kind) : kind_(kind) {}
  virtual ~StrategyImpl() = default;
  StrategyKind kind() const { return kind_; }
  // The rules every strategy shares (degrees, divisibility), then that params holds this
  // strategy's knobs type, then the strategy's own rules of docs/algorithms.md §12 (not memory).
  Feasibility feasible(const StrategyParams& params, const Workload& workload, int ranks) const;
  // Parameter combinations worth trying for `ranks` ranks (data-parallel splits included). The
  // default, for strategies without knobs: one per data-parallel split.
  virtual std::vector<StrategyParams> enumerate(const Workload& workload, int ranks) const;
  // Canonical groups for logical ranks 0..P-1.
  virtual std::vector<CommGroup> groups(const StrategyParams& params, int ranks) const = 0;
  // Placement permutation: logical rank r runs on the position[r]-th GPU of the GPU order
  // (identity by default). E.g. WallFacer P2PIntra, USP context-first.
  virtual std::vector<int> positions(const StrategyParams& params, int ranks) const;
  // Throws InputError when plan.groups do not have the structure this strategy needs.
  // The default checks feasible() and that plan.groups equal groups().
  virtual void validate(const Plan& plan) const;
  virtual std::vector<FlowSet> flow_sets(const Plan& plan) const = 0;
  virtual RankProgram build_rank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode) const = 0;

 protected:
  // The strategy's own rules, asked only once the shared rules hold and the knobs are its type.
  virtual Feasibility own_feasibility(const StrategyParams& params, const Workload& workload, int ranks) const {
    return {};
  }
  // This strategy's knobs (feasible() has checked the type; a mismatch here is an InputError).
  template <typename K>
  const K& knobs(const StrategyParams& params) const {
    return knobs_of<K>(kind_, params);
  }

 private:
  StrategyKind kind_;
};

std::unique_ptr<StrategyImpl> make_ring_impl(bool zigzag);  // ring.cpp: Ring and Zigzag
std::unique_ptr<StrategyImpl> make_ulysses_impl();          // ulysses.cpp
std::unique_ptr<StrategyImpl> make_usp_impl();              // usp.cpp
std::unique_ptr<StrategyImpl> make_double_ring_impl();      // double_ring.cpp
std::unique_ptr<StrategyImpl> make_allgather_impl();        // allgather.cpp
std::unique_ptr<StrategyImpl> make_wallfacer_impl();        // wallfacer.cpp
std::unique_ptr<StrategyImpl> make_lss_impl();              // lss.cpp

}  // namespace wallfacer::detail
