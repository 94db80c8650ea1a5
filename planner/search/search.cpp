// The topology scheduler (search.hpp): enumerates strategies, parameters, placements and
// node-local GPU orders, prices each with the cost model and ranks them. How the heuristic
// prunes and why it agrees with the exhaustive search: docs/cost-model.md.
#include <wallfacer/search/search.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <thread>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "enumerate.hpp"
#include "fixed_degrees.hpp"
#include "orders.hpp"
#include "parallel.hpp"
#include "placement_batches.hpp"
#include "screen.hpp"
#include "step_jobs.hpp"
#include "step_queue.hpp"

namespace wallfacer {
namespace {

constexpr const char* kLog = "search";

struct Work {
  Candidate candidate;
  size_t index = 0;        // enumeration order, the final tie-breaker
  bool priced = false;     // rules passed: a plan and a (partial) schedule exist
  Schedule schedule;       // timed ranks built so far
  double lower_bound = 0;  // step time of the first timed rank, best over orders
  bool bounded = false;
  double estimate = 0;      // closed-form screen, rescaled per strategy
  BoundRank busiest_rank;   // whole step: the timed rank with the most compute (its bound's rank)
  bool sync_bound = false;  // whole step: the estimate is its synchronisation stream's bound
  // Whole step: the step memory of the chosen ZeRO stage and checkpointing mode, when
  // choose_memory_settings computed it (what evaluate_step would report, from the same model).
  std::optional<MemoryEstimate> step_memory;
  bool warning_pending = false;  // rejected on a thread: warned about once the threads are done
  size_t timed_ops = 0;          // ops of the timed ranks' attention programs, once built
};
constexpr auto plan_of = [](const Work* w) -> const Plan& { return w->candidate.plan; };

std::vector<int> gpu_positions(const Plan& plan) {
  std::vector<int> positions(plan.ranks.size());
  std::transform(plan.ranks.begin(), plan.ranks.end(), positions.begin(), [](const RankSlot& s) { return s.gpu; });
  return positions;
}

// Prices `work` under every order and keeps the fastest (the first one on ties). Volume and memory
// do not depend on the order: they are added once, for the chosen one.
void price_orders(Work& work, const std::vector<std::vector<int>>& orders, const detail::NodeOrders& node_orders,
                  const Topology& topology, const CostModel& model, int ranks,
                  std::optional<AllReduceAlgorithm> all_reduce, Timing timing = Timing::Estimate) {
  Candidate& c = work.candidate;
  double best = std::numeric_limits<double>::infinity();
  std::optional<PreparedTiming> prepared;  // the same for every order: built with the first
  // One plan moved from order to order (make_plan per order rebuilt the same groups each time).
  Plan plan = make_plan(c.plan.strategy, c.plan.params, c.plan.workload, topology, ranks, {}, all_reduce);
  const std::vector<int> positions = gpu_positions(plan);
  for (const auto& order : orders) {
    node_orders.place(plan, positions, order);
    if (!prepared) prepared.emplace(plan, work.schedule, timing);
    CostBreakdown cost = model.evaluate_times(plan, *prepared, /*with_parts=*/false);
    if (cost.step_ms < best) {
      best = cost.step_ms;
      c.plan = plan;
      c.cost = cost;
      c.local_order = order;
    }
  }
  if (prepared) c.cost.parts = model.evaluate_times(c.plan, *prepared).parts;
  c.cost.volume = comm_volume(work.schedule);
  c.cost.memory = model.memory(c.plan, work.schedule);
}

void check_memory(Candidate& c, double budget_GiB) {
  if (c.cost.memory.total_GiB <= budget_GiB) return;
  c.feasible = false;
  c.reason = fmt::format("needs {:.1f} GiB > {:.1f} GiB budget", c.cost.memory.total_GiB, budget_GiB);
}

struct Searcher {
  const Topology& topology;
  const Workload& workload;
  const CostModel& model;
  const SearchOptions& options;
  int ranks = 0;
  SearchMode mode = SearchMode::Heuristic;
  detail::NodeOrders node_orders;
  std::vector<std::vector<int>> orders;
  double budget_GiB = 0;
  std::vector<Work> work;
  std::atomic<bool> in_parallel{false};  // candidates are being handled on several threads

  Plan identity_plan(const Candidate& c) const {
    return make_plan(c.plan.strategy, c.plan.params, c.plan.workload, topology, ranks, {}, options.all_reduce);
  }

  void reject(Work& w, const std::exception& e) {
    w.priced = false;
    w.candidate.reason = e.what();
    w.warning_pending = true;
    if (!in_parallel) warn_rejected(w);
  }
  static void warn_rejected(Work& w) {
    if (!w.warning_pending) return;
    w.warning_pending = false;
    WF_LOG_WARN(kLog, "{} {}: {}", to_string(w.candidate.plan.strategy), w.candidate.describe_params(),
                w.candidate.reason);
  }

  // Runs `job` on each of `items` on the search's threads. Candidates rejected meanwhile are
  // warned about afterwards, in the order of `items`, as one thread would have warned.
  template <typename Job>
  void on_threads(const std::vector<Work*>& items, Job&& job) {
    std::vector<std::vector<Work*>> batches;
    for (Work* w : items)
      batches.push_back({w});
    on_threads(batches, [&](const std::vector<Work*>& batch) { job(*batch.front()); });
  }
  // The same with each batch of items on one thread, in its order.
  template <typename Job>
  void on_threads(const std::vector<std::vector<Work*>>& batches, Job&& job) {
    in_parallel = true;
    try {
      detail::for_each_index(batches.size(), options.threads, [&](size_t i) { job(batches[i]); });
    } catch (...) {
      in_parallel = false;
      throw;
    }
    in_parallel = false;
    for (const std::vector<Work*>& batch : batches)
      for (Work* w : batch)
        warn_rejected(*w);
  }
  std::vector<Work*> all_work() {
    std::vector<Work*> items;
    for (Work& w : work)
      items.push_back(&w);
    return items;
  }

  // Runs `step` on a candidate; a plan or schedule the builders refuse rejects the candidate.
  template <typename Step>
  bool guarded(Work& w, Step&& step) {
    try {
      step();
      return true;
    } catch (const InputError& e) {
      reject(w, e);
    } catch (const ScheduleError& e) {
      reject(w, e);
    }
    return false;
  }

  // Large clusters: only the candidates the closed-form screen ranks best are priced. The screen
  // compares parameters of one strategy better than it compares strategies, so the best-screened
  // candidate of each strategy is bounded first, and the ratio of its bound to its estimate
  // rescales the estimates of its strategy before the overall choice.
  // Estimates this close to a strategy's best count as tied with it: the screen is too rough to
  // rank them.
  static constexpr double kScreenTie = 0.01;

  void screen() {
    std::vector<size_t> priced;
    for (size_t i = 0; i < work.size(); ++i) {
      if (!work[i].priced) continue;
      const Plan& p = work[i].candidate.plan;
      work[i].estimate = detail::screen_estimate_ms(p.strategy, p.params, p.workload, topology, model.calibration(),
                                                    options.all_reduce);
      priced.push_back(i);
    }
    auto by_estimate = [&](size_t a, size_t b) { return work[a].estimate < work[b].estimate; };
    std::stable_sort(priced.begin(), priced.end(), by_estimate);
    // The screen often cannot tell apart candidates that differ in what it models coarsely (a
    // double ring's window when compute dominates its estimate): all candidates tied with their
    // strategy's best estimate, up to screen_ties of them, are bounded, and the smallest
    // bound-to-estimate ratio rescales the strategy.
    std::map<StrategyKind, double> scale, best_estimate;
    std::map<StrategyKind, int> tied;
    std::vector<bool> keep(work.size(), false);
    std::vector<Work*> to_bound;  // which candidates are bounded depends on the estimates alone
    for (size_t i : priced) {
      const StrategyKind kind = work[i].candidate.plan.strategy;
      auto [best, first] = best_estimate.try_emplace(kind, work[i].estimate);
      if (!first && (work[i].estimate > best->second * (1 + kScreenTie) || tied[kind] >= options.screen_ties)) continue;
      ++tied[kind];
      to_bound.push_back(&work[i]);
      keep[i] = true;
    }
    on_threads(to_bound, [&](Work& w) { bound(w); });
    for (const Work* w : to_bound) {
      const double ratio = w->priced && w->estimate > 0 ? w->lower_bound / w->estimate : 1.0;
      auto [it, inserted] = scale.try_emplace(w->candidate.plan.strategy, ratio);
      if (!inserted) it->second = std::min(it->second, ratio);
    }
    for (size_t i : priced)
      work[i].estimate *= scale[work[i].candidate.plan.strategy];
    std::stable_sort(priced.begin(), priced.end(), by_estimate);
    int kept = 0;
    for (size_t i : priced) {
      if (!keep[i] && kept < options.screen_keep) keep[i] = true, ++kept;
      if (keep[i]) continue;
      Work& w = work[i];
      w.priced = false;
      w.candidate.screened = true;  // listed with its estimate, not priced
      Candidate& c = w.candidate;
      c.feasible = true;
      c.pruned = true;
      c.cost.step_ms = w.estimate;
      c.cost.memory = base_memory(c.plan.workload, ranks);
      c.reason = fmt::format("screened out: closed-form estimate {:.2f} ms (schedule not priced)", w.estimate);
      check_memory(c, budget_GiB);
    }
  }

  // Heuristic: times the first timed rank of a candidate alone, without waiting for the other
  // ends of its messages (a lower bound on its step).
  void bound(Work& w) {
    if (!w.priced || w.bounded) return;
    w.bounded = true;
    guarded(w, [&] {
      model.build_timed(identity_plan(w.candidate), w.schedule, 1);
      price_orders(w, orders, node_orders, topology, model, ranks, options.all_reduce, Timing::LowerBound);
      w.lower_bound = w.candidate.cost.step_ms;
    });
  }

  void bound_all() {
    on_threads(all_work(), [&](Work& w) { bound(w); });
  }

  // Whether no candidate's step fits the memory budget under any GPU order: node-local orders keep
  // every rank on its node, so the memory is the same under each (its attention footprint is
  // remembered for the bounds after). The memory without the attention buffers is tried first.
  bool none_fits_memory() {
    std::atomic<bool> fits{false};
    on_threads(all_work(), [&](Work& w) {
      if (fits || !w.priced) return;
      try {
        Plan plan = identity_plan(w.candidate);
        plan.scope = Scope::Step;
        if (step_memory(plan, AttentionFootprint{}).total_GiB <= budget_GiB &&
            step_memory(plan, model.memory_footprint(plan)).total_GiB <= budget_GiB)
          fits = true;
      } catch (const InputError&) {  // place_all rejects it with its reason
      } catch (const ScheduleError&) {
      }
    });
    return !fits;
  }

  // A whole-step search under one node-local order has no order to choose by the attention
  // layer's time, and price_steps prices, bounds or rejects on memory every candidate it is
  // given, overwriting what the attention layer's pricing had found: the candidates are only
  // planned and placed under that order, as pricing them would have left them.
  void place_all() {
    on_threads(all_work(), [&](Work& w) {
      if (!w.priced) return;
      guarded(w, [&] {
        Candidate& c = w.candidate;
        Plan plan = identity_plan(c);
        node_orders.place(plan, gpu_positions(plan), orders.front());
        c.plan = std::move(plan);
        c.local_order = orders.front();
        c.feasible = true;
      });
    });
  }

  void price_all() {
    std::vector<size_t> visit(work.size());
    std::iota(visit.begin(), visit.end(), 0);
    if (mode == SearchMode::Heuristic)
      std::stable_sort(visit.begin(), visit.end(),
                       [&](size_t a, size_t b) { return work[a].lower_bound < work[b].lower_bound; });
    double best_step = std::numeric_limits<double>::infinity();
    if (options.threads < 2) {
      for (size_t done = 0; done < visit.size(); ++done) {
        price(work[visit[done]], best_step);
        if (options.progress) options.progress("orders", done + 1, visit.size());
      }
      return;
    }
    price_all_on_threads(visit, best_step);
  }

  // price_all with the candidates priced ahead on other threads. In visit order the heuristic's
  // bounds grow and the best step shrinks, so the candidates it prices in full are the visit's
  // first ones up to the first it prunes: each is started once the ones before it leave its bound
  // below the best step, and taken in visit order, where one its predecessors' steps prune after
  // all is put back as it was and pruned, exactly as on one thread.
  void price_all_on_threads(const std::vector<size_t>& visit, double& best_step) {
    struct Ahead {
      Candidate candidate;  // as before pricing, to put back
      bool priced = false;
      std::future<bool> job;  // whether pricing in full succeeded
    };
    detail::WorkerThreads workers(options.threads);
    std::map<size_t, Ahead> ahead;  // by position in `visit`
    size_t next = 0;                // the first position not started
    auto prunable = [&](const Work& w) { return mode == SearchMode::Heuristic && w.lower_bound > best_step; };
    in_parallel = true;  // reject() defers its warning: the candidate may yet be put back
    // Starts the next candidates while fewer than `threads` run, and holds at most twice that
    // many priced but not taken yet (each keeps its timed ranks' programs until taken).
    auto start_more = [&](size_t k) {
      for (next = std::max(next, k); next < visit.size() && ahead.size() < 2 * size_t(options.threads); ++next) {
        size_t running = 0;
        for (const auto& [position, a] : ahead)
          running += !detail::is_ready(a.job);
        if (running >= size_t(options.threads)) return;
        Work& w = work[visit[next]];
        if (!w.priced) continue;
        if (prunable(w)) return;
        ahead.emplace(next, Ahead{w.candidate, w.priced, workers.submit([this, &w] { return price_in_full(w); })});
      }
    };
    for (size_t k = 0; k < visit.size(); ++k) {
      start_more(k);
      Work& w = work[visit[k]];
      const auto it = ahead.find(k);
      if (it == ahead.end()) {
        price(w, best_step);
      } else {
        // A thread that comes free meanwhile takes the next candidate.
        workers.wait(it->second.job, [&] { start_more(k + 1); });
        const bool full = it->second.job.get();
        if (!prunable(w)) {
          if (full) settle(w, best_step);
        } else {  // priced ahead, but the steps priced before it prune it
          w.candidate = std::move(it->second.candidate);
          w.priced = it->second.priced;
          w.warning_pending = false;
          price(w, best_step);
        }
        ahead.erase(it);
      }
      warn_rejected(w);
      if (options.progress) options.progress("orders", k + 1, visit.size());
    }
    in_parallel = false;
  }

  // Prices one candidate in full, unless (heuristic) its bound already exceeds `best_step`.
  // `in_full`: the candidate already priced in full on a copy (and whether that succeeded).
  void price(Work& w, double& best_step, std::optional<std::pair<Work, bool>> in_full = std::nullopt) {
    if (!w.priced) return;
    Candidate& c = w.candidate;
    if (prunable_on_bound(w, best_step)) {
      c.pruned = true;
      c.reason = fmt::format("not fully timed: its first rank alone takes {:.2f} ms", w.lower_bound);
    } else if (in_full) {
      w = std::move(in_full->first);
      if (!in_full->second) return;
    } else if (!price_in_full(w)) {
      return;
    }
    settle(w, best_step);
  }
  bool prunable_on_bound(const Work& w, double best_step) const {
    return mode == SearchMode::Heuristic && w.lower_bound > best_step;
  }

  // Every timed rank built and timed under every order; false when the builders refuse the plan.
  bool price_in_full(Work& w) {
    return guarded(w, [&] {
      model.build_timed(identity_plan(w.candidate), w.schedule);
      price_orders(w, orders, node_orders, topology, model, ranks, options.all_reduce);
    });
  }

  void settle(Work& w, double& best_step) {
    Candidate& c = w.candidate;
    c.feasible = true;
    // A whole-step search checks the step's memory before it prices steps (price_steps), from the
    // timed ranks' attention programs at hand now when they are all built.
    if (options.scope != Scope::Step) check_memory(c, budget_GiB);
    if (options.scope == Scope::Step && !c.pruned) w.step_memory = step_memory(c.plan, w.schedule);
    if (c.feasible && !c.pruned) best_step = std::min(best_step, c.cost.step_ms);
    w.timed_ops = 0;
    for (const RankProgram& program : w.schedule.ranks)
      w.timed_ops += program.ops.size();
    w.schedule = Schedule{};  // release the programs
  }

  // A screened-out candidate whose estimate beats the best priced plan is priced after all, the
  // most promising first, until none is left: the ranking never shows an unpriced estimate below
  // the plan it chose. The best step only falls, so those priced are the first ones by estimate
  // (ties in enumeration order) up to the first whose estimate does not beat it. With threads the
  // next ones are bounded and priced ahead, each on a copy (rescued_copy), and taken in that order
  // as one thread takes them: a copy priced ahead and pruned at its turn after all is taken as
  // bounded, and copies past the last one taken are dropped.
  void rescue_screened() {
    const auto started = std::chrono::steady_clock::now();
    std::vector<Work*> screened;
    for (Work& w : work)
      if (w.candidate.screened && w.candidate.feasible) screened.push_back(&w);
    std::stable_sort(screened.begin(), screened.end(),
                     [](const Work* a, const Work* b) { return a->estimate < b->estimate; });
    double best_step = std::numeric_limits<double>::infinity();
    for (const Work& w : work)
      if (w.priced && w.candidate.feasible && !w.candidate.pruned)
        best_step = std::min(best_step, w.candidate.cost.step_ms);
    std::atomic<double> best_now{best_step};  // read by the copies ahead
    const size_t window = size_t(std::max(1, options.threads));
    std::optional<detail::WorkerThreads> workers;
    if (window > 1) workers.emplace(int(window));
    std::map<size_t, std::future<RescuedCopy>> ahead;  // by position in `screened`
    size_t next = 0, rescued = 0;                      // the first position not started
    auto start_more = [&](size_t k) {
      for (next = std::max(next, k); workers && next < screened.size() && ahead.size() < window; ++next) {
        if (!(screened[next]->estimate < best_now.load())) return;
        ahead.emplace(next, workers->submit([this, start = *screened[next], &best_now]() mutable {
          return rescued_copy(std::move(start), best_now.load());
        }));
      }
    };
    in_parallel = workers.has_value();  // reject() defers its warning: a copy may be dropped
    for (; rescued < screened.size() && screened[rescued]->estimate < best_step; ++rescued) {
      Work& w = *screened[rescued];
      start_more(rescued);
      RescuedCopy copy;
      if (const auto it = ahead.find(rescued); it != ahead.end()) {
        workers->wait(it->second, [&] { start_more(rescued + 1); });
        copy = it->second.get();
        ahead.erase(it);
      } else {
        copy = rescued_copy(w, best_step);
      }
      w = std::move(copy.bounded);
      price(w, best_step, std::move(copy.in_full));
      best_now.store(best_step);
      warn_rejected(w);
    }
    in_parallel = false;
    ahead.clear();
    workers.reset();  // waits for the copies still running
    WF_LOG_DEBUG(kLog, "{} screened-out candidates priced after all ({:.3f} s)", rescued,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }

  // A screened-out candidate rescued: bounded, and priced in full unless its bound passes
  // `best_step` (then price() prunes it).
  struct RescuedCopy {
    Work bounded;
    std::optional<std::pair<Work, bool>> in_full;  // and whether pricing in full succeeded
  };
  RescuedCopy rescued_copy(Work w, double best_step) {
    w.candidate.screened = false;
    w.priced = true;
    w.candidate.pruned = false;
    w.candidate.feasible = false;
    w.candidate.reason.clear();
    w.candidate.cost = CostBreakdown{};
    bound(w);
    RescuedCopy copy{w, std::nullopt};
    if (w.priced && !prunable_on_bound(w, best_step)) {
      const bool full = price_in_full(w);
      copy.in_full.emplace(std::move(w), full);
    }
    return copy;
  }

  // Whole-step search: for each checkpointing mode asked for, the lowest ZeRO stage asked for whose step memory fits
  // (the attention programs, hence the memory's attention part, are the same for all); a
  // candidate that fits with none keeps its lightest setting, to be rejected with its memory.
  void choose_memory_settings() {
    if (options.zero_stages.empty() && options.checkpointing_modes.empty()) return;
    std::vector<int> zeros = options.zero_stages;
    if (zeros.empty()) zeros = {workload.zero_stage};
    std::sort(zeros.begin(), zeros.end());
    std::vector<Checkpointing> modes = options.checkpointing_modes;
    if (modes.empty()) modes = {workload.checkpointing};
    std::sort(modes.begin(), modes.end());  // none, selective, full: the last recomputes the most
    const size_t enumerated = work.size();
    for (size_t i = 0; i < enumerated; ++i) {
      if (!work[i].candidate.feasible || work[i].candidate.plan.ranks.empty()) continue;
      AttentionFootprint attention;  // of the timed ranks' attention programs: the same for every setting
      if (!guarded(work[i], [&] { attention = model.memory_footprint(work[i].candidate.plan); })) {
        work[i].candidate.feasible = false;
        continue;
      }
      std::vector<std::pair<Plan, MemoryEstimate>> fitting;
      std::optional<std::pair<Plan, MemoryEstimate>> lightest;
      for (Checkpointing mode : modes)
        for (int zero : zeros) {
          Plan p = work[i].candidate.plan;
          p.scope = Scope::Step;
          p.workload.zero_stage = zero;
          p.workload.checkpointing = mode;
          MemoryEstimate memory = step_memory(p, attention);
          if (memory.total_GiB <= budget_GiB) {
            fitting.emplace_back(std::move(p), memory);
            break;
          }
          lightest.emplace(std::move(p), memory);
        }
      if (fitting.empty()) fitting.push_back(std::move(*lightest));
      work[i].candidate.chose_memory_settings = true;
      for (size_t v = 1; v < fitting.size(); ++v) {
        Work copy;
        copy.candidate = work[i].candidate;
        copy.candidate.plan = std::move(fitting[v].first);
        copy.step_memory = fitting[v].second;
        copy.index = work.size();
        work.push_back(std::move(copy));
      }
      work[i].candidate.plan = std::move(fitting.front().first);
      work[i].step_memory = fitting.front().second;
    }
  }

  // Prices feasible candidates as whole steps (their attention order kept) and checks the step's
  // memory, best bound first: a candidate's key is the best lower bound of its step known so far, first
  // its compute bound, then the communication-aware bound of its busiest timed rank (or that
  // rank's pipeline column) timed alone (CostModel::step_lower_bound_ms). The candidate with the smallest key is
  // bounded further, or priced once its key is the timed bound; a key above the best step priced
  // prunes that candidate and every later one (with priced_top > 1, the priced_top-th best step
  // priced stands for the best one). A candidate whose bound reaches the best step cannot beat it, so the best plan is
  // the one pricing every candidate finds; and every candidate whose timed bound is below the best step is priced, as
  // in any order of pricing, but for a sample whose columns, timed one by one, pass the best step before the last
  // one: that pricing stops there, and the candidate is pruned at those columns' latest end.
  using Queued = detail::QueuedStep;

  void prune_step(Work& w, double key, std::string reason) {
    Candidate& c = w.candidate;
    c.cost = CostBreakdown{};
    c.cost.step_ms = key;
    c.pruned = true;
    c.reason = std::move(reason);
  }

  // The compute bounds (and the memory where it is not known yet; a candidate whose memory cannot
  // fit is not bounded) are independent of each other: one candidate per thread at a time, the
  // largest first (by the ops of its timed attention programs, which its step templates build
  // again; the sequence-parallel degree for candidates only placed), so that the last ones handed
  // out are short: at 16,384 GPUs the ring of 2,048 ranks took a quarter of the phase, and came
  // last in enumeration order. Candidates that differ only in their placement build the same
  // programs: they are bounded one after the other on one thread, sharing a StepBoundMemo.
  // Progress is reported by the calling thread alone, with the count done by all of them.
  void compute_bounds(const std::vector<Work*>& bounded) {
    std::vector<Work*> largest_first = bounded;
    std::stable_sort(largest_first.begin(), largest_first.end(), [](const Work* a, const Work* b) {
      return std::pair(a->timed_ops, a->candidate.plan.params.sequence_parallel) >
             std::pair(b->timed_ops, b->candidate.plan.params.sequence_parallel);
    });
    const std::vector<std::vector<Work*>> alike = detail::placement_batches(largest_first, plan_of);
    std::atomic<size_t> done{0};
    const std::thread::id caller = std::this_thread::get_id();
    size_t reported = 0;
    on_threads(alike, [&](const std::vector<Work*>& batch) {
      StepBoundMemo memo;
      for (Work* item : batch) {
        Work& w = *item;
        const bool built = guarded(w, [&] {
          if (!w.step_memory && !options.exact_rejected_memory) {
            const MemoryEstimate least = step_memory(w.candidate.plan, AttentionFootprint{});
            if (least.total_GiB > budget_GiB) {  // rejected by fits() without its programs built
              w.step_memory = least;
              return;
            }
          }
          MemoryEstimate memory;
          w.estimate = model.step_compute_bound_ms(w.candidate.plan, &w.busiest_rank, w.step_memory ? nullptr : &memory,
                                                   budget_GiB, &memo);
          if (!w.step_memory) w.step_memory = memory;
        });
        if (!built) w.candidate.feasible = false;
        const size_t now = ++done;
        if (options.progress && std::this_thread::get_id() == caller)
          options.progress("bounds", reported = now, largest_first.size());
      }
      raise_to_sync_bounds(batch);
    });
    if (options.progress && reported < largest_first.size())
      options.progress("bounds", largest_first.size(), largest_first.size());
  }

  // Raises one plan's placements' compute bounds to their synchronisation's where longer (keyed by
  // compute, the communication-bound ones, under ZeRO 3 most, were timed before the best step was
  // known). A column the builders refuse is left to the timed bound, which rejects it.
  void raise_to_sync_bounds(const std::vector<Work*>& batch) {
    std::vector<Work*> raised;
    std::vector<CostModel::BoundedPlan> plans;
    for (Work* w : batch)
      if (w->candidate.feasible && std::isfinite(w->estimate) && w->step_memory &&
          w->step_memory->total_GiB <= budget_GiB) {
        raised.push_back(w);
        plans.emplace_back(&w->candidate.plan, w->busiest_rank);
      }
    std::vector<double> sync;
    try {
      if (!plans.empty()) sync = model.step_sync_bounds_ms(plans);
    } catch (const InputError&) {
      return;
    } catch (const ScheduleError&) {
      return;
    }
    for (size_t k = 0; k < sync.size(); ++k)
      if (sync[k] > raised[k]->estimate) raised[k]->estimate = sync[k], raised[k]->sync_bound = true;
  }

  void price_steps() {
    choose_memory_settings();
    // A step that cannot fit is rejected with its memory before any bound or pricing: pruned at
    // a bound it would be listed as feasible, and its time would not count.
    auto fits = [&](Work& w) {
      if (w.step_memory->total_GiB <= budget_GiB) return true;
      Candidate& c = w.candidate;
      c.cost = CostBreakdown{};
      c.cost.memory = *w.step_memory;
      c.pruned = false;  // rejected, whatever the attention layer's bound had said
      check_memory(c, budget_GiB);
      return false;
    };
    std::vector<Work*> bounded;
    for (Work& w : work) {
      Candidate& c = w.candidate;
      if (!c.feasible || c.plan.ranks.empty()) continue;
      c.plan.scope = Scope::Step;
      if (w.step_memory && !fits(w)) continue;
      bounded.push_back(&w);
    }
    compute_bounds(bounded);
    std::vector<Work*> feasible;
    for (Work* w : bounded)
      if (w->candidate.feasible && fits(*w)) feasible.push_back(w);
    std::stable_sort(feasible.begin(), feasible.end(),
                     [](const Work* a, const Work* b) { return a->estimate < b->estimate; });
    auto later = [](const Queued& a, const Queued& b) { return a.key != b.key ? a.key > b.key : a.order > b.order; };
    std::priority_queue<Queued, std::vector<Queued>, decltype(later)> queue(later);
    for (size_t k = 0; k < feasible.size(); ++k)
      queue.push({feasible[k]->estimate, k, false});
    // The priced_top best steps priced so far (the largest on top): bounds are held against the
    // last of them.
    std::priority_queue<double> top;
    double best = std::numeric_limits<double>::infinity();
    std::map<StrategyKind, double> strategy_best;  // with options.strategy_bests: each one's best step
    // The step a candidate must beat not to be pruned: the best one, and with strategy_bests also
    // its own strategy's best (none until that is known). It only falls as steps are priced.
    auto threshold_of = [&](StrategyKind strategy) -> std::optional<double> {
      if (!options.strategy_bests) return best;
      const auto known = strategy_best.find(strategy);
      if (known == strategy_best.end()) return std::nullopt;
      return std::max(best, known->second);
    };
    auto threshold = [&](const Work& w) { return threshold_of(w.candidate.plan.strategy); };
    detail::StepJobs jobs(model, options.threads);
    jobs.bound_placements_together(feasible, plan_of, [](const Work* w) { return w->busiest_rank; });
    size_t done = 0;
    while (!queue.empty()) {
      const Queued q = queue.top();
      queue.pop();
      Work& w = *feasible[q.order];
      Candidate& c = w.candidate;
      const bool pipelined = c.plan.params.pipeline_parallel > 1;
      const std::optional<double> stop = threshold(w);
      if (stop && detail::beyond(q, *stop)) {
        if (options.progress) options.progress("steps", done++, feasible.size());
        prune_step(w, q.key, detail::pruned_reason(q, pipelined, w.sync_bound));
        continue;
      }
      if (!q.timed) {
        auto more_ahead = [&] {
          detail::work_ahead(jobs, queue, feasible, threshold, detail::kNoStop, c.plan.strategy);
        };
        jobs.bound_ahead(q.order);
        more_ahead();
        queue.push({std::max(q.key, jobs.bound(q.order, more_ahead)), q.order, true});
        continue;
      }
      if (options.progress) options.progress("steps", done++, feasible.size());
      auto more_ahead = [&] { detail::work_ahead(jobs, queue, feasible, threshold, q.key, c.plan.strategy); };
      jobs.price_ahead(q.order, c.plan);
      more_ahead();
      // Its sampled columns, timed one by one, may rise above the step to beat before the last.
      c.cost = jobs.price(q.order, c.plan, more_ahead);
      if (const std::optional<detail::ColumnsAbove> above =
              detail::columns_above(c.cost, stop.value_or(detail::kNoStop))) {
        prune_step(w, above->latest_ms, detail::pruned_reason(*above, pipelined));
        continue;
      }
      c.pruned = false;
      c.reason.clear();
      check_memory(c, budget_GiB);
      if (!c.feasible) continue;
      auto [known, first] = strategy_best.try_emplace(c.plan.strategy, c.cost.step_ms);
      if (!first) known->second = std::min(known->second, c.cost.step_ms);
      top.push(c.cost.step_ms);
      if (int(top.size()) > std::max(1, options.priced_top)) top.pop();
      if (int(top.size()) == std::max(1, options.priced_top)) best = top.top();
      for (const StrategyKind strategy : all_strategies())
        jobs.set_stop(strategy, threshold_of(strategy).value_or(detail::kNoStop));
    }
  }

  SearchResult ranked() {
    for (Work& w : work)
      if (w.candidate.feasible) w.candidate.plan.prediction = w.candidate.cost.to_prediction();
    // Fully priced feasible candidates by predicted step time, then the pruned ones by their bound
    // or estimate, then the rejected ones; ties keep the enumeration order.
    auto tier = [](const Candidate& c) { return !c.feasible ? 2 : c.pruned ? 1 : 0; };
    std::stable_sort(work.begin(), work.end(), [&](const Work& a, const Work& b) {
      const int ta = tier(a.candidate), tb = tier(b.candidate);
      if (ta != tb) return ta < tb;
      if (ta < 2 && a.candidate.cost.step_ms != b.candidate.cost.step_ms)
        return a.candidate.cost.step_ms < b.candidate.cost.step_ms;
      return a.index < b.index;
    });
    SearchResult result;
    for (Work& w : work)
      result.candidates.push_back(std::move(w.candidate));
    if (!result.candidates.empty() && tier(result.candidates.front()) == 0) result.best = 0;
    return result;
  }
};

}  // namespace

SearchResult search_plans(const Topology& topology, const Workload& workload, const CostModel& model,
                          const SearchOptions& options) {
  const int ranks = options.ranks > 0 ? options.ranks : topology.num_gpus();
  if (options.ranks < 0 || ranks > topology.num_gpus())
    throw InputError("--gpus", 0,
                     fmt::format("{} GPUs asked for, but the topology '{}' has {}", options.ranks, topology.name(),
                                 topology.num_gpus()));
  const SearchMode mode = options.mode != SearchMode::Auto       ? options.mode
                          : ranks <= options.exhaustive_max_gpus ? SearchMode::Exhaustive
                                                                 : SearchMode::Heuristic;
  detail::check_fixed_degrees(options, workload, ranks);
  Searcher s{topology, workload, model, options, ranks, mode, detail::NodeOrders(topology, ranks), {}, 0, {}};
  s.orders = detail::choose_orders(s.node_orders, mode, options);
  s.budget_GiB = options.memory_budget_fraction * topology.gpu().memory_GiB;
  for (Candidate& candidate : detail::enumerate_candidates(topology, workload, options, ranks)) {
    Work& w = s.work.emplace_back();
    w.index = s.work.size() - 1;
    w.priced = candidate.reason.empty();
    w.candidate = std::move(candidate);
  }
  WF_LOG_INFO(kLog, "{} candidates, {} node-local orders, {} mode", s.work.size(), s.orders.size(),
              mode == SearchMode::Exhaustive ? "exhaustive" : "heuristic");
  const bool screening = mode == SearchMode::Heuristic && ranks > options.screen_above_gpus;
  // Where no step fits, no order is chosen for any: the steps are rejected on their memory alone,
  // each with its exact memory. A screened search checks that first only where it would price more
  // than two orders: under one or two its screen costs less (docs/cost-model.md, "Nothing feasible").
  const bool settings_fixed = options.zero_stages.empty() && options.checkpointing_modes.empty();
  const size_t orders_worth_checking = screening ? 3 : 2;
  if (options.scope == Scope::Step &&
      ((!screening && s.orders.size() == 1) ||
       (settings_fixed && s.orders.size() >= orders_worth_checking && s.none_fits_memory()))) {
    s.place_all();
  } else {
    if (mode == SearchMode::Heuristic) {
      if (screening) s.screen();
      s.bound_all();
    }
    s.price_all();
  }
  if (screening) s.rescue_screened();
  if (options.scope == Scope::Step) s.price_steps();
  return s.ranked();
}

}  // namespace wallfacer
