// The executor on hand-built schedules (hand_programs.hpp) with the local backend: results
// against the fp64 naive reference, both reduce-scatter paths, the WeightGrad all-reduce against
// its closed form, and the errors a broken schedule must produce instead of wrong numbers or a
// hang.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/layer_runner.hpp>
#include <wallfacer/runtime/npy.hpp>
#include "runtime/hand_programs.hpp"

namespace wallfacer::testing {
namespace {

using runtime::LayerRunOptions;
using runtime::LayerRunResult;

LayerRunResult run_checked(const HandCase& c, bool fp64 = false, runtime::LocalOptions local = {},
                           int64_t progress_rows = 0) {
  LayerRunOptions options;
  options.fp64 = fp64;
  options.check = true;
  options.executor.progress_rows = progress_rows;
  auto inputs = runtime::seeded_inputs(c.plan.workload, 7, fp64);
  return runtime::run_layer_local(c.plan, c.schedule, inputs, options, local);
}

void expect_all_ok(const LayerRunResult& result, const std::string& what) {
  ASSERT_EQ(result.checks.size(), 5u) << what;
  for (const auto& check : result.checks) {
    EXPECT_TRUE(check.ok) << what << ": " << check.name << " relative error " << check.stats.relative;
    EXPECT_LE(check.stats.relative, check.tolerance) << what << ": " << check.name;
  }
  EXPECT_TRUE(result.ok) << what;
}

struct Shape {
  int64_t seq;
  int heads, kv_heads, head_dim, batch;
};

TEST(ExecutorHand, RingMatchesReference) {
  for (Shape s : {Shape{40, 4, 2, 16, 2}, Shape{37, 2, 2, 16, 1}, Shape{48, 4, 1, 32, 1}})
    for (bool causal : {true, false})
      for (int P : {1, 2, 3, 4}) {
        Workload w = tiny_workload(s.seq, s.heads, s.kv_heads, s.head_dim, s.batch, causal);
        HandCase c = hand_ring(P, w);
        expect_all_ok(run_checked(c), fmt::format("{} seq {} causal {}", c.name, s.seq, causal));
      }
}

TEST(ExecutorHand, RingInDoubleIsTight) {
  HandCase c = hand_ring(3, tiny_workload(45, 4, 2, 16, 1, true));
  LayerRunResult result = run_checked(c, true);
  expect_all_ok(result, "fp64 ring");
  for (const auto& check : result.checks)
    EXPECT_LT(check.stats.relative, 1e-10) << check.name;
}

TEST(ExecutorHand, SlicedComputeGivesTheSameResult) {
  HandCase c = hand_ring(2, tiny_workload(40, 4, 2, 16, 1, true));
  LayerRunResult whole = run_checked(c), sliced = run_checked(c, false, {}, 7);
  expect_all_ok(sliced, "sliced");
  for (size_t i = 0; i < whole.outputs.o.data.size(); ++i)
    ASSERT_NEAR(whole.outputs.o.data[i], sliced.outputs.o.data[i], 1e-6);
  for (size_t i = 0; i < whole.outputs.dk.data.size(); ++i)
    ASSERT_NEAR(whole.outputs.dk.data[i], sliced.outputs.dk.data[i], 1e-5);
}

TEST(ExecutorHand, GatherAndReduceScatterOnBothPaths) {
  for (bool causal : {true, false})
    for (int P : {1, 2, 3}) {
      HandCase c = hand_gather(P, tiny_workload(41, 4, 2, 16, 2, causal));
      for (bool backend_reduce_scatter : {true, false}) {
        LayerRunResult r = run_checked(c, false, runtime::LocalOptions{backend_reduce_scatter});
        std::string what =
            fmt::format("{} causal {} backend reduce-scatter {}", c.name, causal, backend_reduce_scatter);
        expect_all_ok(r, what);
        EXPECT_TRUE(r.weight_grad.present) << what;
        EXPECT_TRUE(r.weight_grad.ok) << what << ": " << r.weight_grad.first_mismatch;
        EXPECT_EQ(r.weight_grad.elements, 1000);
      }
    }
}

TEST(ExecutorHand, UlyssesAllToAll) {
  for (bool causal : {true, false})
    for (int P : {1, 2}) {
      HandCase c = hand_ulysses(P, tiny_workload(36, 4, 2, 16, 2, causal));
      expect_all_ok(run_checked(c), fmt::format("{} causal {}", c.name, causal));
    }
  HandCase c4 = hand_ulysses(4, tiny_workload(34, 8, 4, 16, 1, true));
  expect_all_ok(run_checked(c4), c4.name);
}

TEST(ExecutorHand, KeySplitWithLseMerge) {
  for (bool causal : {true, false})
    for (int P : {1, 2, 3, 4}) {
      HandCase c = hand_key_split(P, tiny_workload(38, 4, 2, 16, 1, causal));
      expect_all_ok(run_checked(c), fmt::format("{} causal {}", c.name, causal));
    }
}

// Two-stage all-reduce ({0,1},{2,3} then {0,2},{1,3}) must give every rank the sum over all four
// ranks: the closed form sum_r weight_grad_value(r, i).
TEST(ExecutorHand, TwoStageAllReduceSumsEveryRank) {
  const int P = 4;
  Workload w = tiny_workload(16, 2, 2, 16, 1, false);
  HandCase c;
  c.plan = bare_plan(P, w);
  c.plan.groups.push_back({"pair0", GroupKind::Sequence, {0, 1}});
  c.plan.groups.push_back({"pair1", GroupKind::Sequence, {2, 3}});
  c.plan.groups.push_back({"cross0", GroupKind::Data, {0, 2}});
  c.plan.groups.push_back({"cross1", GroupKind::Data, {1, 3}});
  c.schedule.dims.seq = 16, c.schedule.dims.heads = 2, c.schedule.dims.kv_heads = 2, c.schedule.dims.head_dim = 16;
  const int64_t elements = 333;
  for (int r = 0; r < P; ++r) {
    HandBuilder b(c.schedule, r, 1);
    int32_t g = b.buffer("wgrad", field_bit(Field::WeightGrad), {}, 0);
    b.input(g, Field::WeightGrad, {}, {});
    b.all_reduce(2 + r / 2, g, field_bit(Field::WeightGrad), elements);
    b.all_reduce(4 + r % 2, g, field_bit(Field::WeightGrad), elements);
    b.output(g, Field::WeightGrad, {}, {});
    c.schedule.ranks.push_back(b.finish());
  }
  auto inputs = runtime::seeded_inputs(w, 1, false);
  std::mutex mutex;
  std::vector<std::vector<double>> got(P);
  runtime::run_local_ranks(P, [&](runtime::Backend& backend) {
    backend.set_groups(c.plan.groups);
    runtime::GlobalInputs global{&inputs.q, &inputs.k, &inputs.v, &inputs.dO};
    auto result =
        runtime::execute_program<float>(c.schedule, c.schedule.ranks[size_t(backend.rank())], c.plan, global, backend);
    std::lock_guard lock(mutex);
    got[size_t(backend.rank())] = result.outputs.at(0).values;
  });
  for (int r = 0; r < P; ++r) {
    ASSERT_EQ(got[size_t(r)].size(), size_t(elements));
    for (int64_t i = 0; i < elements; ++i) {
      double want = 0;
      for (int c2 = 0; c2 < P; ++c2)
        want += runtime::weight_grad_value(c2, i);
      ASSERT_EQ(got[size_t(r)][size_t(i)], want) << "rank " << r << " element " << i;
    }
  }
}

// --save writes the gathered outputs in global token order; reading them back gives the same values.
TEST(ExecutorHand, SavedOutputsReadBack) {
  HandCase c = hand_ring(2, tiny_workload(40, 4, 2, 16, 2, true));
  LayerRunResult r = run_checked(c);
  const std::string dir = (std::filesystem::temp_directory_path() / "wallfacer_save_test").string();
  runtime::save_outputs(dir, r.outputs, false);
  auto same = [&](const char* file, const runtime::Tensor<double>& want, std::vector<int64_t> shape) {
    runtime::Tensor<double> got = runtime::read_npy_expecting(dir + "/" + file, shape);
    for (size_t i = 0; i < got.data.size(); ++i)
      ASSERT_EQ(got.data[i], double(float(want.data[i]))) << file << " " << i;
  };
  same("o.npy", r.outputs.o, {2, 40, 4, 16});
  same("lse.npy", r.outputs.lse, {2, 4, 40});
  same("dq.npy", r.outputs.dq, {2, 40, 4, 16});
  same("dk.npy", r.outputs.dk, {2, 40, 2, 16});
  same("dv.npy", r.outputs.dv, {2, 40, 2, 16});
}

// ---- broken schedules -------------------------------------------------------------------------

TEST(ExecutorErrors, ReadingTokensTheBufferDoesNotHold) {
  HandCase c = hand_ring(2, tiny_workload(32, 2, 2, 16, 1, false));
  // Rank 1's first forward block reads keys of rank 0, which its own K,V buffer does not hold.
  for (Op& op : c.schedule.ranks[1].ops)
    if (op.kind == OpKind::AttnFwd) {
      op.tok[1] = c.schedule.tokens.intern(contiguous_part(32, 2, 0));
      break;
    }
  try {
    run_checked(c);
    FAIL() << "expected a ScheduleError";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("holds"), std::string::npos) << e.what();
  }
}

TEST(ExecutorErrors, DeadlockIsReportedNotHung) {
  Workload w = tiny_workload(16, 2, 2, 16, 1, false);
  HandCase c;
  c.plan = bare_plan(2, w);
  c.schedule.dims.seq = 16, c.schedule.dims.heads = 2, c.schedule.dims.kv_heads = 2, c.schedule.dims.head_dim = 16;
  for (int r = 0; r < 2; ++r) {
    HandBuilder b(c.schedule, r, 1);
    int32_t kv = b.buffer("kv", field_bit(Field::K) | field_bit(Field::V), {0, 2}, 8);
    b.recv(kv, {{0, 8}}, field_bit(Field::K), {0, 2}, 1 - r, 5);  // both receive, nobody sends
    c.schedule.ranks.push_back(b.finish());
  }
  auto inputs = runtime::seeded_inputs(w, 1, false);
  try {
    runtime::run_local_ranks(2, [&](runtime::Backend& backend) {
      backend.set_groups(c.plan.groups);
      runtime::GlobalInputs global{&inputs.q, &inputs.k, &inputs.v, &inputs.dO};
      runtime::execute_program<float>(c.schedule, c.schedule.ranks[size_t(backend.rank())], c.plan, global, backend);
    });
    FAIL() << "expected a deadlock report";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("receive from rank"), std::string::npos) << e.what();
  }
}

TEST(ExecutorErrors, MessageSizeMismatch) {
  HandCase c = hand_ring(2, tiny_workload(32, 2, 2, 16, 1, false));
  for (Op& op : c.schedule.ranks[0].ops)
    if (op.kind == OpKind::Recv) {
      op.tok[0] = c.schedule.tokens.intern({{16, 24}});  // half of what rank 1 sends
      break;
    }
  EXPECT_THROW(run_checked(c), ScheduleError);
}

TEST(ExecutorErrors, MissingOutputIsDetected) {
  HandCase c = hand_ring(2, tiny_workload(32, 2, 2, 16, 1, false));
  c.schedule.ranks[1].outputs.erase(c.schedule.ranks[1].outputs.begin());  // rank 1's O
  try {
    run_checked(c);
    FAIL() << "expected a ScheduleError";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("produced by no rank"), std::string::npos) << e.what();
  }
}

TEST(ExecutorErrors, RankCountDiffersFromThePlan) {
  HandCase c = hand_ring(2, tiny_workload(32, 2, 2, 16, 1, false));
  auto inputs = runtime::seeded_inputs(c.plan.workload, 1, false);
  EXPECT_THROW(runtime::run_local_ranks(
                   3, [&](runtime::Backend& backend) { runtime::run_layer(backend, c.plan, c.schedule, inputs, {}); }),
               InputError);
}

}  // namespace
}  // namespace wallfacer::testing
