// The sync stream (docs/schedule.md, docs/step.md "Gradients and ZeRO"): a step's gradient buckets
// and ZeRO parameter gathers run on a stream of their own, apart from the strategy's and the
// tensor-parallel collectives, except over a group the attention's collectives use as well; and
// the checker refuses a group whose collectives are split over two streams.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <wallfacer/check/checker.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"
#include "step_workloads.hpp"

namespace wallfacer {
namespace {

Workload sync_workload(int zero_stage) {
  Workload w = testing::small_step_workload();
  w.zero_stage = zero_stage;
  return w;
}

bool is_sync_label(StepOp label) {
  return label == StepOp::GradSync || label == StepOp::ParamGather;
}

// Every strategy with sequence and data parallelism, ZeRO 0 and 3: the synchronisation is on the
// sync stream unless one of the rank's gradient groups carries attention collectives too, nothing
// else is, and the checker proves the step.
TEST(SyncStream, GradientSynchronisationHasAStreamOfItsOwn) {
  const int ranks = 8;
  int tried = 0, on_collective = 0;
  for (int zero_stage : {0, 3})
    for (StrategyKind kind : all_strategies())
      for (StrategyParams params : enumerate_params(kind, sync_workload(zero_stage), ranks / 2)) {
        params.data_parallel = 2;
        params.tensor_parallel = 1;
        const Workload w = sync_workload(zero_stage);
        if (!check_feasible(kind, params, w, ranks).ok) continue;
        const Plan plan = testing::hand_plan(kind, params, w);
        SCOPED_TRACE(fmt::format("{} {} ZeRO {}", to_string(kind), plan.groups.front().name, zero_stage));
        const Schedule attention = build_schedule(plan);
        const Schedule step = StepBuilder(plan).build();
        const CheckReport report = check_schedule(plan, step);
        EXPECT_TRUE(report.ok) << (report.errors.empty() ? "" : report.errors.front());
        ++tried;
        for (size_t r = 0; r < step.ranks.size(); ++r) {
          // Groups of the rank's attention collectives, other than its weight-gradient all-reduce.
          std::set<int32_t> busy;
          const RankProgram& a = attention.ranks[r];
          for (const Op& op : a.ops)
            if (is_collective(op.kind) && op.coll >= 0 && !(op.fields & fieldset::kWeightGrad))
              busy.insert(a.collectives[size_t(op.coll)].group);
          const RankProgram& p = step.ranks[r];
          bool shared = false;  // one of the rank's gradient groups carries attention collectives too
          for (const Op& op : p.ops)
            if (op.label == StepOp::GradSync && busy.count(p.collectives[size_t(op.coll)].group)) shared = true;
          int synced = 0;
          for (const Op& op : p.ops) {
            if (!is_collective(op.kind)) continue;
            const int32_t group = p.collectives[size_t(op.coll)].group;
            if (!is_sync_label(op.label)) {
              EXPECT_EQ(op.stream, Stream::Collective) << to_string(op.label);
              continue;
            }
            ++synced;
            const Stream expected = shared ? Stream::Collective : Stream::Sync;
            EXPECT_EQ(op.stream, expected) << "group " << plan.groups[size_t(group)].name;
            on_collective += op.stream == Stream::Collective;
          }
          EXPECT_GT(synced, 0);
        }
      }
  EXPECT_GE(tried, 16);
  EXPECT_GT(on_collective, 0);  // LSS averages over its sequence group, which gathers K and V
}

// ZeRO 3 gathers a layer's weights on the sync stream once the layer before starts computing (a
// prefetch of one layer, as FSDP and DeepSpeed run it), not all at the start: in the unrolled
// program, every layer but a pass's first waits for the first compute op of the layer before.
TEST(SyncStream, Zero3GathersPrefetchOneLayer) {
  Workload w = sync_workload(3);
  w.layers = 4;
  const Plan plan = testing::hand_plan(StrategyKind::Ring, testing::seq_params(4, 2), w);
  const StepBuilder builder(plan);
  TokenSetPool pool;
  const RankProgram p = unroll(builder.build_template(0, pool));
  // A layer's gathers come first; `first` holds the first gather of each layer pass (forward, then
  // backward) and the op it waits for in the layer before, if any.
  std::vector<std::pair<int32_t, int32_t>> first;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    if (op.label != StepOp::ParamGather) continue;
    if (i > 0 && p.ops[i - 1].label == StepOp::ParamGather) continue;  // not the layer's first
    EXPECT_EQ(op.stream, Stream::Sync);
    int32_t anchor = -1;
    for (const int32_t* d = p.deps_begin(op); d != p.deps_end(op); ++d)
      if (p.ops[size_t(*d)].stream == Stream::Compute) anchor = *d;
    first.push_back({int32_t(i), anchor});
  }
  ASSERT_EQ(first.size(), size_t(2 * w.layers)) << "one gather pass per layer forward and backward";
  for (size_t k = 0; k < first.size(); ++k) {
    SCOPED_TRACE(fmt::format("layer pass {}", k));
    if (k % size_t(w.layers) == 0) {
      EXPECT_EQ(first[k].second, -1);  // the first layer of the forward or the backward
      continue;
    }
    // The first compute op after the previous layer's gathers.
    int32_t expected = first[k - 1].first;
    while (p.ops[size_t(expected)].stream != Stream::Compute)
      ++expected;
    EXPECT_EQ(first[k].second, expected);
  }
}

// A group's calls are matched in program order; split over two streams they could be posted in
// another order, so the checker refuses it, naming the group and both streams.
TEST(SyncStream, CheckerRefusesAGroupOnTwoStreams) {
  const Workload w = sync_workload(1);
  const Plan plan = testing::hand_plan(StrategyKind::Ulysses, testing::seq_params(4, 2), w);
  Schedule step = StepBuilder(plan).build();
  ASSERT_TRUE(check_schedule(plan, step).ok);
  RankProgram& p = step.ranks[0];
  int moved = 0;
  for (Op& op : p.ops)
    if (op.label == StepOp::GradSync && op.stream == Stream::Sync && moved++ == 1) op.stream = Stream::Collective;
  ASSERT_GT(moved, 1);
  const CheckReport report = check_schedule(plan, step);
  ASSERT_FALSE(report.ok);
  bool named = false;
  for (const std::string& e : report.errors)
    named = named ||
            (e.find("runs on the collective stream") != std::string::npos &&
             e.find("on the sync stream") != std::string::npos && e.find("must share one stream") != std::string::npos);
  EXPECT_TRUE(named) << report.errors.front();
}

}  // namespace
}  // namespace wallfacer
