// The executor's rank-local path (RankSession: forward, then backward with dO bound later) gives
// exactly the O, lse, dQ, dK and dV of the global path (run_layer) for every strategy and
// parameter set on 4 ranks, and each rank's own tokens cover the sequence once.
#include <gtest/gtest.h>

#include <mutex>

#include <fmt/format.h>

#include <wallfacer/runtime/layer_runner.hpp>
#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "train/train_fixtures.hpp"

namespace wallfacer::test {
namespace {

using runtime::Tensor;

runtime::LayerOutputs run_sessions(const Plan& plan, const Schedule& schedule, const runtime::LayerInputs& in,
                                   std::vector<int>& token_owners) {
  const Workload& w = plan.workload;
  runtime::LayerOutputs out;
  out.o = Tensor<double>(runtime::query_shape(w));
  out.dq = Tensor<double>(runtime::query_shape(w));
  out.dk = Tensor<double>(runtime::kv_shape(w));
  out.dv = Tensor<double>(runtime::kv_shape(w));
  out.lse = Tensor<double>({w.batch, w.heads, w.seq});
  token_owners.assign(size_t(w.batch * w.seq), 0);
  std::mutex owners;
  runtime::run_local_ranks(plan.num_ranks(), [&](runtime::Backend& backend) {
    backend.set_groups(plan.groups);
    const RankProgram* program = nullptr;
    for (const RankProgram& p : schedule.ranks)
      if (p.rank == backend.rank()) program = &p;
    const train::OwnTokens own = train::own_tokens(schedule, *program);
    {
      std::lock_guard<std::mutex> lock(owners);
      for (int b = own.batch_begin; b < own.batch_end; ++b)
        for (int64_t t : own.positions)
          ++token_owners[size_t(b * w.seq + t)];
    }
    runtime::RankSession session(schedule, *program, plan, backend, runtime::ElemType::F32);
    auto global = [&](const Tensor<double>& t) {
      return [&t](Field, int b, int64_t tok, int h, int d) { return t[t.offset({b, tok, h, d})]; };
    };
    auto sink = [&](Field f, int b, int64_t tok, int h, int d, double v) {
      if (f == Field::Lse) {
        out.lse[out.lse.offset({b, h, tok})] = v;
        return;
      }
      Tensor<double>& t = f == Field::O ? out.o : f == Field::dQ ? out.dq : f == Field::dK ? out.dk : out.dv;
      t[t.offset({b, tok, h, d})] = v;
    };
    session.forward(
        [&](Field f, int b, int64_t tok, int h, int d) {
          const Tensor<double>& t = f == Field::Q ? in.q : f == Field::K ? in.k : in.v;
          return t[t.offset({b, tok, h, d})];
        },
        sink);
    session.backward(global(in.dO), sink);
  });
  return out;
}

TEST(RankSession, EqualsTheGlobalPathForEveryStrategy) {
  Workload w = tiny_decoder(48, 2, false);  // 4 query heads, 2 kv heads (GQA), causal
  w.heads = 8;
  w.head_dim = 4;
  int cases = 0;
  for (StrategyKind kind : all_strategies())
    for (const StrategyParams& p : enumerate_params(kind, w, 4)) {
      if (!check_feasible(kind, p, w, 4).ok || p.tensor_parallel != 1 || p.pipeline_parallel != 1) continue;
      SCOPED_TRACE(fmt::format("{} S={} D={} C={} u={} w={}", to_string(kind), p.sequence_parallel, p.data_parallel,
                               team_size(p), ulysses_degree(p), window_size(p)));
      const Plan plan = tiny_plan(kind, p, w);
      const Schedule schedule = build_schedule(plan);
      const runtime::LayerInputs in = runtime::seeded_inputs(w, 7, false);
      const runtime::LayerRunResult global = runtime::run_layer_local(plan, schedule, in, {});
      std::vector<int> owners;
      const runtime::LayerOutputs local = run_sessions(plan, schedule, in, owners);
      for (int count : owners)
        ASSERT_EQ(count, 1);
      EXPECT_EQ(local.o.data, global.outputs.o.data);
      EXPECT_EQ(local.lse.data, global.outputs.lse.data);
      EXPECT_EQ(local.dq.data, global.outputs.dq.data);
      EXPECT_EQ(local.dk.data, global.outputs.dk.data);
      EXPECT_EQ(local.dv.data, global.outputs.dv.data);
      ++cases;
    }
  EXPECT_GE(cases, 12);
}

}  // namespace
}  // namespace wallfacer::test
