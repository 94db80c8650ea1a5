// Whole-step bounds and prices computed ahead of the step search on other threads
// (docs/cost-model.md, "Searches on several threads").
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/plan.hpp>
#include "parallel.hpp"
#include "placement_batches.hpp"
#include "step_queue.hpp"

namespace wallfacer::detail {

// Bounds and prices whole steps ahead of the search on other threads: the search asks for the
// timed bound or the step of the candidate it has decided on, and meanwhile the ones its queue
// holds next are bounded or priced speculatively. The search still decides, one candidate after
// the other, what is bounded, priced and pruned, exactly as on one thread; a speculative result it
// never asks for is dropped. So the ranking does not depend on the thread count, only the wall
// time does.
class StepJobs {
 public:
  StepJobs(const CostModel& model, int threads)
      : model_(model), threads_(std::max(1, threads)), workers_(threads_ > 1 ? threads_ : 0) {}
  // The candidates, by the order the search knows them by (`items`, which must outlive the
  // jobs), their plans and their busiest ranks: a candidate's timed bound is taken with those of
  // the others that differ from it only in their placement and are not asked for yet, which share
  // its column's templates, unrolled orders and timeline (CostModel::step_lower_bounds_ms). The
  // others' bounds are kept until asked for. Called once, before any bound is asked for.
  template <typename Item, typename PlanOf, typename RankOf>
  void bound_placements_together(const std::vector<Item*>& items, PlanOf&& plan_of, RankOf&& rank_of) {
    bounded_ = [&items, plan_of, rank_of](size_t k) {
      return CostModel::BoundedPlan(&plan_of(items[k]), rank_of(items[k]));
    };
    others_ = placement_siblings(items, plan_of);
  }
  // Starts the timed bound of the candidate known to the search as `order` (with its other
  // placements'), unless under way or known, within the thread count.
  void bound_ahead(size_t order) {
    if (bounds_.count(order) || known_bounds_.count(order) || !reserve()) return;
    const std::vector<size_t> batch = batch_of(order);
    std::vector<std::pair<Plan, BoundRank>> plans;
    for (const size_t k : batch) {
      const auto [plan, rank] = bounded_(k);
      plans.emplace_back(*plan, rank);
    }
    std::shared_future<std::vector<double>> job = workers_
                                                      .submit([this, plans = std::move(plans)] {
                                                        const Release release(in_use_);
                                                        return model_.step_lower_bounds_ms(pointers(plans));
                                                      })
                                                      .share();
    for (size_t i = 0; i < batch.size(); ++i)
      bounds_.emplace(batch[i], std::pair(job, i));
  }
  // Starts the price of `plan`, known to the search as `order`, the same way.
  void price_ahead(size_t order, const Plan& plan) {
    if (prices_.count(order) || !reserve()) return;
    prices_.emplace(order, workers_.submit([this, plan] {
      const Release release(in_use_);
      return priced(plan);
    }));
  }
  // The step a candidate of `strategy` must beat (infinity: none yet), as the search decides it
  // now. A price reads it after each group of programs it times and stops above it
  // (CostModel::evaluate_step); since these steps only fall, every stop a price read is at least
  // the one the search decides that candidate with, and a stopped price says all it needs.
  void set_stop(StrategyKind strategy, double stop_ms) {
    stops_[size_t(strategy)].store(stop_ms, std::memory_order_release);
  }
  // Every thread works (jobs finished but not asked for yet do not count), or is lent to a price.
  bool busy() const { return threads_ < 2 || in_use_.load() >= threads_; }
  // The timed bound or the step asked for: taken from the thread computing it (meanwhile
  // `more_ahead` is called whenever a thread comes free, to give it the next job), or computed
  // here when none is.
  template <typename MoreAhead>
  double bound(size_t order, MoreAhead&& more_ahead) {
    taken_.insert(order);
    if (const auto known = known_bounds_.find(order); known != known_bounds_.end()) {
      const double bound = known->second;
      known_bounds_.erase(known);
      return bound;
    }
    if (const auto job = bounds_.find(order); job != bounds_.end()) {
      workers_.wait(job->second.first, more_ahead);
      const double bound = job->second.first.get()[job->second.second];
      bounds_.erase(job);
      return bound;
    }
    const std::vector<size_t> batch = batch_of(order);
    std::vector<CostModel::BoundedPlan> plans;
    for (const size_t k : batch)
      plans.push_back(bounded_(k));
    const std::vector<double> bounds = model_.step_lower_bounds_ms(plans);
    for (size_t i = 1; i < batch.size(); ++i)
      known_bounds_.emplace(batch[i], bounds[i]);
    return bounds.front();
  }
  template <typename MoreAhead>
  CostBreakdown price(size_t order, const Plan& plan, MoreAhead&& more_ahead) {
    return take(
        prices_, order, [&] { return priced(plan); }, more_ahead);
  }

 private:
  // `order` and the others of its placements whose bounds are not asked for nor under way.
  std::vector<size_t> batch_of(size_t order) const {
    std::vector<size_t> batch = {order};
    if (order < others_.size())
      for (const size_t k : others_[order])
        if (!taken_.count(k) && !bounds_.count(k) && !known_bounds_.count(k)) batch.push_back(k);
    return batch;
  }
  static std::vector<CostModel::BoundedPlan> pointers(const std::vector<std::pair<Plan, BoundRank>>& plans) {
    std::vector<CostModel::BoundedPlan> bounded;
    for (const auto& [plan, rank] : plans)
      bounded.emplace_back(&plan, rank);
    return bounded;
  }
  // A price lends the threads that are free meanwhile to time its columns (ThreadLender).
  CostBreakdown priced(const Plan& plan) {
    const std::atomic<double>& stop = stops_[size_t(plan.strategy)];
    return model_.evaluate_step(
        plan, [&stop] { return stop.load(std::memory_order_acquire); },
        [this](std::function<void()> work) { return lend(std::move(work)); });
  }
  bool lend(std::function<void()> work) {
    if (!reserve()) return false;
    workers_.submit([this, work = std::move(work)] {
      const Release release(in_use_);
      work();
    });
    return true;
  }
  // Counts a thread in use if one is free: jobs and lent threads take their thread this way, from
  // the search's thread and from the threads that price at once.
  bool reserve() {
    if (threads_ < 2) return false;
    int used = in_use_.load();
    do {
      if (used >= threads_) return false;
    } while (!in_use_.compare_exchange_weak(used, used + 1));
    return true;
  }
  // Gives the thread back when its job ends.
  struct Release {
    explicit Release(std::atomic<int>& in_use) : in_use_(in_use) {}
    ~Release() { in_use_.fetch_sub(1); }
    Release(const Release&) = delete;
    Release& operator=(const Release&) = delete;
    std::atomic<int>& in_use_;
  };
  template <typename Result, typename Compute, typename MoreAhead>
  Result take(std::map<size_t, std::future<Result>>& jobs, size_t order, Compute&& compute, MoreAhead& more_ahead) {
    auto job = jobs.find(order);
    if (job == jobs.end()) return compute();
    workers_.wait(job->second, more_ahead);
    Result result = job->second.get();
    jobs.erase(job);
    return result;
  }

  const CostModel& model_;
  int threads_;
  std::atomic<int> in_use_{0};  // threads running a job or lent, or holding one not started yet
  std::function<CostModel::BoundedPlan(size_t)> bounded_;
  std::vector<std::vector<size_t>> others_;  // by order: the other placements of its plan
  // By order: the job taking its bound (with others), and its place among the bounds it returns.
  std::map<size_t, std::pair<std::shared_future<std::vector<double>>, size_t>> bounds_;
  std::map<size_t, double> known_bounds_;  // taken here with another's, not asked for yet
  std::set<size_t> taken_;                 // bounds asked for
  std::map<size_t, std::future<CostBreakdown>> prices_;
  std::vector<std::atomic<double>> stops_ = infinite_stops();  // by strategy
  static std::vector<std::atomic<double>> infinite_stops() {
    std::vector<std::atomic<double>> stops(all_strategies().size());
    for (std::atomic<double>& stop : stops)
      stop.store(std::numeric_limits<double>::infinity());
    return stops;
  }
  WorkerThreads workers_;  // last: destroyed first, finishing the jobs that use the members above
};

// Speculation for StepJobs: the candidates the queue holds next that the best step so far
// does not prune, in the order the search will take them, while threads are free: the timed
// bound of one still keyed by its compute bound, the step of one keyed by its timed bound. A
// step is priced ahead only when its bound is within kPriceAheadReach of the first timed bound
// in line (`timed`, the one being priced, or infinity): a step is seldom that far above its
// bound, so a candidate further out would most likely be pruned by the step priced first
// (at 16,384 GPUs the runner-up's bound is 3.6 times the best step), and its price, the
// costliest job, would only slow the one the search waits for. Except a step that will be priced
// whatever the others cost: with strategy_bests, the first in line of a strategy none of whose
// candidates is priced or being decided on (`deciding`, the strategy of the one the search
// holds), which would otherwise wait for every other step (docs/cost-model.md).
inline constexpr double kPriceAheadReach = 1.5;
inline constexpr double kNoStop = std::numeric_limits<double>::infinity();  // no step to beat
// `feasible[q.order]` is the candidate of queue entry q (its `candidate.plan`), `threshold(it)`
// the step it must beat, if any.
template <typename Queue, typename Item, typename Threshold>
void work_ahead(StepJobs& jobs, const Queue& queued, const std::vector<Item*>& feasible, const Threshold& threshold,
                double timed, StrategyKind deciding) {
  if (jobs.busy()) return;  // one thread, or all of them working: no copy of the queue
  Queue queue = queued;
  std::set<StrategyKind> met = {deciding};  // strategies with a candidate ahead in line
  while (!queue.empty() && !jobs.busy()) {
    const QueuedStep q = queue.top();
    queue.pop();
    const Item& w = *feasible[q.order];
    const bool first_of_strategy = met.insert(w.candidate.plan.strategy).second;
    const std::optional<double> stop = threshold(w);
    if (stop && beyond(q, *stop)) continue;  // pruned now, whatever is priced before it
    if (!q.timed) {
      jobs.bound_ahead(q.order);
      continue;
    }
    timed = std::min(timed, q.key);
    if (q.key <= timed * kPriceAheadReach || (!stop && first_of_strategy)) jobs.price_ahead(q.order, w.candidate.plan);
  }
}

}  // namespace wallfacer::detail
