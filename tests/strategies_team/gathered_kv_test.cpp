// All-gather K/V (docs/algorithms.md §5) and LSS (§9.2): checked schedules over S = 1..8 with
// uneven sizes where the layout allows, exact FLOPs, closed-form volumes, LSS's two-stage
// gradient averaging and its groups.
#include <gtest/gtest.h>

#include "strategies_team/team_plans.hpp"

namespace wallfacer {
namespace {

using namespace team_testing;

void expect_checked_with_exact_flops(StrategyKind kind, const StrategyParams& params, const Workload& w) {
  Schedule schedule;
  EXPECT_EQ(check_errors(plan_of(kind, params, w), &schedule), "");
  double fwd = 0, bwd = 0;
  for (const RankProgram& p : schedule.ranks)
    fwd += traffic(p).flops[0], bwd += traffic(p).flops[1];
  EXPECT_DOUBLE_EQ(fwd, closed_form_flops(w, Phase::Forward));
  EXPECT_DOUBLE_EQ(bwd, closed_form_flops(w, Phase::Backward));
}

TEST(AllGatherKv, SchedulesPassTheChecker) {
  for (int S = 1; S <= 8; ++S)
    for (bool causal : {true, false})
      for (int kv_heads : {4, 1}) {
        SCOPED_TRACE(testing::Message() << "S=" << S << " causal=" << causal << " kv=" << kv_heads);
        // Zigzag needs 2S | N; the full mask takes uneven contiguous shards.
        const Workload w = workload(causal ? 6 * S : 5 * S + 3, 4, kv_heads, causal);
        expect_checked_with_exact_flops(StrategyKind::AllGather, params_of(StrategyKind::AllGather, S), w);
      }
  expect_checked_with_exact_flops(StrategyKind::AllGather, params_of(StrategyKind::AllGather, 4, 2),
                                  workload(32, 4, 2, true, 2));
}

TEST(AllGatherKv, ZigzagNeedsTwoChunksPerRank) {
  const Feasibility f =
      check_feasible(StrategyKind::AllGather, params_of(StrategyKind::AllGather, 4), workload(20, 4, 4, true), 4);
  EXPECT_FALSE(f.ok);
  EXPECT_NE(f.reason.find("divisible by 2 x 4"), std::string::npos) << f.reason;
  EXPECT_TRUE(
      check_feasible(StrategyKind::AllGather, params_of(StrategyKind::AllGather, 4), workload(21, 4, 4, false), 4).ok);
  for (StrategyKind kind : {StrategyKind::AllGather, StrategyKind::Lss}) {
    // A team size and placement belong to WallFacer; these strategies take none.
    const Feasibility p = check_feasible(kind, params_of(4, 1, 1, Placement::P2PIntra), workload(64, 4, 4, true), 4);
    EXPECT_FALSE(p.ok);
    EXPECT_NE(p.reason.find("parameters of another strategy"), std::string::npos) << p.reason;
  }
}

// §5: (S - 1) 2 B n H_kv s forward, in two all-gathers of one chunk each (rank order and
// reverse rank order, so each gathered half is contiguous); the backward re-gathers and
// reduce-scatters fp32 partials.
TEST(AllGatherKv, VolumesMatchTheClosedForms) {
  for (int S : {2, 4, 8}) {
    const int B = 2, h = 8, hkv = 2, d = 4, s = 2;
    const int64_t n = 8, N = n * S;
    const Schedule schedule = ScheduleBuilder(plan_of(StrategyKind::AllGather, params_of(StrategyKind::AllGather, S),
                                                      workload(N, h, hkv, true, B, d)))
                                  .build();
    for (const RankProgram& p : schedule.ranks) {
      const Traffic t = traffic(p);
      EXPECT_EQ(t.all_gather[0], int64_t(S - 1) * 2 * B * n * hkv * d * s);
      EXPECT_EQ(t.all_gather[1], t.all_gather[0]);
      EXPECT_EQ(t.reduce_scatter[1], int64_t(S - 1) * 2 * B * n * hkv * d * 4);
      EXPECT_EQ(t.p2p[0] + t.p2p[1] + t.reduce_scatter[0], 0);
      // No cross-step merge: the first chunk attends to one gathered half, the second to both;
      // the last rank's two chunks touch and form one query range.
      int blocks = 0;
      for (const Op& op : p.ops)
        blocks += op.kind == OpKind::AttnFwd;
      EXPECT_EQ(blocks, p.rank == S - 1 ? 2 : 3);
    }
  }
}

TEST(Lss, SchedulesPassTheChecker) {
  for (int S = 1; S <= 8; ++S)
    for (int D : {1, 2})
      for (bool causal : {true, false}) {
        SCOPED_TRACE(testing::Message() << "S=" << S << " D=" << D << " causal=" << causal);
        const Workload w = workload(7 * S + 5, 4, 2, causal, 2);  // contiguous segments, uneven
        expect_checked_with_exact_flops(StrategyKind::Lss, params_of(StrategyKind::Lss, S, D), w);
      }
}

TEST(Lss, GroupsAreSequenceThenDataWithoutWorld) {
  const std::vector<CommGroup> groups = make_groups(StrategyKind::Lss, params_of(StrategyKind::Lss, 3, 2), 6);
  ASSERT_EQ(groups.size(), 2u + 3u);
  EXPECT_EQ(groups[0].kind, GroupKind::Sequence);
  EXPECT_EQ(groups[1].ranks, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(groups[2].kind, GroupKind::Data);
  EXPECT_EQ(groups[4].ranks, (std::vector<int>{2, 5}));
  for (const CommGroup& g : groups)
    EXPECT_NE(g.kind, GroupKind::World);
}

// Stage 1 over the sequence group, stage 2 over the data group, never a single world all-reduce.
TEST(Lss, DoubleGradientAveraging) {
  const Workload w = workload(48, 4, 4, true, 2);
  const Plan plan = plan_of(StrategyKind::Lss, params_of(StrategyKind::Lss, 3, 2), w);
  const Schedule schedule = ScheduleBuilder(plan).build();
  for (const RankProgram& p : schedule.ranks) {
    std::vector<GroupKind> stages;
    for (const Op& op : p.ops)
      if (op.kind == OpKind::AllReduce) {
        const CollectiveSpec& spec = p.collectives[size_t(op.coll)];
        stages.push_back(plan.groups[size_t(spec.group)].kind);
        EXPECT_EQ(spec.elements, w.attention_parameters_per_layer());
      }
    EXPECT_EQ(stages, (std::vector<GroupKind>{GroupKind::Sequence, GroupKind::Data})) << "rank " << p.rank;
  }
}

// §9.2: one fused all-gather of [K | V] forward (2 (S - 1) / S B N H elements in MHA), one fused
// fp32 reduce-scatter of [dK | dV] backward; K,V are not gathered again.
TEST(Lss, VolumesMatchTheClosedForms) {
  for (int S : {2, 4, 8}) {
    const int B = 1, h = 4, d = 4, s = 2;
    const int64_t n = 16, N = n * S;
    const Schedule schedule =
        ScheduleBuilder(plan_of(StrategyKind::Lss, params_of(StrategyKind::Lss, S), workload(N, h, h, false, B, d)))
            .build();
    for (const RankProgram& p : schedule.ranks) {
      const Traffic t = traffic(p);
      EXPECT_EQ(t.all_gather[0], 2 * (S - 1) * B * N * h * d * s / S);
      EXPECT_EQ(t.all_gather[1], 0);
      EXPECT_EQ(t.reduce_scatter[1], 2 * (S - 1) * B * N * h * d * 4 / S);
      int gathers = 0, scatters = 0;
      for (const Op& op : p.ops)
        gathers += op.kind == OpKind::AllGather, scatters += op.kind == OpKind::ReduceScatter;
      EXPECT_EQ(gathers, 1);
      EXPECT_EQ(scatters, 1);
    }
  }
}

}  // namespace
}  // namespace wallfacer
