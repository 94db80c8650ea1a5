// Every ring / zigzag / Ulysses / USP / double-ring schedule on small workloads: coverage and
// data flow by symbolic execution (each live (head, query, key) pair exactly once, forward and
// backward), deadlock freedom in two execution orders, matching sends and receives, exact FLOPs,
// flow-set membership, determinism, and single-rank builds equal to full builds.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "common/strategy_params.hpp"
#include "schedule/interpreter.hpp"
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

using testing::hand_plan;
using testing::small_workload;

struct Case {
  std::string name;
  StrategyKind kind;
  StrategyParams params;
  Workload workload;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

test::FlatParams params_of(int S, int D = 1, int u = 1, int r = 1, int w = 1, Placement pl = Placement::Default) {
  return {.S = S, .D = D, .u = u, .r = r, .w = w, .placement = pl};
}

void add(std::vector<Case>& cases, std::string name, StrategyKind kind, const test::FlatParams& flat, Workload w) {
  const StrategyParams params = test::typed_params(kind, flat);
  name += w.causal ? "_causal" : "_full";
  name += fmt::format("_h{}kv{}_n{}_b{}", w.heads, w.kv_heads, w.seq, w.batch);
  std::replace(name.begin(), name.end(), '-', '_');
  cases.push_back({std::move(name), kind, params, w});
}

std::vector<Case> all_cases() {
  std::vector<Case> c;
  for (bool causal : {true, false}) {
    for (int S : {1, 2, 3, 4, 8}) {
      // Ring: uneven contiguous shards (19 tokens) with MHA and GQA.
      add(c, fmt::format("ring_S{}", S), StrategyKind::Ring, params_of(S), small_workload(19, 4, 4, causal));
      add(c, fmt::format("ring_S{}", S), StrategyKind::Ring, params_of(S), small_workload(19, 4, 1, causal));
      // Zigzag needs N % 2S == 0.
      add(c, fmt::format("zigzag_S{}", S), StrategyKind::Zigzag, params_of(S), small_workload(48, 4, 2, causal));
    }
    for (int S : {1, 2, 4, 8}) {
      add(c, fmt::format("ulysses_S{}", S), StrategyKind::Ulysses, params_of(S, 1, S),
          small_workload(19, 8, 8, causal));
      add(c, fmt::format("ulysses_S{}", S), StrategyKind::Ulysses, params_of(S, 1, S),
          small_workload(21, 8, 2, causal));  // replicated kv heads for S = 4, 8
    }
    add(c, "ulysses_S3", StrategyKind::Ulysses, params_of(3, 1, 3), small_workload(20, 6, 3, causal));
    for (auto [u, r] : {std::pair{2, 2}, {2, 4}, {4, 2}, {2, 3}, {3, 2}}) {
      for (Placement pl : {Placement::HeadFirst, Placement::ContextFirst}) {
        const int heads = u == 3 ? 6 : 8;
        const std::string name = fmt::format("usp_u{}r{}_{}", u, r, to_string(pl));
        add(c, name, StrategyKind::Usp, params_of(u * r, 1, u, r, 1, pl), small_workload(48, heads, heads, causal));
        // GQA with replicated kv heads where u exceeds them; uneven shards under the full mask.
        add(c, name, StrategyKind::Usp, params_of(u * r, 1, u, r, 1, pl),
            small_workload(causal ? 48 : 23, heads, u == 3 ? 1 : 2, causal));
      }
    }
    for (auto [u, cc, w] : {std::tuple{1, 4, 2},
                            {1, 8, 2},
                            {1, 8, 4},
                            {1, 6, 2},
                            {1, 6, 3},
                            {1, 4, 1},
                            {1, 4, 4},
                            {2, 4, 2},
                            {2, 2, 1}}) {
      const std::string name = fmt::format("double_ring_u{}c{}w{}", u, cc, w);
      add(c, name, StrategyKind::DoubleRing, params_of(u * cc, 1, u, 1, w), small_workload(48, 4, 2, causal));
      add(c, name, StrategyKind::DoubleRing, params_of(u * cc, 1, u, 1, w), small_workload(48, 4, 4, causal));
    }
    if (!causal) {  // uneven contiguous shards under the full mask
      add(c, "double_ring_u1c8w4_uneven", StrategyKind::DoubleRing, params_of(8, 1, 1, 1, 4),
          small_workload(50, 4, 2, causal));
      add(c, "double_ring_u2c3w1_uneven", StrategyKind::DoubleRing, params_of(6, 1, 2, 1, 1),
          small_workload(29, 4, 2, causal));
    }
    // Data parallelism: two replicas, two sequences.
    add(c, "ring_S2_D2", StrategyKind::Ring, params_of(2, 2), small_workload(10, 2, 2, causal, 2));
    add(c, "ulysses_S2_D2", StrategyKind::Ulysses, params_of(2, 2, 2), small_workload(10, 4, 2, causal, 4));
    add(c, "usp_u2r2_D2", StrategyKind::Usp, params_of(4, 2, 2, 2), small_workload(16, 4, 4, causal, 2));
    add(c, "double_ring_c4w2_D2", StrategyKind::DoubleRing, params_of(4, 2, 1, 1, 2),
        small_workload(16, 2, 2, causal, 2));
  }
  return c;
}

class StrategySchedule : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    const int P = c.params.sequence_parallel * c.params.data_parallel;
    const Feasibility f = check_feasible(c.kind, c.params, c.workload, P);
    ASSERT_TRUE(f.ok) << f.reason;
    plan_ = hand_plan(c.kind, c.params, c.workload);
    schedule_ = build_schedule(plan_);
  }
  Plan plan_;
  Schedule schedule_;
};

TEST_P(StrategySchedule, SymbolicExecutionCoversEveryPairOnceWithoutDeadlock) {
  for (auto order : {testing::Order::CommunicationFirst, testing::Order::ComputeFirst}) {
    const testing::RunResult run = testing::run_schedule(plan_, schedule_, order);
    EXPECT_TRUE(run.completed && run.errors.empty()) << run.summary();
  }
}

TEST_P(StrategySchedule, EverySendMatchesExactlyOneReceive) {
  using Key = std::tuple<int, int, int>;  // src, dst, tag
  std::map<Key, const Op*> sends, recvs;
  for (const auto& prog : schedule_.ranks)
    for (const Op& op : prog.ops) {
      if (op.kind == OpKind::Send) {
        ASSERT_TRUE(sends.emplace(Key{prog.rank, op.peer, op.tag}, &op).second) << "duplicate send tag";
      } else if (op.kind == OpKind::Recv) {
        ASSERT_TRUE(recvs.emplace(Key{op.peer, prog.rank, op.tag}, &op).second) << "duplicate receive tag";
      }
    }
  ASSERT_EQ(sends.size(), recvs.size());
  for (const auto& [key, send] : sends) {
    auto it = recvs.find(key);
    ASSERT_NE(it, recvs.end()) << "send without receive " << std::get<0>(key) << "->" << std::get<1>(key);
    const Op* recv = it->second;
    EXPECT_EQ(send->bytes, recv->bytes);
    EXPECT_EQ(schedule_.tokens.get(send->tok[0]), schedule_.tokens.get(recv->tok[0]));
    EXPECT_EQ(send->fields, recv->fields);
    EXPECT_GT(send->bytes, 0);
  }
}

TEST_P(StrategySchedule, FlopsEqualTheClosedForm) {
  const Workload& w = plan_.workload;
  const double pairs = w.causal ? double(w.seq) * (w.seq + 1) / 2 : double(w.seq) * w.seq;
  const double forward = 4.0 * w.batch * pairs * w.heads * w.head_dim;
  double fwd = 0, bwd = 0;
  for (const auto& prog : schedule_.ranks) {
    const testing::Totals t = testing::totals(prog);
    fwd += t.fwd_flops;
    bwd += t.bwd_flops;
  }
  EXPECT_DOUBLE_EQ(fwd, forward);
  EXPECT_DOUBLE_EQ(bwd, 2.5 * forward);
}

TEST_P(StrategySchedule, TransfersBelongToTheirFlowSet) {
  std::vector<std::set<std::pair<int32_t, int32_t>>> flows;
  for (const auto& fs : schedule_.flow_sets)
    flows.emplace_back(fs.flows.begin(), fs.flows.end());
  for (const auto& prog : schedule_.ranks)
    for (const Op& op : prog.ops) {
      if (op.kind != OpKind::Send) continue;
      ASSERT_GE(op.flow_set, 0);
      ASSERT_LT(size_t(op.flow_set), flows.size());
      EXPECT_TRUE(flows[size_t(op.flow_set)].count({prog.rank, op.peer}))
          << schedule_.flow_sets[size_t(op.flow_set)].name << " lacks " << prog.rank << "->" << op.peer;
    }
}

TEST_P(StrategySchedule, BuildIsDeterministicAndRankByRank) {
  const Schedule again = build_schedule(plan_);
  ASSERT_EQ(again.ranks.size(), schedule_.ranks.size());
  std::string why;
  for (size_t r = 0; r < again.ranks.size(); ++r)
    EXPECT_TRUE(testing::same_program(schedule_.ranks[r], schedule_.tokens, again.ranks[r], again.tokens, &why))
        << "rank " << r << ": " << why;
  const ScheduleBuilder builder(plan_);
  const int last = builder.num_ranks() - 1;
  const Schedule one = builder.build({last});
  ASSERT_EQ(one.ranks.size(), 1u);
  EXPECT_TRUE(testing::same_program(schedule_.ranks[size_t(last)], schedule_.tokens, one.ranks[0], one.tokens, &why))
      << why;
}

TEST_P(StrategySchedule, PlanGroupsAreCheckedBeforeBuilding) {
  Plan broken = plan_;
  if (broken.groups.empty()) GTEST_SKIP() << "no groups";
  std::swap(broken.groups.front().ranks.front(), broken.groups.front().ranks.back());
  if (broken.groups.front().ranks.size() == 1) broken.groups.front().name += "x";
  EXPECT_THROW(ScheduleBuilder{broken}, InputError);
}

INSTANTIATE_TEST_SUITE_P(Strategies, StrategySchedule, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace wallfacer
