// BuildMode::ComputeOnly against Full: for every feasible parameter set of every strategy on 16
// ranks, alone and under tensor parallelism 2 and pipeline parallelism 2, every rank's
// compute-only program has the Full program's buffers, bindings, batch and op count, and op for
// op its ops other than sends and receives (dependencies aside), which it counts instead; no op
// has a dependency.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

using testing::for_each_split_plan;
using testing::small_workload;
using testing::Split;

bool is_transfer(const Op& op) {
  return op.kind == OpKind::Send || op.kind == OpKind::Recv;
}

// `full` and `compute` built into one pool, Full first: equal token sets have equal ids.
void expect_compute_of(const RankProgram& full, const RankProgram& compute, const std::string& what) {
  EXPECT_EQ(compute.rank, full.rank) << what;
  EXPECT_EQ(compute.batch_begin, full.batch_begin) << what;
  EXPECT_EQ(compute.batch_end, full.batch_end) << what;
  EXPECT_TRUE(compute.buffers == full.buffers) << what;
  EXPECT_TRUE(compute.inputs == full.inputs) << what;
  EXPECT_TRUE(compute.outputs == full.outputs) << what;
  EXPECT_TRUE(compute.deps.empty()) << what;
  EXPECT_EQ(compute.op_count(), full.ops.size()) << what;
  EXPECT_EQ(full.op_count(), full.ops.size()) << what;
  size_t kept = 0, transfers = 0;
  for (size_t i = 0; i < full.ops.size(); ++i) {
    Op expected = full.ops[i];
    if (is_transfer(expected)) {
      ++transfers;
      continue;
    }
    expected.dep_begin = 0;
    expected.dep_count = 0;
    ASSERT_LT(kept, compute.ops.size()) << what << ": op " << i;
    EXPECT_TRUE(compute.ops[kept] == expected) << what << ": op " << i;
    ++kept;
  }
  EXPECT_EQ(kept, compute.ops.size()) << what;
  EXPECT_EQ(compute.transfers_left_out, transfers) << what;
}

TEST(BuildModes, ComputeOnlyKeepsTheComputeTheDeclarationsAndTheOpCount) {
  const int ranks = 16;
  Workload workload = small_workload(16 * 48, 8, 4, true, 2);
  workload.layers = 2;
  int plans = 0, pipelined = 0, transfers = 0;
  for_each_split_plan(workload, ranks, {{1, 1}, {2, 1}, {1, 2}}, [&](const Plan& plan, Split split) {
    const ScheduleBuilder builder(plan);
    TokenSetPool pool;
    for (int r = 0; r < ranks; ++r) {
      const RankProgram full = builder.build_rank(r, pool);
      const RankProgram compute = builder.build_rank(r, pool, BuildMode::ComputeOnly);
      expect_compute_of(
          full, compute,
          fmt::format("{} T={} P={}: rank {}", to_string(plan.strategy), split.tensor, split.pipeline, r));
      for (const Op& op : full.ops)
        transfers += is_transfer(op);
    }
    ++plans;
    pipelined += split.pipeline > 1;
  });
  EXPECT_GT(plans, 24);  // every strategy under each split
  EXPECT_GT(pipelined, 8);
  EXPECT_GT(transfers, 1000);
}

}  // namespace
}  // namespace wallfacer
