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
#include <vector>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/plan.hpp>
#include "parallel.hpp"

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
  // Starts the timed bound of `plan` (known to the search as `order`) at `rank`, or its price,
  // unless under way, within the thread count.
  void bound_ahead(size_t order, const Plan& plan, BoundRank rank) {
    if (bounds_.count(order) || !reserve()) return;
    bounds_.emplace(order, workers_.submit([this, plan, rank] {
      const Release release(in_use_);
      return model_.step_lower_bound_ms(plan, rank);
    }));
  }
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
  double bound(size_t order, const Plan& plan, BoundRank rank, MoreAhead&& more_ahead) {
    return take(
        bounds_, order, [&] { return model_.step_lower_bound_ms(plan, rank); }, more_ahead);
  }
  template <typename MoreAhead>
  CostBreakdown price(size_t order, const Plan& plan, MoreAhead&& more_ahead) {
    return take(
        prices_, order, [&] { return priced(plan); }, more_ahead);
  }

 private:
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
  std::map<size_t, std::future<double>> bounds_;
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

}  // namespace wallfacer::detail
