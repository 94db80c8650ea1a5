// The trainer's step is its rank's whole-step program, op for op: one training step on every rank
// starts every op of the rank's `--scope step` program exactly once (attention ops, transfers,
// gradient buckets, the Optimizer op and the ZeRO gathers included), and runs the {m, n, k} of
// every Gemm op, in program order, for every strategy, checkpointing mode and ZeRO stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <numeric>

#include <fmt/format.h>

#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/train/layers.hpp>
#include "train/train_fixtures.hpp"

namespace wallfacer::test {
namespace {

using Shape = std::array<int64_t, 3>;

// Built here from the plan, independently of the trainer.
RankProgram reference_program(const Plan& attention_plan, int rank) {
  Plan plan = attention_plan;
  plan.scope = Scope::Step;
  return StepBuilder(plan).build({rank}).ranks.at(0);
}

std::vector<Shape> gemms_of(const RankProgram& program) {
  std::vector<Shape> shapes;
  for (const Op& op : program.ops)
    if (op.kind == OpKind::Gemm) shapes.push_back({op.gemm[0], op.gemm[1], op.gemm[2]});
  return shapes;
}

struct RankRun {
  std::vector<int32_t> executed;
  std::vector<Shape> gemms;
  size_t program_ops = 0;
};

std::vector<RankRun> one_step(const Plan& plan) {
  std::vector<RankRun> runs(size_t(plan.num_ranks()));
  on_every_rank<float>(plan, {}, [&](train::Trainer<float>& trainer, runtime::Backend& backend) {
    train::GemmTrace trace;  // this rank's thread
    trainer.step(0, pseudo_text_batches(plan.workload.seq));
    RankRun& run = runs[size_t(backend.rank())];
    run.executed = trainer.executed_ops();
    run.gemms = trace.calls();
    run.program_ops = trainer.program().ops.size();
  });
  return runs;
}

void expect_program_executed(const Plan& plan) {
  const std::vector<RankRun> runs = one_step(plan);
  for (int r = 0; r < plan.num_ranks(); ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    const RankProgram program = reference_program(plan, r);
    const RankRun& run = runs[size_t(r)];
    ASSERT_EQ(run.program_ops, program.ops.size());
    std::vector<int32_t> sorted = run.executed, every(program.ops.size());
    std::sort(sorted.begin(), sorted.end());
    std::iota(every.begin(), every.end(), 0);
    EXPECT_EQ(sorted, every);  // every op once, none twice, nothing else
    const std::vector<Shape> want = gemms_of(program);
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(run.gemms, want);  // the compute stream runs the Gemm ops in program order
    // Program order is kept on each stream: the ops of one stream started in their order.
    for (int s = 0; s < kNumStreams; ++s) {
      std::vector<int32_t> stream;
      for (int32_t op : run.executed)
        if (int(program.ops[size_t(op)].stream) == s) stream.push_back(op);
      EXPECT_TRUE(std::is_sorted(stream.begin(), stream.end())) << to_string(Stream(s));
    }
  }
}

TEST(StepProgram, EveryRankRunsItsProgramOpForOp) {
  struct Case {
    StrategyKind kind;
    int ranks, dp;
  };
  for (const Case c :
       {Case{StrategyKind::Ring, 2, 1}, Case{StrategyKind::Zigzag, 4, 1}, Case{StrategyKind::Ulysses, 2, 1},
        Case{StrategyKind::Usp, 4, 1}, Case{StrategyKind::WallFacer, 4, 1}, Case{StrategyKind::Lss, 4, 2}})
    for (Checkpointing mode : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full})
      for (int zero : {0, 2}) {
        Workload w = tiny_decoder(32, 2, mode != Checkpointing::Selective);
        w.checkpointing = mode;
        w.zero_stage = zero;
        StrategyParams p;
        p.sequence_parallel = c.ranks / c.dp;
        p.data_parallel = c.dp;
        bool found = false;
        for (const StrategyParams& q : enumerate_params(c.kind, w, c.ranks))
          if (!found && q.sequence_parallel == p.sequence_parallel && q.data_parallel == c.dp &&
              q.tensor_parallel == 1 && q.pipeline_parallel == 1 && check_feasible(c.kind, q, w, c.ranks).ok) {
            p = q;
            found = true;
          }
        ASSERT_TRUE(found) << to_string(c.kind);
        SCOPED_TRACE(
            fmt::format("{} on {} ranks (D={}), {}, ZeRO {}", to_string(c.kind), c.ranks, c.dp, to_string(mode), zero));
        expect_program_executed(tiny_plan(c.kind, p, w));
      }
}

TEST(StepProgram, OneRankRunsItsProgramToo) {
  expect_program_executed(tiny_plan(StrategyKind::Ring, {}, tiny_decoder(24, 2, true)));
}

}  // namespace
}  // namespace wallfacer::test
