// Where the step goes (StepParts): the parts of hand-timed ranks against their hand-computed
// values (the sync stream's transfers included), the parts of every strategy's attention layer and whole step summing
// to the step, and the tiers following the links (one NVSwitch node: nothing over the network; one GPU per node:
// nothing over NVLink).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "cost_test_util.hpp"
#include "step_parts.hpp"

namespace wallfacer {
namespace {

Op compute_op() {
  Op op;
  op.kind = OpKind::AttnFwd;
  op.stream = Stream::Compute;
  return op;
}

Op send_op(int peer) {
  Op op;
  op.kind = OpKind::Send;
  op.stream = Stream::Send;
  op.peer = peer;
  return op;
}

Op recv_op(int peer) {
  Op op;
  op.kind = OpKind::Recv;
  op.stream = Stream::Recv;
  op.peer = peer;
  return op;
}

void expect_sums_to_step(const CostBreakdown& cost) {
  const StepParts& p = cost.parts;
  EXPECT_NEAR(p.sum_ms(), cost.step_ms, 1e-9 * cost.step_ms);
  for (double part :
       {p.compute_ms, p.imbalance_ms, p.exposed_ms[0], p.exposed_ms[1], p.exposed_ms[2], p.idle_ms, p.hidden_ms})
    EXPECT_GE(part, 0);
  EXPECT_LE(p.hidden_ms, p.compute_ms + p.imbalance_ms + 1e-9);
}

// Rank 0 of two nodes of two GPUs (ranks 0, 1 on node 0, ranks 2, 3 on node 1), timed by hand in ms:
//   compute [0, 2] and [5, 6]; send to rank 2 (network) [1, 3]; receive from rank 1 (NVLink)
//   [3, 4]; send to rank 1 (NVLink) [5.5, 6]; nothing in [4, 5].
// Compute 3, of which 1.5 hides transfers; the network is exposed in [2, 3], NVLink in [3, 4];
// idle [4, 5]. With a mean compute of 2.5 and a busiest rank at 3.5: compute 2.5, imbalance
// 0.5 above the mean plus 0.5 of the idle second waiting for the busier rank; idle 0.5.
TEST(StepParts, HandTimedRank) {
  const Topology topology = testing::switch_nodes(2, 2);
  const Workload w = testing::mha_workload(4096);
  const Plan plan = make_plan(StrategyKind::Ring, enumerate_params(StrategyKind::Ring, w, 4).front(), w, topology, 4);
  ASSERT_EQ(plan.ranks[1].node, 0);
  ASSERT_EQ(plan.ranks[2].node, 1);
  RankProgram program;
  program.rank = 0;
  program.add(compute_op());
  program.add(send_op(2));
  program.add(recv_op(1));
  program.add(compute_op());
  program.add(send_op(1));
  const std::vector<double> duration{2e-3, 2e-3, 1e-3, 1e-3, 0.5e-3};
  const std::vector<double> end{2e-3, 3e-3, 4e-3, 6e-3, 6e-3};
  detail::TierClassifier tiers(topology, plan);
  const StepParts p = detail::step_parts(program, duration, end, 6e-3, 2.5e-3, 3.5e-3, tiers);
  EXPECT_NEAR(p.compute_ms, 2.5, 1e-12);
  EXPECT_NEAR(p.imbalance_ms, 1.0, 1e-12);
  EXPECT_NEAR(p.hidden_ms, 1.5, 1e-12);
  EXPECT_NEAR(p.exposed_ms[int(CommTier::Network)], 1.0, 1e-12);
  EXPECT_NEAR(p.exposed_ms[int(CommTier::NvLink)], 1.0, 1e-12);
  EXPECT_EQ(p.exposed_ms[int(CommTier::Pcie)], 0);
  EXPECT_NEAR(p.idle_ms, 0.5, 1e-12);
  EXPECT_NEAR(p.sum_ms(), 6.0, 1e-12);
}

// The data-parallel synchronisation runs on a stream of its own (Stream::Sync): its transfers
// hide under compute or are exposed like any other. Rank 0 as above, in ms: compute [0, 2]; a
// gradient reduce-scatter over a group spanning both nodes on the sync stream [1, 4]; an NVLink
// send [3.5, 4.5] whose start, computed as end minus duration, falls an ulp before the previous
// send's end [2.5, 3.5]. Compute 2, of which 1 hides the sync transfer; the network is exposed in
// [2, 4] and NVLink alone in [4, 4.5]; nothing idle.
TEST(StepParts, SyncStreamTransfersCount) {
  const Topology topology = testing::switch_nodes(2, 2);
  const Workload w = testing::mha_workload(4096);
  Plan plan = make_plan(StrategyKind::Ring, enumerate_params(StrategyKind::Ring, w, 4).front(), w, topology, 4);
  plan.groups.push_back({"world", GroupKind::Ring, {0, 1, 2, 3}});
  RankProgram program;
  program.rank = 0;
  CollectiveSpec spec;
  spec.kind = OpKind::ReduceScatter;
  spec.group = int32_t(plan.groups.size() - 1);
  spec.elements = 1 << 20;
  program.collectives.push_back(spec);
  program.add(compute_op());
  Op sync;
  sync.kind = OpKind::ReduceScatter;
  sync.stream = Stream::Sync;
  sync.coll = 0;
  program.add(sync);
  program.add(send_op(1));
  program.add(send_op(1));
  const double first_send_end = 3.5e-3, second_send_end = 4.5e-3;
  const double second_send_duration = std::nextafter(second_send_end - first_send_end, 1.0);
  ASSERT_LT(second_send_end - second_send_duration, first_send_end);
  const std::vector<double> duration{2e-3, 3e-3, 1e-3, second_send_duration};
  const std::vector<double> end{2e-3, 4e-3, first_send_end, second_send_end};
  detail::TierClassifier tiers(topology, plan);
  const StepParts p = detail::step_parts(program, duration, end, 4.5e-3, 2e-3, 2e-3, tiers);
  EXPECT_NEAR(p.compute_ms, 2.0, 1e-12);
  EXPECT_NEAR(p.hidden_ms, 1.0, 1e-12);
  EXPECT_NEAR(p.exposed_ms[int(CommTier::Network)], 2.0, 1e-12);
  EXPECT_NEAR(p.exposed_ms[int(CommTier::NvLink)], 0.5, 1e-12);
  EXPECT_NEAR(p.idle_ms, 0, 1e-12);
  EXPECT_NEAR(p.sum_ms(), 4.5, 1e-12);
}

// Compute under communication kernels (ComputeUnderComm), rank 0 as above, in s: forward compute
// [0, 2], backward compute [2, 5] after it; a receive the rank reaches at 0 (nothing before it)
// that moves data in [1, 3]; a send after the backward compute, [5, 6]. The forward computes 1 s
// while the receive waits and 1 s while it moves, the backward 1 s while it moves and nothing
// under the send. At 0.8 of its speed: a moving transfer costs 0.2 of the compute under it, a
// wait 1 / 0.8 - 1 = 0.25.
TEST(StepParts, ComputeUnderCommunicationSplitsWaitingFromMoving) {
  RankProgram program;
  program.rank = 0;
  program.add(compute_op());
  program.add(recv_op(1));
  Op backward = compute_op();
  backward.phase = Phase::Backward;
  const int32_t computed = program.add(backward, {0});
  program.add(send_op(1), {computed});
  const std::vector<double> duration{2, 2, 3, 1};
  const std::vector<double> end{2, 3, 5, 6};
  const detail::ComputeUnderComm under = detail::compute_under_comm(program, duration, end);
  EXPECT_DOUBLE_EQ(under.forward_waiting_s, 1);
  EXPECT_DOUBLE_EQ(under.forward_moving_s, 1);
  EXPECT_DOUBLE_EQ(under.moving_s, 1);
  EXPECT_DOUBLE_EQ(under.waiting_s, 0);
  EXPECT_NEAR(under.slowdown_s(0.8), 0.2 * 2 + 0.25 * 1, 1e-12);
  EXPECT_NEAR(under.slowdown_s(0.8, true), 0.2 * 1 + 0.25 * 1, 1e-12);
  EXPECT_EQ(under.slowdown_s(1), 0);
}

// One compute block on rank 0 beside its send to rank 1, timed together: the block lasts 2 s,
// the send 1 s.
struct ComputeBesideASend {
  RankProgram sender, receiver;
  std::optional<detail::TimelineShape> shape;
  const std::vector<std::vector<double>> duration{{2, 1}, {1}};
  ComputeBesideASend() {
    sender.rank = 0;
    receiver.rank = 1;
    sender.add(compute_op());
    sender.add(send_op(1));
    receiver.add(recv_op(0));
    shape.emplace(std::vector<const RankProgram*>{&sender, &receiver}, detail::PairMode::Matched);
  }
  ComputeBesideASend(const ComputeBesideASend&) = delete;  // the shape points at the programs
  ComputeBesideASend& operator=(const ComputeBesideASend&) = delete;
};

// The timeline run adds each rank's slowdown to its end: one compute block of 2 s beside a send
// that moves data for 1 s from the start (the simulator's closed form,
// SimulatorSemantics.ComputeSlowsDownWhileTheRankCommunicates: the block ends at
// 1 + (2 - kept x 1) s, 0.4 s later at kept = 0.6).
TEST(StepParts, TimelineRunAddsTheSlowdownToTheRanksEnd) {
  const ComputeBesideASend column;
  const detail::TimelineShape& shape = *column.shape;
  const std::vector<std::vector<double>>& duration = column.duration;
  detail::TimelineShape::RunOptions options;
  const std::vector<detail::RankTiming> plain = shape.run(duration, nullptr, options);
  options.compute_kept_under_comm = 0.6;
  const std::vector<detail::RankTiming> slowed = shape.run(duration, nullptr, options);
  EXPECT_DOUBLE_EQ(plain[0].end_s, 2);
  EXPECT_NEAR(slowed[0].end_s, 1 + (2 - 0.6 * 1), 1e-12);
  EXPECT_NEAR(slowed[0].slowdown_s, 0.4, 1e-12);
  EXPECT_NEAR(slowed[0].forward_end_s, 2.4, 1e-12);  // all of it in the forward
  EXPECT_DOUBLE_EQ(slowed[1].end_s, 1);              // the receiver computes nothing
}

// The same run keeps its latest end at full speed (2 s) and, stopped past it at full speed below
// that, is not timed slowed: the full-speed timings come back, flagged; a stop at or above it
// changes nothing.
TEST(StepParts, TimelineRunStopsAtFullSpeedPastTheStop) {
  const ComputeBesideASend column;
  const detail::TimelineShape& shape = *column.shape;
  const std::vector<std::vector<double>>& duration = column.duration;
  detail::TimelineShape::RunOptions options;
  options.compute_kept_under_comm = 0.6;
  const std::vector<detail::RankTiming> slowed = shape.run(duration, nullptr, options);
  for (const double stop : {1.5, 2.0, 2.2}) {
    SCOPED_TRACE(stop);
    double full_speed_end = -1;
    bool stopped = false;
    options.full_speed_end_s = &full_speed_end;
    options.full_speed_stop_s = stop;
    options.stopped_at_full_speed = &stopped;
    std::vector<std::vector<double>> ends;
    const std::vector<detail::RankTiming> times = shape.run(duration, &ends, options);
    EXPECT_DOUBLE_EQ(full_speed_end, 2);
    EXPECT_EQ(stopped, stop < 2);
    EXPECT_DOUBLE_EQ(times[0].end_s, stop < 2 ? 2 : slowed[0].end_s);
    EXPECT_DOUBLE_EQ(times[0].slowdown_s, stop < 2 ? 0 : slowed[0].slowdown_s);
    EXPECT_DOUBLE_EQ(ends[0][0], stop < 2 ? 2 : slowed[0].end_s);
  }
}

TEST(StepParts, SumToTheStepForEveryStrategyAndScope) {
  const Topology topology = testing::switch_nodes(2, 4);
  Workload w = testing::mha_workload(4096, 8, 64, /*causal=*/true);
  w.layers = 3;
  const CostModel model(topology, Calibration::defaults());
  int checked = 0;
  for (StrategyKind kind : all_strategies())
    for (const StrategyParams& params : enumerate_params(kind, w, 8)) {
      if (!check_feasible(kind, params, w, 8).ok) continue;
      Plan plan = make_plan(kind, params, w, topology, 8);
      SCOPED_TRACE(std::string(to_string(kind)));
      const CostBreakdown attention = model.evaluate(plan);
      expect_sums_to_step(attention);
      plan.scope = Scope::Step;
      const CostBreakdown step = model.evaluate(plan);
      expect_sums_to_step(step);
      // Two nodes: something crosses the network in every layout that splits the sequence.
      if (plan.params.sequence_parallel > 1) {
        EXPECT_GT(attention.parts.transfers_per_layer[int(CommTier::Network)], 0);
      }
      ++checked;
    }
  EXPECT_GT(checked, 10);
}

TEST(StepParts, TiersFollowTheLinks) {
  const Workload w = testing::mha_workload(8192, 8, 64, /*causal=*/false);
  const Topology one_node = testing::switch_nodes(1, 8, 450, /*fast_compute=*/true);
  const CostModel one_node_model(one_node, Calibration::defaults());
  const Plan inside = make_plan(StrategyKind::Ring, enumerate_params(StrategyKind::Ring, w, 8).front(), w, one_node, 8);
  const CostBreakdown a = one_node_model.evaluate(inside);
  EXPECT_EQ(a.parts.exposed_ms[int(CommTier::Network)], 0);
  EXPECT_EQ(a.parts.exposed_ms[int(CommTier::Pcie)], 0);
  EXPECT_EQ(a.parts.transfers_per_layer[int(CommTier::Network)], 0);
  EXPECT_GT(a.parts.exposed_ms[int(CommTier::NvLink)], 0.5 * a.step_ms);  // compute is negligible

  const Topology spread = testing::switch_nodes(8, 1, 450, /*fast_compute=*/true);
  const CostModel spread_model(spread, Calibration::defaults());
  const Plan across = make_plan(StrategyKind::Ring, enumerate_params(StrategyKind::Ring, w, 8).front(), w, spread, 8);
  const CostBreakdown b = spread_model.evaluate(across);
  EXPECT_EQ(b.parts.exposed_ms[int(CommTier::NvLink)], 0);
  EXPECT_GT(b.parts.exposed_ms[int(CommTier::Network)], 0.5 * b.step_ms);
  EXPECT_EQ(b.parts.transfers_per_layer[int(CommTier::NvLink)], 0);
  // The ring's K,V pass P-1 times forward; the backward passes K,V and dK,dV back.
  EXPECT_GE(b.parts.transfers_per_layer[int(CommTier::Network)], 7);
}

}  // namespace
}  // namespace wallfacer
