// WallFacer (docs/algorithms.md §8): the §8.2 rank-formula properties by enumeration, checked
// schedules for every valid (S, C), exact FLOPs, and the closed-form volumes of §8.3 / §10.3.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "strategies/strategy_impl.hpp"
#include "strategies/wallfacer_layout.hpp"
#include "strategies_team/team_plans.hpp"

namespace wallfacer {
namespace {

using detail::WallFacerLayout;
using namespace team_testing;

// (S, C) with C | S and C^2 | S.
std::vector<std::pair<int, int>> valid_configs(std::initializer_list<int> sizes) {
  std::vector<std::pair<int, int>> out;
  for (int S : sizes)
    for (int C = 1; C * C <= S; ++C)
      if (S % (C * C) == 0) out.push_back({S, C});
  return out;
}

const std::initializer_list<int> kSizes = {1, 2, 4, 8, 9, 16, 18, 32, 64, 72};

TEST(WallFacerLayout, PlacementIsABijectionInvertedBySource) {
  for (auto [S, C] : valid_configs(kSizes)) {
    const WallFacerLayout L(S, C);
    std::set<int> targets;
    for (int x = 0; x < S; ++x) {
      targets.insert(L.target(x));
      EXPECT_EQ(L.source(L.target(x)), x) << "S=" << S << " C=" << C << " x=" << x;
      // The receiver gets the K,V of the sender's team.
      EXPECT_EQ(L.initial_kv_team(L.target(x)), L.team(x));
    }
    EXPECT_EQ(int(targets.size()), S) << "S=" << S << " C=" << C;
    EXPECT_EQ(*targets.rbegin(), S - 1);
  }
}

TEST(WallFacerLayout, SubRingHoldsTeamsOfItsMemberIndex) {
  for (auto [S, C] : valid_configs(kSizes)) {
    const WallFacerLayout L(S, C);
    for (int g = 0; g < C; ++g)
      for (int a = 0; a < C; ++a) {
        std::set<int> held, expected;
        for (int j = 0; j < L.G; ++j) {
          const int x = (g * L.G + j) * C + a;
          EXPECT_EQ(L.subring(x), g * C + a);
          held.insert(L.initial_kv_team(x));
          expected.insert(j * C + a);
          EXPECT_EQ(L.prev(L.next(x)), x);
          EXPECT_EQ(L.subring(L.next(x)), L.subring(x));  // neighbours stay in the sub-ring
        }
        EXPECT_EQ(held, expected) << "S=" << S << " C=" << C << " sub-ring (" << g << ", " << a << ")";
      }
  }
}

TEST(WallFacerLayout, EveryTeamMeetsEveryTeamsKvExactlyOnce) {
  for (auto [S, C] : valid_configs(kSizes)) {
    const WallFacerLayout L(S, C);
    std::vector<int> copies(size_t(L.T), 0);
    for (int t = 0; t < L.T; ++t) {
      std::vector<int> met(size_t(L.T), 0);
      for (int a = 0; a < C; ++a)
        for (int s = 0; s < L.G; ++s) {
          const int x = L.rank(t, a);
          ++met[size_t(L.kv_team_at(x, s))];
          // What x holds in round s + 1 is what its predecessor held in round s.
          EXPECT_EQ(L.kv_team_at(x, s + 1), L.kv_team_at(L.prev(x), s));
          if (s == 0) ++copies[size_t(L.initial_kv_team(x))];
        }
      EXPECT_EQ(met, std::vector<int>(size_t(L.T), 1)) << "S=" << S << " C=" << C << " team " << t;
    }
    EXPECT_EQ(copies, std::vector<int>(size_t(L.T), C)) << "each K,V shard exists in C copies";
  }
}

TEST(WallFacerLayout, ClosedFormsOfTheReference) {
  // docs/algorithms.md §8.2 for teams on contiguous ranks, spelled out independently.
  for (auto [S, C] : valid_configs(kSizes)) {
    const WallFacerLayout L(S, C);
    const int G = S / (C * C);
    for (int rank = 0; rank < S; ++rank) {
      const int t = rank / C, a = rank % C, g = t / G;
      EXPECT_EQ(L.target(rank), (a * G + t / C) * C + t % C);
      EXPECT_EQ(L.source(rank), ((t % G) * C + a) * C + g);
      EXPECT_EQ(L.next(rank), (g * G + (t % G + 1) % G) * C + a);
      EXPECT_EQ(L.prev(rank), (g * G + (t % G + G - 1) % G) * C + a);
    }
  }
}

TEST(WallFacerLayout, P2PIntraPlacesSubRingsOnConsecutiveGpus) {
  auto impl = detail::make_wallfacer_impl();
  for (auto [S, C] : valid_configs(kSizes)) {
    const WallFacerLayout L(S, C);
    const std::vector<int> pos = impl->positions(params_of(S, 2, C, Placement::P2PIntra), 2 * S);
    ASSERT_EQ(int(pos.size()), 2 * S);
    std::vector<int> sorted = pos;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < 2 * S; ++i)
      ASSERT_EQ(sorted[size_t(i)], i) << "not a permutation";
    for (int x = 0; x < S; ++x) {
      EXPECT_EQ(pos[size_t(S + x)], S + pos[size_t(x)]) << "replica 1 is replica 0 shifted";
      if (L.G > 1 && L.position(x) + 1 < L.G) {
        EXPECT_EQ(pos[size_t(L.next(x))], pos[size_t(x)] + 1);
      }
      if (L.member(x) + 1 < C) {
        EXPECT_EQ(pos[size_t(x + 1)], pos[size_t(x)] + L.G) << "team members stride by G";
      }
    }
    EXPECT_EQ(impl->positions(params_of(S, 1, C, Placement::CollectIntra), S), impl->positions(params_of(S), S));
  }
}

TEST(WallFacer, FeasibilityRules) {
  const Workload w = workload(64, 4, 4, true);
  auto reason = [&](const StrategyParams& p, int ranks, const Workload& wl) {
    return check_feasible(StrategyKind::WallFacer, p, wl, ranks).reason;
  };
  EXPECT_NE(reason(params_of(8, 1, 3), 8, w).find("does not divide the 8"), std::string::npos);
  EXPECT_NE(reason(params_of(8, 1, 4), 8, w).find("C^2 = 16 does not divide"), std::string::npos);
  EXPECT_NE(reason(params_of(8, 1, 2), 8, workload(40, 4, 4, true)).find("zigzag"), std::string::npos);
  EXPECT_NE(reason(params_of(StrategyKind::Usp, 8), 8, w).find("parameters of another strategy"), std::string::npos);
  EXPECT_TRUE(
      check_feasible(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, 8, 1, 2), workload(43, 4, 4, false), 8)
          .ok);
  EXPECT_TRUE(check_feasible(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, 16, 1, 4), w, 16).ok);
}

TEST(WallFacer, EnumeratesEveryTeamSizePlacementAndSplit) {
  std::set<std::tuple<int, int, int, Placement>> got;
  for (const StrategyParams& p : enumerate_params(StrategyKind::WallFacer, workload(64, 4, 4, true, 2), 16)) {
    EXPECT_TRUE(got.insert({p.data_parallel, p.sequence_parallel, team_size(p), placement_of(p)}).second)
        << "duplicate";
  }
  using P = Placement;
  const std::set<std::tuple<int, int, int, Placement>> expected = {
      {1, 16, 1, P::CollectIntra}, {1, 16, 2, P::CollectIntra}, {1, 16, 2, P::P2PIntra}, {1, 16, 4, P::CollectIntra},
      {2, 8, 1, P::CollectIntra},  {2, 8, 2, P::CollectIntra},  {2, 8, 2, P::P2PIntra}};
  EXPECT_EQ(got, expected);
}

TEST(WallFacer, TeamSizesOfHugeRankCountsDoNotOverflow) {
  // C^2 for C = 2^19 overflows 32 bits (to 0 for C = 2^16, a division by zero before the fix).
  const int ranks = 1 << 19;
  std::set<int> teams;
  for (const StrategyParams& p : enumerate_params(StrategyKind::WallFacer, workload(1 << 20, 4, 4, true), ranks))
    teams.insert(team_size(p));
  std::set<int> expected;
  for (int C = 1; int64_t(C) * C <= ranks; C *= 2)
    expected.insert(C);
  EXPECT_EQ(teams, expected);
  EXPECT_NE(check_feasible(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, 1 << 16, 1, 1 << 16),
                           workload(1 << 20, 4, 4, true), 1 << 16)
                .reason.find("C^2 = 4294967296 does not divide"),
            std::string::npos);
}

TEST(WallFacer, GroupsAreTeamsThenSubRings) {
  const std::vector<CommGroup> groups =
      make_groups(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, 8, 1, 2), 8);
  ASSERT_EQ(groups.size(), 4u + 4u + 1u);  // 4 teams, C^2 = 4 sub-rings of G = 2, world
  EXPECT_EQ(groups[0].kind, GroupKind::Team);
  EXPECT_EQ(groups[1].ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(groups[4].kind, GroupKind::SubRing);
  EXPECT_EQ(groups[4].name, "subring.g0.a0");
  EXPECT_EQ(groups[4].ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(groups[7].ranks, (std::vector<int>{5, 7}));  // g = 1, a = 1: teams 2, 3
  EXPECT_EQ(groups[8].kind, GroupKind::World);
}

// Every valid (S, C), both placements, causal and full, MHA and GQA: the checker passes and the
// FLOPs add up to the closed form.
TEST(WallFacer, SchedulesPassTheCheckerWithExactFlops) {
  for (auto [S, C] : valid_configs({1, 2, 4, 8, 9, 16, 18, 32}))
    for (Placement placement : {Placement::CollectIntra, Placement::P2PIntra})
      for (bool causal : {true, false})
        for (int kv_heads : {4, 2}) {
          const Workload w = workload(causal ? 4 * S : 4 * S + 3, 4, kv_heads, causal);
          const Plan plan = plan_of(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, S, 1, C, placement), w);
          Schedule schedule;
          const std::string errors = check_errors(plan, &schedule);
          SCOPED_TRACE(testing::Message() << "S=" << S << " C=" << C << " causal=" << causal << " kv=" << kv_heads);
          EXPECT_EQ(errors, "");
          double fwd = 0, bwd = 0;
          for (const RankProgram& p : schedule.ranks)
            fwd += traffic(p).flops[0], bwd += traffic(p).flops[1];
          EXPECT_DOUBLE_EQ(fwd, closed_form_flops(w, Phase::Forward));
          EXPECT_DOUBLE_EQ(bwd, closed_form_flops(w, Phase::Backward));
        }
}

TEST(WallFacer, DataParallelReplicas) {
  for (bool causal : {true, false}) {
    const Workload w = workload(64, 4, 2, causal, 4);
    for (int C : {1, 2}) {
      const Plan plan = plan_of(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, 8, 2, C), w);
      EXPECT_EQ(check_errors(plan), "") << "C=" << C << " causal=" << causal;
    }
  }
}

// Per-rank bytes of §8.3: G transfers of 2 C B n H_kv s (one of them the placement, which a rank
// that keeps its own shard skips), the team all-gather of Q, K, V and the reduce-scatter of O.
TEST(WallFacer, ForwardVolumesMatchTheClosedForms) {
  for (auto [S, C] : valid_configs({4, 8, 16, 32, 72}))
    for (int kv_heads : {8, 2}) {
      const int B = 2, h = 8, d = 2, s = 2;
      const int64_t N = 16 * S, n = N / S;
      const Workload w = workload(N, h, kv_heads, true, B, d);
      const WallFacerLayout L(S, C);
      const Schedule schedule =
          ScheduleBuilder(plan_of(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, S, 1, C), w)).build();
      int64_t max_p2p = 0;
      for (int x = 0; x < S; ++x) {
        const Traffic t = traffic(schedule.ranks[size_t(x)]);
        const int transfers = L.G - 1 + (L.target(x) != x ? 1 : 0);
        EXPECT_EQ(t.p2p[0], int64_t(transfers) * 2 * C * B * n * kv_heads * d * s) << "S=" << S << " x=" << x;
        EXPECT_EQ(t.sends[0], transfers);
        EXPECT_EQ(t.all_gather[0], int64_t(C - 1) * B * n * (h + 2 * kv_heads) * d * s);
        EXPECT_EQ(t.reduce_scatter[0], int64_t(C - 1) * B * n * h * (d * s + 4));  // O, plus fp32 Lse
        max_p2p = std::max(max_p2p, t.p2p[0]);
        std::set<int> rounds;
        for (const Op& op : schedule.ranks[size_t(x)].ops)
          if (op.kind == OpKind::AttnFwd) rounds.insert(op.step);
        EXPECT_EQ(int(rounds.size()), L.G) << "rounds = S / C^2";
      }
      // The paper's per-GPU P2P volume 2 B N H_kv s / C (reached by ranks that move their shard).
      if (C > 1) {
        EXPECT_EQ(max_p2p, 2 * B * N * kv_heads * d * s / C);
      }
      // §10.3 in MHA: all-gather Q, K, V plus reduce-scatter O move 4 B N H (C - 1) / P elements.
      if (kv_heads == h) {
        const Traffic t = traffic(schedule.ranks[0]);
        const int64_t o_elements = (t.reduce_scatter[0] - int64_t(C - 1) * B * n * h * 4) / s;
        EXPECT_EQ(t.all_gather[0] / s + o_elements, 4 * B * N * h * d * (C - 1) / S);
      }
    }
}

// §8.4: the bundle makes G - 1 hops, dQ G hops (the last one home), K,V are placed again and
// the fp32 dK,dV copies return along the inverse placement.
TEST(WallFacer, BackwardVolumesMatchTheReconstruction) {
  for (auto [S, C] : valid_configs({4, 8, 16, 18})) {
    const int B = 1, h = 4, hkv = 2, d = 4, s = 2;
    const int64_t N = 8 * S, n = N / S;
    const Workload w = workload(N, h, hkv, true, B, d);
    const WallFacerLayout L(S, C);
    const Schedule schedule =
        ScheduleBuilder(plan_of(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, S, 1, C), w)).build();
    for (int x = 0; x < S; ++x) {
      const Traffic t = traffic(schedule.ranks[size_t(x)]);
      const int64_t rows = int64_t(C) * n * B;
      const int64_t moved = L.target(x) != x ? 1 : 0;
      const int64_t expected = moved * rows * 2 * hkv * d * s                   // K,V placement
                               + int64_t(L.G - 1) * rows * h * (2 * d * s + 8)  // Q, dO, Lse, D
                               + (L.G > 1 ? L.G : 0) * rows * h * d * 4         // fp32 dQ
                               + moved * rows * 2 * hkv * d * 4;                // fp32 dK, dV home
      EXPECT_EQ(t.p2p[1], expected) << "S=" << S << " C=" << C << " x=" << x;
      EXPECT_EQ(t.all_gather[1], int64_t(C - 1) * B * n * (h * (2 * d * s + 8) + 2 * hkv * d * s));
      EXPECT_EQ(t.reduce_scatter[1], int64_t(C - 1) * B * n * (h + 2 * hkv) * d * 4);
    }
  }
}

// C = 1 is Ring Attention: the same forward bytes per rank as the ring (full mask) and zigzag
// (causal) strategies, 2 (S - 1) B n H_kv s, and no collectives besides the weight gradients.
TEST(WallFacer, TeamOfOneMovesWhatTheRingMoves) {
  for (int S : {2, 4, 8})
    for (bool causal : {true, false}) {
      const Workload w = workload(8 * S, 4, 2, causal, 1, 4);
      const Schedule wf =
          ScheduleBuilder(plan_of(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, S, 1, 1), w)).build();
      const StrategyKind ring_kind = causal ? StrategyKind::Zigzag : StrategyKind::Ring;
      const Schedule ring = ScheduleBuilder(plan_of(ring_kind, params_of(ring_kind, S), w)).build();
      for (int x = 0; x < S; ++x) {
        const Traffic a = traffic(wf.ranks[size_t(x)]), b = traffic(ring.ranks[size_t(x)]);
        EXPECT_EQ(a.p2p[0], b.p2p[0]) << "S=" << S << " causal=" << causal << " rank " << x;
        EXPECT_EQ(a.p2p[0], int64_t(2) * (S - 1) * 8 * 2 * 4 * 2);
        EXPECT_EQ(a.all_gather[0] + a.reduce_scatter[0] + a.all_gather[1] + a.reduce_scatter[1], 0);
      }
    }
}

TEST(WallFacer, SqrtTeamHasNoSubRingShifts) {
  const Workload w = workload(64, 4, 4, true);
  const Schedule schedule =
      ScheduleBuilder(plan_of(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, 16, 1, 4), w)).build();
  const WallFacerLayout L(16, 4);
  for (int x = 0; x < 16; ++x) {
    // Only the placement exchange (and its inverse) is point to point.
    const Traffic t = traffic(schedule.ranks[size_t(x)]);
    EXPECT_EQ(t.sends[0], L.target(x) != x ? 1 : 0);
    EXPECT_EQ(t.sends[1], L.target(x) != x ? 2 : 0);
  }
}

TEST(WallFacer, FlowSetsMatchTheSends) {
  const Plan plan =
      plan_of(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, 8, 2, 2), workload(64, 4, 4, true, 2));
  const Schedule schedule = ScheduleBuilder(plan).build();
  std::vector<std::set<std::pair<int, int>>> sent(schedule.flow_sets.size());
  for (const RankProgram& p : schedule.ranks)
    for (const Op& op : p.ops)
      if (op.kind == OpKind::Send) {
        ASSERT_GE(op.flow_set, 0);
        ASSERT_LT(op.flow_set, int(sent.size()));
        sent[size_t(op.flow_set)].insert({p.rank, op.peer});
      }
  for (size_t i = 0; i < sent.size(); ++i) {
    std::set<std::pair<int, int>> flows(schedule.flow_sets[i].flows.begin(), schedule.flow_sets[i].flows.end());
    EXPECT_EQ(sent[i], flows) << schedule.flow_sets[i].name;
  }
}

TEST(WallFacer, BuildsOneRankOfAHugeClusterAlone) {
  // 16,384 GPUs, C = 8: one rank's program without building the others.
  const Workload w = workload(int64_t(1) << 20, 32, 8, true, 1, 128);
  const Plan plan = plan_of(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, 16384, 1, 8), w);
  ScheduleBuilder builder(plan);
  TokenSetPool pool;
  const RankProgram program = builder.build_rank(12345, pool);
  const Traffic t = traffic(program);
  EXPECT_EQ(t.sends[0], 16384 / 64 - 1 + 1);
  EXPECT_EQ(builder.flow_sets().size(), 5u);
}

}  // namespace
}  // namespace wallfacer
