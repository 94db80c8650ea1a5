// The search's thread helpers (planner/search/parallel.hpp): every index handled exactly once
// whatever the thread count, the first error in index order raised after the ones before it ran,
// and worker threads that run every job they are given on their own few threads; and the batches
// of candidates that differ only in their placement, bounded on one thread (placement_batches.hpp)
// and whose timed bounds are taken together (step_jobs.hpp); and the reading of a pricing stopped
// above a step (step_queue.hpp), which must not depend on which thread stopped it where.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "../common/synthetic_workload.hpp"
#include "parallel.hpp"
#include "placement_batches.hpp"
#include "step_jobs.hpp"
#include "step_queue.hpp"

namespace wallfacer::detail {
namespace {

TEST(ForEachIndex, HandlesEveryIndexOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 8})
    for (size_t count : {0, 1, 5, 100}) {
      std::vector<std::atomic<int>> seen(count);
      for_each_index(count, threads, [&](size_t i) { ++seen[i]; });
      for (size_t i = 0; i < count; ++i)
        EXPECT_EQ(seen[i].load(), 1) << threads << " threads, " << count << " indices, index " << i;
    }
}

// As on one thread: the error of the smallest failing index is the one raised, and every index
// before it was handled.
TEST(ForEachIndex, RaisesTheFirstErrorInIndexOrder) {
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> seen(100);
    try {
      for_each_index(seen.size(), threads, [&](size_t i) {
        if (i == 13 || i == 37 || i == 38) throw std::runtime_error(std::to_string(i));
        ++seen[i];
      });
      ADD_FAILURE() << threads << " threads: no error raised";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "13") << threads << " threads";
    }
    for (size_t i = 0; i < 13; ++i)
      EXPECT_EQ(seen[i].load(), 1) << threads << " threads, index " << i;
  }
}

TEST(WorkerThreads, RunsEveryJobOnItsOwnThreads) {
  std::mutex mutex;
  std::set<std::thread::id> ran_on;
  std::vector<std::future<int>> results;
  {
    WorkerThreads workers(3);
    for (int i = 0; i < 50; ++i)
      results.push_back(workers.submit([&, i] {
        std::lock_guard lock(mutex);
        ran_on.insert(std::this_thread::get_id());
        return i * i;
      }));
    for (int i = 0; i < 50; ++i)
      EXPECT_EQ(results[size_t(i)].get(), i * i);
  }
  EXPECT_LE(ran_on.size(), 3u);
  EXPECT_EQ(ran_on.count(std::this_thread::get_id()), 0u);
}

// Destroying the threads lets the running job finish and settles every job queued behind it:
// each future is ready afterwards, with its result or, for a job dropped unstarted, a broken
// promise (which of the two depends on whether the thread took the job before the queue was
// dropped), never left pending.
TEST(WorkerThreads, SettlesEveryJobWhenDestroyed) {
  std::promise<void> started, release;
  std::future<void> running;
  std::vector<std::future<void>> queued;
  std::atomic<bool> finished{false};
  {
    WorkerThreads workers(1);
    running = workers.submit([&] {
      started.set_value();
      release.get_future().wait();
      finished = true;
    });
    for (int i = 0; i < 20; ++i)
      queued.push_back(workers.submit([] {}));
    started.get_future().wait();
    release.set_value();
  }
  EXPECT_TRUE(finished.load());
  EXPECT_NO_THROW(running.get());
  for (std::future<void>& job : queued) {
    ASSERT_EQ(job.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    try {
      job.get();
    } catch (const std::future_error& e) {
      EXPECT_EQ(e.code(), std::future_errc::broken_promise);
    }
  }
}

// Every 16-rank candidate of the strategies with placements, and the ring, for each workload.
std::vector<Plan> candidates_of(const std::vector<Workload>& workloads) {
  std::vector<Plan> plans;
  for (const Workload& w : workloads)
    for (StrategyKind kind : {StrategyKind::Ring, StrategyKind::DoubleRing, StrategyKind::Usp, StrategyKind::WallFacer})
      for (const StrategyParams& params : enumerate_params(kind, w, 16))
        plans.push_back(test::topology_free_plan(kind, params, w));
  return plans;
}

std::vector<const Plan*> pointers_to(const std::vector<Plan>& plans) {
  std::vector<const Plan*> items;
  for (const Plan& p : plans)
    items.push_back(&p);
  return items;
}

constexpr auto itself = [](const Plan* p) -> const Plan& { return *p; };

// Every strategy's candidates on 16 ranks, twice over (the second time under another workload):
// the batches hold every candidate once, in its order, and two candidates share a batch exactly
// when their plans are equal but for their placement; the double ring, USP and WallFacer have
// batches of two placements.
TEST(PlacementBatches, GroupThePlansEqualButForTheirPlacement) {
  test::WorkloadShape shape{.seq = 4096, .heads = 8, .kv_heads = 8, .head_dim = 16, .batch = 2};
  const Workload first = test::synthetic_workload(shape);
  shape.head_dim = 32;
  const Workload second = test::synthetic_workload(shape);
  const std::vector<Plan> plans = candidates_of({first, second});
  const auto batches = placement_batches(pointers_to(plans), itself);
  auto same = [](const Plan& a, const Plan& b) {
    return a.strategy == b.strategy && without_placement(a.params) == without_placement(b.params) &&
           a.workload == b.workload && a.num_ranks() == b.num_ranks();
  };
  std::vector<int> seen(plans.size(), 0);
  std::set<StrategyKind> paired;
  for (const auto& batch : batches) {
    for (size_t i = 0; i < batch.size(); ++i) {
      ++seen[size_t(batch[i] - plans.data())];
      EXPECT_TRUE(same(*batch[i], *batch.front()));
      if (i > 0) {
        EXPECT_LT(batch[i - 1], batch[i]);  // in their order
      }
    }
    if (batch.size() > 1) paired.insert(batch.front()->strategy);
  }
  for (int count : seen)
    EXPECT_EQ(count, 1);
  for (size_t a = 0; a < batches.size(); ++a)
    for (size_t b = a + 1; b < batches.size(); ++b)
      EXPECT_FALSE(same(*batches[a].front(), *batches[b].front()));
  EXPECT_EQ(paired, (std::set<StrategyKind>{StrategyKind::DoubleRing, StrategyKind::Usp, StrategyKind::WallFacer}));
}

// A candidate's placement siblings are the other plans equal to its own but for their placement,
// by place: checked against comparing every pair.
TEST(PlacementBatches, SiblingsAreTheOtherPlacementsOfEachPlan) {
  const Workload w = test::synthetic_workload({.seq = 4096, .heads = 8, .kv_heads = 8, .head_dim = 16, .batch = 2});
  const std::vector<Plan> plans = candidates_of({w});
  const auto siblings = placement_siblings(pointers_to(plans), itself);
  ASSERT_EQ(siblings.size(), plans.size());
  size_t with_siblings = 0;
  for (size_t a = 0; a < plans.size(); ++a) {
    std::vector<size_t> expected;
    for (size_t b = 0; b < plans.size(); ++b)
      if (b != a && plans[a].strategy == plans[b].strategy &&
          without_placement(plans[a].params) == without_placement(plans[b].params))
        expected.push_back(b);
    EXPECT_EQ(siblings[a], expected) << a;
    with_siblings += !expected.empty();
  }
  EXPECT_GT(with_siblings, 4u);
}

// The timed bounds StepJobs takes of a plan's placements together are each plan's own, asked for
// in any order, started ahead on other threads or taken on the asking thread.
TEST(StepJobs, BoundsOfPlacementsTakenTogetherAreEachPlansOwn) {
  const Topology topology = Topology::load("dgx-h100", 2);
  Workload w = load_workload("llama-3-8b");
  w.layers = 2;
  w.seq = 16384;
  const CostModel model(topology, Calibration::defaults());
  std::vector<Plan> plans;
  for (StrategyKind kind : {StrategyKind::Ring, StrategyKind::DoubleRing, StrategyKind::Usp, StrategyKind::WallFacer})
    for (const StrategyParams& params : enumerate_params(kind, w, 16))
      if (check_feasible(kind, params, w, 16).ok) {
        plans.push_back(make_plan(kind, params, w, topology, 16));
        plans.back().scope = Scope::Step;
      }
  std::vector<const Plan*> items;
  std::vector<BoundRank> busiest(plans.size());
  std::vector<double> expected;
  for (size_t k = 0; k < plans.size(); ++k) {
    items.push_back(&plans[k]);
    model.step_compute_bound_ms(plans[k], &busiest[k]);
    expected.push_back(model.step_lower_bound_ms(plans[k], busiest[k]));
  }
  size_t with_siblings = 0;
  for (const std::vector<size_t>& others : placement_siblings(items, itself))
    with_siblings += !others.empty();
  ASSERT_GT(with_siblings, 4u);
  std::vector<size_t> order(plans.size());
  std::iota(order.begin(), order.end(), size_t(0));
  for (const int threads : {1, 3})
    for (const bool reversed : {false, true}) {
      SCOPED_TRACE(fmt::format("{} threads{}", threads, reversed ? ", reversed" : ""));
      StepJobs jobs(model, threads);
      jobs.bound_placements_together(items, itself, [&](const Plan* p) { return busiest[size_t(p - plans.data())]; });
      std::vector<size_t> asked = order;
      if (reversed) std::reverse(asked.begin(), asked.end());
      for (size_t i = 0; i < asked.size(); ++i) {
        if (i % 3 != 2) jobs.bound_ahead(asked[i]);
        if (i + 1 < asked.size()) jobs.bound_ahead(asked[i + 1]);
        EXPECT_EQ(jobs.bound(asked[i], [] {}), expected[asked[i]]) << asked[i];
      }
    }
}

// A pricing's latest ends by column, slowed and with that column at full speed, as the whole
// pricing gives them; and the same pricing stopped at a higher stop than the search decides with,
// at the column that passes it, at full speed or slowed. The search reads the same column and
// figure from either: the full-speed one where it passes the step, which a pricing stopped there
// at full speed knows, else the slowed one.
TEST(StepQueue, PricingsStoppedAtFullSpeedReadAsTheWholeOne) {
  CostBreakdown whole;
  whole.latest_ends_ms = {10, 12, 20, 25};
  whole.latest_full_speed_ends_ms = {9, 11.5, 18, 24};
  auto stopped_at = [&](size_t column, bool at_full_speed) {
    CostBreakdown c;
    c.stopped = true;
    c.stopped_at_full_speed = at_full_speed;
    c.latest_ends_ms.assign(whole.latest_ends_ms.begin(), whole.latest_ends_ms.begin() + std::ptrdiff_t(column) + 1);
    c.latest_full_speed_ends_ms.assign(whole.latest_full_speed_ends_ms.begin(),
                                       whole.latest_full_speed_ends_ms.begin() + std::ptrdiff_t(column) + 1);
    if (at_full_speed) c.latest_ends_ms.back() = c.latest_full_speed_ends_ms.back();
    return c;
  };
  struct Case {
    double stop_ms;
    size_t columns;
    double latest_ms;
    bool at_full_speed;
  };
  for (const Case& expected : {Case{15, 3, 18, true}, Case{19, 3, 20, false}, Case{11, 2, 11.5, true}}) {
    SCOPED_TRACE(expected.stop_ms);
    const size_t column = expected.columns - 1;
    std::vector<CostBreakdown> pricings = {whole, stopped_at(column, false)};
    // Stopped at full speed by a stop the full-speed end passes, at most the one decided with.
    if (whole.latest_full_speed_ends_ms[column] > expected.stop_ms) pricings.push_back(stopped_at(column, true));
    for (const CostBreakdown& cost : pricings) {
      const std::optional<ColumnsAbove> above = columns_above(cost, expected.stop_ms);
      ASSERT_TRUE(above.has_value());
      EXPECT_EQ(above->columns, expected.columns);
      EXPECT_EQ(above->latest_ms, expected.latest_ms);
      EXPECT_EQ(above->at_full_speed, expected.at_full_speed);
    }
  }
  EXPECT_FALSE(columns_above(whole, 22).has_value());  // only the whole step passes it
  EXPECT_EQ(pruned_reason(ColumnsAbove{3, 18, true}, false),
            "3 of its timed ranks alone take 18.000 ms with the last one's compute at full speed, above the best step");
  EXPECT_EQ(
      pruned_reason(ColumnsAbove{1, 18, true}, true),
      "1 of its timed pipeline columns alone takes 18.000 ms with its compute at full speed, above the best step");
  EXPECT_EQ(pruned_reason(ColumnsAbove{2, 20, false}, false),
            "2 of its timed ranks alone take 20.000 ms, above the best step");
}

}  // namespace
}  // namespace wallfacer::detail
