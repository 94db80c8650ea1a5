// Interleaved 1F1B (virtual stages, docs/step.md "Interleaved 1F1B"): the checker proves the step
// of every strategy with v chunks per rank (every layer of every micro-batch once, every stage
// message with its receive, the last stage feeding the first, no deadlock), the products still add
// up to 6 x tokens x weights, each of the Pp v - 1 chunk boundaries carries every token once each
// way, and each rank runs its chunks in the order of Megatron-LM's interleaved schedule.
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

Workload interleaved_workload(int layers, int microbatches) {
  Workload w = testing::small_workload(64, 8, 4, true, 4, 4);
  w.layers = layers;
  w.ffn = 48;
  w.vocab = 64;
  w.grad_bucket_MiB = 1;
  w.microbatches = microbatches;
  w.batch = 4 * microbatches;  // micro-batches of up to four sequences, one per data-parallel rank
  return w;
}

TEST(InterleavedPipeline, EveryStrategyIsProvenAndCountsItsWork) {
  for (const auto& [Pp, v, M] : std::vector<std::tuple<int, int, int>>{{2, 2, 2}, {2, 2, 6}, {2, 4, 4}, {4, 2, 8}}) {
    const Workload w = interleaved_workload(8, M);
    const int ranks = 4 * Pp;
    int plans = 0;
    std::set<StrategyKind> kinds;
    for (StrategyKind kind : all_strategies())
      for (StrategyParams params : enumerate_params(kind, w, ranks / Pp)) {
        params.pipeline_parallel = Pp;
        params.virtual_stages = v;
        if (!check_feasible(kind, params, w, ranks).ok) continue;
        const Plan plan = testing::hand_plan(kind, params, w);
        SCOPED_TRACE(fmt::format("{} {} Pp={} v={} M={}", to_string(kind), plan.groups.front().name, Pp, v, M));
        const Schedule step = StepBuilder(plan).build();
        const CheckReport report = check_schedule(plan, step);
        EXPECT_TRUE(report.ok) << (report.errors.empty() ? "" : report.errors.front());
        EXPECT_EQ(report.layers, w.layers * M);
        double gemm = 0;
        int64_t stage_bytes = 0;
        for (const RankProgram& p : step.ranks)
          for (const Op& op : p.ops) {
            if (op.kind == OpKind::Gemm) gemm += op.flops;
            if (op.kind == OpKind::Send && op.label == StepOp::StageTransfer) stage_bytes += op.bytes;
          }
        const double tokens = double(w.seq) * w.batch;
        const double weights = w.layers * (double(w.attention_parameters_per_layer()) + 3.0 * w.hidden * w.ffn) +
                               double(w.vocab) * w.hidden;
        EXPECT_NEAR(gemm, 6.0 * tokens * weights, 1e-9 * gemm);
        // Pp v - 1 chunk boundaries, each crossed by every token forward and back.
        EXPECT_EQ(stage_bytes, int64_t(2 * (Pp * v - 1) * tokens * w.hidden * 2));
        kinds.insert(kind);
        ++plans;
      }
    // The strategies without point-to-point messages of their own (and every one at S = 1).
    for (StrategyKind kind : {StrategyKind::Ring, StrategyKind::Ulysses, StrategyKind::AllGather, StrategyKind::Lss})
      EXPECT_TRUE(kinds.count(kind)) << to_string(kind) << " Pp=" << Pp << " v=" << v;
    EXPECT_GT(plans, 0);
  }
}

// What a rank's program does, item by item: "F<j>c<k>" for the forward of micro-batch j through
// the rank's chunk k, "B<j>c<k>" for its backward, read off the attention blocks' buffer names
// ("<name>.L<model layer>.M<j>").
std::vector<std::string> items_of(const RankProgram& p, int layers_per_chunk, int Pp) {
  std::vector<std::string> items;
  for (const Op& op : p.ops) {
    if ((op.kind != OpKind::AttnFwd && op.kind != OpKind::AttnBwd) || (op.flags & kOpRecompute)) continue;
    const std::string& name = p.buffers[size_t(op.buf[0])].name;
    const size_t at_l = name.rfind(".L"), at_m = name.rfind(".M");
    const int layer = std::stoi(name.substr(at_l + 2, at_m - at_l - 2));
    const int chunk = layer / layers_per_chunk / Pp;
    const std::string item =
        fmt::format("{}{}c{}", op.kind == OpKind::AttnFwd ? "F" : "B", name.substr(at_m + 2), chunk);
    if (items.empty() || items.back() != item) items.push_back(item);
  }
  return items;
}

// Megatron-LM's forward_backward_pipelining_with_interleaving, written out: rank p runs
// min(2 (Pp - p - 1) + (v - 1) Pp, v M) chunk forwards, then one forward and one backward in
// turn, then the remaining backwards. Its k-th forward runs chunk (k / Pp) mod v on micro-batch
// (k / (Pp v)) Pp + k mod Pp; the backwards walk the chunks from the last.
std::vector<std::string> interleaved_order(int p, int Pp, int v, int M) {
  const int total = v * M, warmup = std::min(2 * (Pp - p - 1) + (v - 1) * Pp, total);
  auto item = [&](char kind, int k) {
    int chunk = (k / Pp) % v;
    if (kind == 'B') chunk = v - 1 - chunk;
    return fmt::format("{}{}c{}", kind, (k / (Pp * v)) * Pp + k % Pp, chunk);
  };
  std::vector<std::string> items;
  int forward = 0, backward = 0;
  for (; forward < warmup; ++forward)
    items.push_back(item('F', forward));
  while (backward < total) {
    if (forward < total) items.push_back(item('F', forward++));
    items.push_back(item('B', backward++));
  }
  return items;
}

TEST(InterleavedPipeline, RanksRunMegatronsInterleavedOrder) {
  for (const auto& [Pp, v, M] : std::vector<std::tuple<int, int, int>>{{2, 2, 2}, {2, 2, 6}, {4, 2, 4}, {2, 4, 4}}) {
    Workload w = interleaved_workload(8, M);
    w.batch = M;
    const Plan plan = testing::hand_plan(StrategyKind::Ulysses,
                                         {.sequence_parallel = 2, .pipeline_parallel = Pp, .virtual_stages = v}, w);
    const Schedule step = StepBuilder(plan).build();
    const CheckReport report = check_schedule(plan, step);
    ASSERT_TRUE(report.ok) << (report.errors.empty() ? "" : report.errors.front());
    for (const RankProgram& p : step.ranks)
      EXPECT_EQ(items_of(p, w.layers / (Pp * v), Pp), interleaved_order(p.rank / 2, Pp, v, M))
          << "rank " << p.rank << ", Pp = " << Pp << ", v = " << v << ", M = " << M;
  }
}

// Chunks cut the same work into more pieces: per rank column and micro-batch, 2 (Pp v - 1) stage
// messages instead of 2 (Pp - 1).
TEST(InterleavedPipeline, ChunkBoundariesAddStageMessages) {
  const Workload w = interleaved_workload(8, 4);
  auto messages = [&](int Pp, int v) {
    const Plan plan = testing::hand_plan(StrategyKind::Ulysses,
                                         {.sequence_parallel = 2, .pipeline_parallel = Pp, .virtual_stages = v}, w);
    int n = 0;
    for (const RankProgram& p : StepBuilder(plan).build().ranks)
      for (const Op& op : p.ops)
        n += op.label == StepOp::StageTransfer && op.kind == OpKind::Send;
    return n;
  };
  for (const auto& [Pp, v] : std::vector<std::pair<int, int>>{{2, 1}, {2, 2}, {2, 4}, {4, 2}})
    EXPECT_EQ(messages(Pp, v), 2 * 2 * (Pp * v - 1) * w.microbatches) << "Pp = " << Pp << ", v = " << v;
}

// Gradients still synchronise once per step (ZeRO 0/1) or once per micro-batch (ZeRO 2/3),
// whatever the chunks.
TEST(InterleavedPipeline, GradientsSynchroniseAsWithoutChunks) {
  for (int zero : {1, 2}) {
    Workload w = interleaved_workload(8, 4);
    w.zero_stage = zero;
    auto elements = [&](int v) {
      const Plan plan = testing::hand_plan(StrategyKind::Ulysses,
                                           {.sequence_parallel = 2, .pipeline_parallel = 2, .virtual_stages = v}, w);
      int64_t n = 0;
      for (const RankProgram& p : StepBuilder(plan).build().ranks)
        for (const Op& op : p.ops)
          if (op.label == StepOp::GradSync) n += p.collectives[size_t(op.coll)].elements;
      return n;
    };
    EXPECT_EQ(elements(2), elements(1)) << "ZeRO " << zero;
  }
}

TEST(InterleavedPipeline, RulesNameWhatDoesNotDivide) {
  Workload w = interleaved_workload(8, 4);
  const Feasibility layers =
      check_feasible(StrategyKind::Ring, {.sequence_parallel = 2, .pipeline_parallel = 2, .virtual_stages = 3}, w, 4);
  EXPECT_FALSE(layers.ok);
  EXPECT_NE(layers.reason.find("layers (8) not divisible by 2 pipeline stages x 3 virtual stages"), std::string::npos);
  w.microbatches = 2;
  const Feasibility micro =
      check_feasible(StrategyKind::Ring, {.sequence_parallel = 1, .pipeline_parallel = 4, .virtual_stages = 2}, w, 4);
  EXPECT_FALSE(micro.ok);
  EXPECT_NE(micro.reason.find("2 micro-batches not divisible by the 4 pipeline stages"), std::string::npos);
  const Feasibility alone = check_feasible(StrategyKind::Ring, {.sequence_parallel = 4, .virtual_stages = 2}, w, 4);
  EXPECT_FALSE(alone.ok);
  EXPECT_NE(alone.reason.find("need pipeline parallelism"), std::string::npos);
  // Ring-type strategies' own messages would wait on the stage messages (docs/step.md).
  w.microbatches = 4;
  const Feasibility ring =
      check_feasible(StrategyKind::Ring, {.sequence_parallel = 2, .pipeline_parallel = 2, .virtual_stages = 2}, w, 4);
  EXPECT_FALSE(ring.ok);
  EXPECT_NE(ring.reason.find("point-to-point messages"), std::string::npos);
  EXPECT_TRUE(check_feasible(StrategyKind::Ring,
                             {.sequence_parallel = 1, .data_parallel = 2, .pipeline_parallel = 2, .virtual_stages = 2},
                             w, 4)
                  .ok);
}

}  // namespace
}  // namespace wallfacer
