// BuildMode::ComputeOnly against Full: for every feasible parameter set of every strategy on 16
// ranks, alone and under tensor parallelism 2 and pipeline parallelism 2, every rank's
// compute-only program has the Full program's buffers, bindings, batch and op count, and op for
// op its compute ops (dependencies aside); its sends and receives keep their kind, stream, phase
// and step and nothing else, and no op has a dependency.
#include <gtest/gtest.h>

#include <string>

#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

using testing::hand_plan;
using testing::small_workload;

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
  ASSERT_EQ(compute.ops.size(), full.ops.size()) << what;
  for (size_t i = 0; i < full.ops.size(); ++i) {
    Op expected = full.ops[i];
    expected.dep_begin = 0;
    expected.dep_count = 0;
    if (is_transfer(expected)) {
      Op placeholder;
      placeholder.kind = expected.kind;
      placeholder.stream = expected.stream;
      placeholder.phase = expected.phase;
      placeholder.step = expected.step;
      expected = placeholder;
    }
    EXPECT_TRUE(compute.ops[i] == expected) << what << ": op " << i;
  }
}

TEST(BuildModes, ComputeOnlyKeepsTheComputeTheDeclarationsAndTheOpCount) {
  const int ranks = 16;
  Workload workload = small_workload(16 * 48, 8, 4, true, 2);
  workload.layers = 2;
  int plans = 0, pipelined = 0, transfers = 0;
  for (auto [T, Pp] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}}) {
    Workload slice = workload;
    slice.heads /= T;
    slice.kv_heads /= T;
    for (StrategyKind kind : all_strategies())
      for (StrategyParams params : enumerate_params(kind, slice, ranks / (T * Pp))) {
        params.tensor_parallel = T;
        params.pipeline_parallel = Pp;
        if (!check_feasible(kind, params, workload, ranks).ok) continue;
        const ScheduleBuilder builder(hand_plan(kind, params, workload));
        TokenSetPool pool;
        for (int r = 0; r < ranks; ++r) {
          const RankProgram full = builder.build_rank(r, pool);
          const RankProgram compute = builder.build_rank(r, pool, BuildMode::ComputeOnly);
          expect_compute_of(full, compute,
                            std::string(to_string(kind)) + " T=" + std::to_string(T) + " P=" + std::to_string(Pp) +
                                ": rank " + std::to_string(r));
          for (const Op& op : full.ops)
            transfers += is_transfer(op);
        }
        ++plans;
        pipelined += Pp > 1;
      }
  }
  EXPECT_GT(plans, 24);  // every strategy under each split
  EXPECT_GT(pipelined, 8);
  EXPECT_GT(transfers, 1000);
}

}  // namespace
}  // namespace wallfacer
