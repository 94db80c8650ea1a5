// The bounds a sampled column of one program gets without being timed (detail::lone_bounds): on
// the unrolled step templates of every strategy, with random durations, they sum the compute as a
// run does, bit for bit, and the run ends within them; and on hand-built programs, the forward's
// bound falls back to the end's when a forward op waits for or meets the backward. With compute
// slowed by communication, the slowed bounds hold the slowed run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "cost_test_util.hpp"
#include "timeline.hpp"
#include "timeline_test_ops.hpp"

namespace wallfacer {
namespace {

using detail::LoneBounds;
using detail::PairMode;
using detail::ProgramView;
using detail::RankTiming;

// `kept` below 1: compute slowed by communication (RunOptions::compute_kept_under_comm).
RankTiming run_alone(const ProgramView& program, const std::vector<double>& seconds, double kept = 1) {
  detail::TimelineShape::RunOptions options;
  options.by_template_op = program.flat();
  options.compute_kept_under_comm = kept;
  return detail::TimelineShape({program}, PairMode::Symmetric).run({seconds}, nullptr, options).front();
}

// A program's ops in program order, unrolled once each (a flat step that copies every op).
FlatStep flat_of(const RankProgram& program) {
  FlatStep flat;
  flat.dep_begin.push_back(0);
  for (size_t i = 0; i < program.ops.size(); ++i) {
    flat.origin.push_back(uint32_t(i));
    flat.deps.insert(flat.deps.end(), program.deps_begin(program.ops[i]), program.deps_end(program.ops[i]));
    flat.dep_begin.push_back(uint32_t(flat.deps.size()));
  }
  return flat;
}

TEST(LoneBounds, BoundTheRunOfEveryStrategysUnrolledSteps) {
  const Topology topology = testing::switch_nodes(2, 4);
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> uniform(0.0, 1e-3);
  int programs = 0, forward_first = 0, forward_bound_is_end = 0, slowed_runs = 0;
  for (int microbatches : {1, 2}) {
    Workload w = testing::mha_workload(4096, 8, 64, /*causal=*/true, microbatches);
    w.layers = 3;
    w.kv_heads = 4;
    w.ffn = 1024;
    w.vocab = 2048;
    w.microbatches = microbatches;
    w.zero_stage = microbatches == 1 ? 3 : 1;
    w.checkpointing = microbatches == 1 ? Checkpointing::Full : Checkpointing::None;
    for (StrategyKind kind : all_strategies())
      for (const StrategyParams& params : enumerate_params(kind, w, 8)) {
        if (!check_feasible(kind, params, w, 8).ok) continue;
        Plan plan = make_plan(kind, params, w, topology, 8);
        plan.scope = Scope::Step;
        const StepBuilder builder(plan);
        TokenSetPool pool;
        for (int rank : {0, 3, 7}) {
          SCOPED_TRACE(fmt::format("{} M={} rank {}", to_string(kind), microbatches, rank));
          const StepTemplate step = builder.build_template(rank, pool);
          const FlatStep flat = unroll_flat(step);
          const ProgramView view(step.program, flat);
          std::vector<double> seconds;
          for (size_t i = 0; i < step.program.ops.size(); ++i)
            seconds.push_back(i % 7 == 0 ? 0.0 : uniform(random));
          const std::optional<LoneBounds> bounds = detail::lone_bounds(view, seconds);
          ASSERT_TRUE(bounds.has_value());
          const RankTiming run = run_alone(view, seconds);
          EXPECT_EQ(bounds->compute_forward_s, run.compute_forward_s);
          EXPECT_EQ(bounds->compute_backward_s, run.compute_backward_s);
          EXPECT_LE(run.end_s, bounds->end_s * (1 + 1e-12));
          EXPECT_LE(run.forward_end_s, bounds->forward_end_s * (1 + 1e-12));
          // Compute slowed by communication: the run ends within the slowed bounds, and its
          // compute less what the slowdown added is the bounds' (the work a left-out column has).
          for (const double kept : {0.841, 0.5}) {
            const RankTiming slowed = run_alone(view, seconds, kept);
            const LoneBounds b = detail::slowed_bounds(*bounds, kept);
            EXPECT_LE(slowed.end_s, b.end_s * (1 + 1e-12)) << kept;
            EXPECT_LE(slowed.forward_end_s, b.forward_end_s * (1 + 1e-12)) << kept;
            EXPECT_NEAR(slowed.compute_forward_s + slowed.compute_backward_s - slowed.slowdown_s,
                        bounds->compute_forward_s + bounds->compute_backward_s, 1e-12 * bounds->end_s)
                << kept;
            slowed_runs += slowed.slowdown_s > 0;
          }
          ++programs;
          forward_first += bounds->forward_end_s < bounds->end_s;
          forward_bound_is_end += bounds->forward_end_s == bounds->end_s;
        }
      }
  }
  EXPECT_GT(programs, 50);
  // One micro-batch runs its forward first; with two, the second forward follows the first backward.
  EXPECT_GT(forward_first, 20);
  EXPECT_GT(forward_bound_is_end, 20);
  EXPECT_GT(slowed_runs, programs);  // most runs, at both shares, have compute beside transfers
}

TEST(LoneBounds, ForwardWaitingForTheBackwardIsBoundedByTheEnd) {
  using testing::compute_op;
  using testing::message;
  // forward 1 s, backward 2 s, then a forward op of 0.5 s that waits for the backward.
  RankProgram waits;
  const int32_t backward = [&] {
    waits.add(compute_op());
    return waits.add(compute_op(Phase::Backward));
  }();
  Op late = compute_op();
  late.stream = Stream::Collective;
  waits.add(late, {backward});
  const FlatStep waits_flat = flat_of(waits);
  const std::vector<double> seconds = {1, 2, 0.5};
  std::optional<LoneBounds> bounds = detail::lone_bounds(ProgramView(waits, waits_flat), seconds);
  ASSERT_TRUE(bounds.has_value());
  EXPECT_EQ(bounds->forward_end_s, 3.5);
  EXPECT_EQ(run_alone(ProgramView(waits, waits_flat), seconds).forward_end_s, 3.5);

  // A forward receive that meets a backward send of its tag.
  RankProgram meets;
  meets.add(compute_op());
  Op send = message(OpKind::Send, 0, 5);
  send.phase = Phase::Backward;
  meets.add(compute_op(Phase::Backward));
  meets.add(send, {1});
  meets.add(message(OpKind::Recv, 0, 5));
  const FlatStep meets_flat = flat_of(meets);
  const std::vector<double> meet_seconds = {1, 2, 0.5, 0.25};
  bounds = detail::lone_bounds(ProgramView(meets, meets_flat), meet_seconds);
  ASSERT_TRUE(bounds.has_value());
  EXPECT_EQ(bounds->forward_end_s, bounds->end_s);
  EXPECT_EQ(run_alone(ProgramView(meets, meets_flat), meet_seconds).forward_end_s, 3.25);
  // The same receive meeting a forward send: the forward runs first, within its own ops' sum.
  RankProgram forward_pair;
  forward_pair.add(compute_op());
  forward_pair.add(compute_op(Phase::Backward));
  forward_pair.add(message(OpKind::Send, 0, 5));
  forward_pair.add(message(OpKind::Recv, 0, 5));
  const FlatStep pair_flat = flat_of(forward_pair);
  bounds = detail::lone_bounds(ProgramView(forward_pair, pair_flat), meet_seconds);
  ASSERT_TRUE(bounds.has_value());
  EXPECT_EQ(bounds->forward_end_s, 1.75);
  EXPECT_LE(run_alone(ProgramView(forward_pair, pair_flat), meet_seconds).forward_end_s, 1.75);

  // No bounds for a negative duration, a pipeline stage message, or a program not unrolled.
  EXPECT_FALSE(detail::lone_bounds(ProgramView(waits, waits_flat), {1, -2, 0.5}).has_value());
  RankProgram stage = forward_pair;
  stage.ops[2].fields = fieldset::kActivation;
  EXPECT_FALSE(detail::lone_bounds(ProgramView(stage, pair_flat), meet_seconds).has_value());
  EXPECT_FALSE(detail::lone_bounds(ProgramView(waits), seconds).has_value());
}

// The k-th send of a tag meets its k-th receive: the forward runs first only when each pair has
// one phase. Ends of a tag on one stream come forward first (counted); ends of a tag on two
// streams may not, and are compared pair by pair.
TEST(LoneBounds, MessagesOfATagPairByTheirPlaceAmongThatTagsEnds) {
  using testing::compute_op;
  using testing::message;
  auto program_of = [](const std::vector<Op>& messages) {
    RankProgram p;
    p.add(compute_op());
    p.add(compute_op(Phase::Backward));
    for (const Op& m : messages)
      p.add(m);
    return p;
  };
  auto end = [](OpKind kind, Phase phase, Stream stream) {
    Op op = message(kind, 0, 5);
    op.phase = phase;
    op.stream = stream;
    return op;
  };
  const Phase F = Phase::Forward, B = Phase::Backward;
  const Stream S = Stream::Send, R = Stream::Recv, C = Stream::Collective;
  struct Case {
    std::string what;
    std::vector<Op> messages;
    bool forward_first;
  };
  const std::vector<Case> cases = {
      {"two forward pairs, one backward send unmatched",
       {end(OpKind::Send, F, S), end(OpKind::Send, F, S), end(OpKind::Send, B, S), end(OpKind::Recv, F, R),
        end(OpKind::Recv, F, R)},
       true},
      {"the second send backward, the second receive forward",
       {end(OpKind::Send, F, S), end(OpKind::Send, B, S), end(OpKind::Recv, F, R), end(OpKind::Recv, F, R)},
       false},
      {"sends backward then forward (two streams), receives alike",
       {end(OpKind::Send, B, S), end(OpKind::Send, F, C), end(OpKind::Recv, B, R), end(OpKind::Recv, F, C)},
       true},
      {"sends backward then forward (two streams), receives forward then backward",
       {end(OpKind::Send, B, S), end(OpKind::Send, F, C), end(OpKind::Recv, F, R), end(OpKind::Recv, B, R)},
       false},
  };
  for (const Case& c : cases) {
    const RankProgram p = program_of(c.messages);
    const FlatStep flat = flat_of(p);
    const std::vector<double> seconds(p.ops.size(), 1.0);
    const std::optional<LoneBounds> bounds = detail::lone_bounds(ProgramView(p, flat), seconds);
    ASSERT_TRUE(bounds.has_value()) << c.what;
    double forward_sum = 0;
    for (const Op& op : p.ops)
      forward_sum += op.phase == Phase::Forward;
    EXPECT_EQ(bounds->forward_end_s, c.forward_first ? forward_sum : bounds->end_s) << c.what;
    EXPECT_EQ(bounds->end_s, double(p.ops.size())) << c.what;
  }
}

// A column is left untimed only when it ends before the latest end so far, by more than rounding,
// and its forward ends no later than the latest forward.
TEST(LoneBounds, AColumnIsLeftOutOnlyWhenItCannotEndLastNorEndTheForwardLast) {
  LoneBounds bounds;
  bounds.end_s = 10;
  bounds.forward_end_s = 4;
  EXPECT_TRUE(detail::may_leave_out(bounds, 11, 4.5));
  EXPECT_FALSE(detail::may_leave_out(bounds, 10, 4.5));               // it may tie with the latest
  EXPECT_FALSE(detail::may_leave_out(bounds, 10 * (1 + 1e-9), 4.5));  // within rounding of it
  EXPECT_FALSE(detail::may_leave_out(bounds, 9, 5));                  // it may end last
  EXPECT_FALSE(detail::may_leave_out(bounds, 11, 3.5));               // its forward may end last
  EXPECT_FALSE(detail::may_leave_out(bounds, 11, 4));                 // or within rounding of the latest
}

// With compute slowed by communication to `kept` of its speed, a compute op lasts at most 1 / kept
// as long: the bounds grow by (1 / kept - 1) of the compute they sum, the forward's by its own
// compute's when the forward runs first, else it stays the end's.
TEST(LoneBounds, SlowedBoundsGrowByTheirComputeOverWhatItKeeps) {
  LoneBounds bounds;
  bounds.end_s = 10;
  bounds.forward_end_s = 4;
  bounds.compute_forward_s = 2;
  bounds.compute_backward_s = 3;
  const LoneBounds half = detail::slowed_bounds(bounds, 0.5);
  EXPECT_DOUBLE_EQ(half.end_s, 15);
  EXPECT_DOUBLE_EQ(half.forward_end_s, 6);
  EXPECT_EQ(half.compute_forward_s, 2);  // the work the summary reads stays at full speed
  EXPECT_EQ(half.compute_backward_s, 3);
  bounds.forward_end_s = bounds.end_s;  // a forward op waits for the backward
  EXPECT_DOUBLE_EQ(detail::slowed_bounds(bounds, 0.5).forward_end_s, 15);
  EXPECT_EQ(detail::slowed_bounds(bounds, 1).end_s, 10);
}

}  // namespace
}  // namespace wallfacer
