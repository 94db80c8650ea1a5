// Pipeline parallelism around every strategy: the checker proves the lifted step (each stage's
// layers once per micro-batch, every stage message with its receive, no deadlock), the stages'
// products add up to 6 x tokens x weights, each stage runs its micro-batches in 1F1B order, and
// gradients synchronise once per step (ZeRO 0/1) or once per micro-batch (ZeRO 2/3).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <wallfacer/check/checker.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"
#include "tensor_parallel.hpp"

namespace wallfacer {
namespace {

Workload pp_workload(int microbatches) {
  Workload w = testing::small_workload(64, 8, 4, true, 4, 4);
  w.layers = 4;
  w.ffn = 48;
  w.vocab = 64;
  w.grad_bucket_MiB = 1;
  w.microbatches = microbatches;
  return w;
}

// The plans of every strategy with Pp stages and T tensor slices on `ranks` ranks.
std::vector<Plan> pipeline_plans(const Workload& w, int Pp, int T, int ranks) {
  std::vector<Plan> plans;
  for (StrategyKind kind : all_strategies())
    for (StrategyParams params : enumerate_params(kind, detail::slice_workload(w, T), ranks / (T * Pp))) {
      params.tensor_parallel = T;
      params.pipeline_parallel = Pp;
      if (check_feasible(kind, params, w, ranks).ok) plans.push_back(testing::hand_plan(kind, params, w));
    }
  return plans;
}

TEST(PipelineParallel, EveryStrategyIsProvenAndCountsItsWork) {
  for (const auto& [Pp, T, M] : std::vector<std::tuple<int, int, int>>{{2, 1, 2}, {2, 2, 4}, {4, 1, 1}}) {
    const Workload w = pp_workload(M);
    const int ranks = 4 * T * Pp;
    const std::vector<Plan> plans = pipeline_plans(w, Pp, T, ranks);
    std::set<StrategyKind> kinds;
    for (const Plan& plan : plans)
      kinds.insert(plan.strategy);
    EXPECT_EQ(kinds.size(), all_strategies().size()) << "Pp=" << Pp << " T=" << T;
    for (const Plan& plan : plans) {
      SCOPED_TRACE(fmt::format("{} {} Pp={} T={} M={}", to_string(plan.strategy), plan.groups.front().name, Pp, T, M));
      const Schedule step = StepBuilder(plan).build();
      const CheckReport report = check_schedule(plan, step);
      EXPECT_TRUE(report.ok) << (report.errors.empty() ? "" : report.errors.front());
      EXPECT_EQ(report.layers, w.layers * M);  // every layer of every micro-batch proven on its own
      double gemm = 0;
      int64_t stage_bytes = 0;
      for (const RankProgram& p : step.ranks)
        for (const Op& op : p.ops) {
          if (op.kind == OpKind::Gemm) gemm += op.flops;
          if (op.kind == OpKind::Send && op.label == StepOp::StageTransfer) stage_bytes += op.bytes;
        }
      const double tokens = double(w.seq) * w.batch;
      const double weights =
          w.layers * (double(w.attention_parameters_per_layer()) + 3.0 * w.hidden * w.ffn) + double(w.vocab) * w.hidden;
      EXPECT_NEAR(gemm, 6.0 * tokens * weights, 1e-9 * gemm);
      // Each of the Pp - 1 stage boundaries carries every token's activations forward and their
      // gradients back, once per data-parallel replica's share: 2 x tokens x hidden x bytes.
      EXPECT_EQ(stage_bytes, int64_t(2 * (Pp - 1) * tokens * w.hidden * 2));
    }
  }
}

// What a rank's program does, item by item: "F<j>" for micro-batch j's forward, "B<j>" for its
// backward, read off the micro-batch suffix of the attention blocks' buffers.
std::vector<std::string> items_of(const RankProgram& p) {
  std::vector<std::string> items;
  for (const Op& op : p.ops) {
    if ((op.kind != OpKind::AttnFwd && op.kind != OpKind::AttnBwd) || (op.flags & kOpRecompute)) continue;
    const std::string& name = p.buffers[size_t(op.buf[0])].name;
    const std::string item = (op.kind == OpKind::AttnFwd ? "F" : "B") + name.substr(name.rfind(".M") + 2);
    if (items.empty() || items.back() != item) items.push_back(item);
  }
  return items;
}

// 1F1B as Megatron schedules it: stage p runs min(Pp - p - 1, M) forwards, then alternates one
// forward and one backward, then drains the remaining backwards.
std::vector<std::string> one_forward_one_backward(int p, int Pp, int M) {
  const int warmup = std::min(Pp - p - 1, M);
  std::vector<std::string> items;
  int forward = 0, backward = 0;
  for (; forward < warmup; ++forward)
    items.push_back(fmt::format("F{}", forward));
  while (backward < M) {
    if (forward < M) items.push_back(fmt::format("F{}", forward++));
    items.push_back(fmt::format("B{}", backward++));
  }
  return items;
}

TEST(PipelineParallel, StagesRunOneForwardOneBackward) {
  for (int M : {2, 6}) {
    Workload w = pp_workload(M);
    w.batch = M;
    const Plan plan = testing::hand_plan(StrategyKind::Ring, {.sequence_parallel = 2, .pipeline_parallel = 4}, w);
    const Schedule step = StepBuilder(plan).build();
    ASSERT_TRUE(check_schedule(plan, step).ok);
    for (const RankProgram& p : step.ranks)
      EXPECT_EQ(items_of(p), one_forward_one_backward(p.rank / 2, 4, M)) << "rank " << p.rank << ", M = " << M;
  }
}

// Frameworks post a receive where their program issues it (Megatron-LM's and PyTorch's 1F1B
// schedules, ring attention's next K,V before the current block): every receive after the rank's
// first compute waits for the compute op just before it in the rank's order, stage messages and
// the strategy's ring alike, and so never waits beside that compute.
TEST(PipelineParallel, ReceivesArePostedAfterTheComputeBeforeThem) {
  for (const auto& [kind, M, v] : std::vector<std::tuple<StrategyKind, int, int>>{
           {StrategyKind::Ring, 1, 1}, {StrategyKind::Ring, 4, 1}, {StrategyKind::Ulysses, 4, 2}}) {
    SCOPED_TRACE(fmt::format("{}, M = {}, v = {}", to_string(kind), M, v));
    Workload w = pp_workload(M);
    w.batch = M;
    const Plan plan =
        testing::hand_plan(kind, {.sequence_parallel = 2, .pipeline_parallel = 2, .virtual_stages = v}, w);
    const Schedule step = StepBuilder(plan).build();
    ASSERT_TRUE(check_schedule(plan, step).ok);
    int stage_receives = 0, ring_receives = 0;
    for (const RankProgram& p : step.ranks) {
      int32_t last_compute = -1;
      for (size_t i = 0; i < p.ops.size(); ++i) {
        const Op& op = p.ops[i];
        if (op.kind == OpKind::Recv && last_compute >= 0) {
          ++(op.label == StepOp::StageTransfer ? stage_receives : ring_receives);
          EXPECT_NE(std::find(p.deps_begin(op), p.deps_end(op), last_compute), p.deps_end(op))
              << "rank " << p.rank << " op " << i;
        }
        if (op.stream == Stream::Compute) last_compute = int32_t(i);
      }
    }
    // Each stage boundary carries the activations and the gradients of every micro-batch; the
    // ring passes K,V (and dK,dV) in every layer.
    EXPECT_GE(stage_receives, 2 * M);
    if (kind == StrategyKind::Ring) EXPECT_GE(ring_receives, 2 * w.layers * M);
  }
}

// Elements of every gradient synchronisation of rank 0, whichever group.
int64_t synchronised_elements(const Plan& plan) {
  const RankProgram p = StepBuilder(plan).build({0}).ranks.front();
  int64_t elements = 0;
  for (const Op& op : p.ops)
    if (op.label == StepOp::GradSync) elements += p.collectives[size_t(op.coll)].elements;
  return elements;
}

TEST(PipelineParallel, GradientsSynchroniseOncePerStepOrPerMicroBatch) {
  for (int zero : {0, 1, 2, 3}) {
    Workload one = pp_workload(1), four = pp_workload(4);
    one.zero_stage = four.zero_stage = zero;
    const StrategyParams params{.sequence_parallel = 2, .pipeline_parallel = 2};
    const int64_t once = synchronised_elements(testing::hand_plan(StrategyKind::Ulysses, params, one));
    const int64_t per_micro = synchronised_elements(testing::hand_plan(StrategyKind::Ulysses, params, four));
    ASSERT_GT(once, 0);
    EXPECT_EQ(per_micro, zero >= 2 ? 4 * once : once) << "ZeRO " << zero;
  }
}

TEST(PipelineParallel, StagesCopyTheirGroupsAndJoinThemInPipelineGroups) {
  const StrategyParams params{.sequence_parallel = 2, .data_parallel = 2, .tensor_parallel = 2, .pipeline_parallel = 3};
  const std::vector<CommGroup> stage =
      make_groups(StrategyKind::Ring, {.sequence_parallel = 2, .data_parallel = 2, .tensor_parallel = 2}, 8);
  const std::vector<CommGroup> all = make_groups(StrategyKind::Ring, params, 24);
  ASSERT_EQ(all.size(), 3 * stage.size() + 8);
  for (int p = 0; p < 3; ++p)
    for (size_t g = 0; g < stage.size(); ++g) {
      const CommGroup& lifted = all[size_t(p) * stage.size() + g];
      EXPECT_EQ(lifted.name, fmt::format("p{}.{}", p, stage[g].name));
      for (size_t i = 0; i < lifted.ranks.size(); ++i)
        EXPECT_EQ(lifted.ranks[i], stage[g].ranks[i] + 8 * p);
    }
  for (int r = 0; r < 8; ++r) {
    const CommGroup& pp = all[3 * stage.size() + size_t(r)];
    EXPECT_EQ(pp.kind, GroupKind::Pipeline);
    EXPECT_EQ(pp.ranks, (std::vector<int>{r, r + 8, r + 16}));
  }
}

TEST(PipelineParallel, RulesNameWhatDoesNotDivide) {
  Workload w = pp_workload(1);
  w.layers = 6;
  const Feasibility layers = check_feasible(StrategyKind::Ring, {.sequence_parallel = 2, .pipeline_parallel = 4}, w, 8);
  EXPECT_FALSE(layers.ok);
  EXPECT_NE(layers.reason.find("layers (6) not divisible by pipeline parallel degree 4"), std::string::npos);
  w = pp_workload(4);
  const Feasibility batch =
      check_feasible(StrategyKind::Ring, {.sequence_parallel = 1, .data_parallel = 2, .pipeline_parallel = 2}, w, 4);
  EXPECT_FALSE(batch.ok);
  EXPECT_NE(batch.reason.find("batch (4) not divisible by data parallel degree 2 x 4 micro-batches"),
            std::string::npos);
}

}  // namespace
}  // namespace wallfacer
