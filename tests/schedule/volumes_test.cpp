// Per-GPU traffic against the closed forms of docs/algorithms.md §10.2 (even shards, bf16).
#include <gtest/gtest.h>

#include <wallfacer/schedule/strategy.hpp>
#include "common/strategy_params.hpp"
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

using testing::hand_plan;
using testing::small_workload;
using testing::totals;

constexpr int64_t s_act = 2, s_acc = 4;  // bf16 activations, fp32 accumulators

StrategyParams params_of(StrategyKind kind, int S, int u = 1, int r = 1, int w = 1) {
  return test::typed_params(kind, {.S = S, .u = u, .r = r, .w = w});
}

TEST(Volumes, RingPassKv) {
  for (bool causal : {true, false})
    for (int P : {2, 4, 8}) {
      const Workload w = small_workload(64, 4, 2, causal, 2, 8);
      const Schedule s = build_schedule(hand_plan(StrategyKind::Zigzag, params_of(StrategyKind::Zigzag, P), w));
      const int64_t n = w.seq / P, Hkv = w.kv_width();
      for (const auto& prog : s.ranks) {
        const auto t = totals(prog);
        EXPECT_EQ(t.fwd_p2p, 2 * (P - 1) * w.batch * n * Hkv * s_act);
        // Backward: K,V for P-1 hops plus fp32 dK,dV for P hops.
        EXPECT_EQ(t.bwd_p2p, 2 * (P - 1) * w.batch * n * Hkv * s_act + 2 * P * w.batch * n * Hkv * s_acc);
        EXPECT_EQ(t.fwd_coll, 0);
      }
    }
}

TEST(Volumes, Ulysses) {
  for (int P : {2, 4, 8}) {
    const Workload w = small_workload(64, 8, 8, true, 1, 8);
    const Schedule s = build_schedule(hand_plan(StrategyKind::Ulysses, params_of(StrategyKind::Ulysses, P, P), w));
    const int64_t n = w.seq / P, H = w.q_width(), Hkv = w.kv_width();
    // §10.2 counts Q, K, V and O; the schedule also returns lse (fp32, one per head and row).
    const int64_t lse = (P - 1) * w.batch * n * w.heads * 4 / P;
    for (const auto& prog : s.ranks) {
      const auto t = totals(prog);
      EXPECT_EQ(t.fwd_coll, (P - 1) * w.batch * n * (2 * H + 2 * Hkv) * s_act / P + lse);
      EXPECT_EQ(t.fwd_p2p, 0);
      // Backward: dO in, dQ, dK, dV out (bf16).
      EXPECT_EQ(t.bwd_coll, (P - 1) * w.batch * n * (2 * H + 2 * Hkv) * s_act / P);
    }
  }
}

TEST(Volumes, Usp) {
  for (auto [u, r] : {std::pair{2, 2}, {2, 4}, {4, 2}}) {
    const Workload w = small_workload(64, 8, 8, true, 1, 8);
    const int P = u * r;
    const Schedule s = build_schedule(hand_plan(StrategyKind::Usp, params_of(StrategyKind::Usp, P, u, r), w));
    const int64_t n = w.seq / P, H = w.q_width(), Hkv = w.kv_width();
    const int64_t lse = (u - 1) * w.batch * n * w.heads * 4 / u;
    for (const auto& prog : s.ranks) {
      const auto t = totals(prog);
      EXPECT_EQ(t.fwd_coll, (u - 1) * w.batch * n * (2 * H + 2 * Hkv) * s_act / u + lse);
      EXPECT_EQ(t.fwd_p2p, (r - 1) * 2 * w.batch * n * Hkv * s_act);
    }
  }
}

TEST(Volumes, DoubleRingMovesAFlatRingsBytes) {
  for (auto [c, win] : {std::pair{4, 2}, {8, 2}, {8, 4}}) {
    const Workload w = small_workload(64, 4, 4, true, 1, 8);
    const Schedule s =
        build_schedule(hand_plan(StrategyKind::DoubleRing, params_of(StrategyKind::DoubleRing, c, 1, 1, win), w));
    const int64_t n = w.seq / c, Hkv = w.kv_width();
    for (const auto& prog : s.ranks) {
      const auto t = totals(prog);
      EXPECT_EQ(t.fwd_p2p + t.fwd_coll, 2 * (c - 1) * w.batch * n * Hkv * s_act);
      // (c/w)(w-1) intra-window and c/w - 1 inter-window transfers.
      int intra = 0, inter = 0;
      for (const Op& op : prog.ops) {
        if (op.kind != OpKind::Send || op.phase != Phase::Forward) continue;
        const std::string& set = s.flow_sets[size_t(op.flow_set)].name;
        intra += set == "kv-intra";
        inter += set == "kv-inter";
      }
      EXPECT_EQ(intra, (c / win) * (win - 1));
      EXPECT_EQ(inter, c / win - 1);
    }
  }
}

}  // namespace
}  // namespace wallfacer
