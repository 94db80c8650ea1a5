// The cost model's list schedule (planner/cost/timeline.hpp) on hand-built programs with round
// durations: when a message's two ends start under each pairing, worked out on paper; and on real
// strategies, that the search's lower bound never exceeds the estimate it bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <set>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "cost_test_util.hpp"
#include "timeline.hpp"
#include "timeline_test_ops.hpp"

namespace wallfacer {
namespace {

using detail::PairMode;
using detail::RankTiming;
using testing::compute_op;
using testing::message;

struct Programs {
  std::vector<RankProgram> ranks;
  std::vector<std::vector<double>> seconds;  // by rank, by op

  int32_t add(int rank, Op op, double duration, std::initializer_list<int32_t> deps = {}) {
    return add(rank, op, duration, std::vector<int32_t>(deps));
  }
  int32_t add(int rank, Op op, double duration, const std::vector<int32_t>& deps) {
    if (ranks.size() <= size_t(rank)) {
      ranks.resize(size_t(rank) + 1);
      seconds.resize(size_t(rank) + 1);
    }
    ranks[size_t(rank)].rank = rank;
    seconds[size_t(rank)].push_back(duration);
    return ranks[size_t(rank)].add(op, deps);
  }

  std::vector<RankTiming> time(PairMode mode, std::vector<int> only = {}) const {
    std::vector<const RankProgram*> programs;
    std::vector<std::vector<double>> durations;
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (!only.empty() && std::find(only.begin(), only.end(), int(r)) == only.end()) continue;
      programs.push_back(&ranks[r]);
      durations.push_back(seconds[r]);
    }
    return detail::time_programs(programs, durations, mode);
  }
};

TEST(CostTimeline, AReceiveWaitsForItsSenderToPostTheMessage) {
  // Rank 0 computes 3 s, then sends for 2 s; rank 1 posts the receive at once and computes 1 s on
  // what arrives. The message moves from 3 to 5, so rank 1 ends at 6.
  Programs p;
  const int32_t work = p.add(0, compute_op(), 3);
  p.add(0, message(OpKind::Send, 1, 7), 2, {work});
  const int32_t arrival = p.add(1, message(OpKind::Recv, 0, 7), 2);
  p.add(1, compute_op(), 1, {arrival});
  const auto matched = p.time(PairMode::Matched);
  EXPECT_DOUBLE_EQ(matched[0].end_s, 5);
  EXPECT_DOUBLE_EQ(matched[1].end_s, 6);
  // Without pairing the receive would end at 2 and rank 1 at 3.
  EXPECT_DOUBLE_EQ(p.time(PairMode::Unpaired)[1].end_s, 3);
}

TEST(CostTimeline, ASampledRanksPartnerPostsWhenTheRankPostsItsOwnEndOfTheTag) {
  // A ring of three: each member computes 3 s, forwards the result (1 s), receives its
  // predecessor's (posted at once) and computes 2 s on it. Every member's message moves at 3..4.
  Programs p;
  for (int r = 0; r < 3; ++r) {
    const int32_t work = p.add(r, compute_op(), 3);
    p.add(r, message(OpKind::Send, (r + 1) % 3, 5), 1, {work});
    const int32_t arrival = p.add(r, message(OpKind::Recv, (r + 2) % 3, 5), 1);
    p.add(r, compute_op(), 2, {arrival});
  }
  for (const RankTiming& t : p.time(PairMode::Matched))
    EXPECT_DOUBLE_EQ(t.end_s, 6);
  // Rank 1 timed alone under the symmetric assumption gives the same answer; unpaired, its
  // receive would end at 1 and its second compute run right after the first, ending at 5.
  EXPECT_DOUBLE_EQ(p.time(PairMode::Symmetric, {1})[0].end_s, 6);
  EXPECT_DOUBLE_EQ(p.time(PairMode::Unpaired, {1})[0].end_s, 5);
}

TEST(CostTimeline, ACollectiveStartsWhenItsLastMemberPostsIt) {
  // Rank 0 computes 3 s before the group's all-gather (1 s); rank 1 posts it at once. Every rank
  // timed: both run it 3..4. A sample assumes the members post together: rank 1 alone ends at 1.
  Programs p;
  const int32_t work = p.add(0, compute_op(), 3);
  Op gather;
  gather.kind = OpKind::AllGather;
  gather.stream = Stream::Collective;
  gather.coll = 0;
  CollectiveSpec spec;
  spec.kind = OpKind::AllGather;
  spec.group = 0;
  p.add(0, gather, 1, {work});
  p.add(1, gather, 1);
  for (RankProgram& program : p.ranks)
    program.collectives = {spec};
  const auto matched = p.time(PairMode::Matched);
  EXPECT_DOUBLE_EQ(matched[0].end_s, 4);
  EXPECT_DOUBLE_EQ(matched[1].end_s, 4);
  EXPECT_DOUBLE_EQ(p.time(PairMode::Symmetric, {1})[0].end_s, 1);
}

TEST(CostTimeline, ForwardAndBackwardRunAsOneProgram) {
  // Rank 0's backward starts when its forward allows: its backward compute follows the forward
  // one on the compute stream, and rank 1's backward receive waits for rank 0's backward send.
  Programs p;
  const int32_t f0 = p.add(0, compute_op(), 4);
  const int32_t b0 = p.add(0, compute_op(Phase::Backward), 1, {f0});
  Op send = message(OpKind::Send, 1, 9);
  send.phase = Phase::Backward;
  p.add(0, send, 2, {b0});
  p.add(1, compute_op(), 1);
  Op recv = message(OpKind::Recv, 0, 9);
  recv.phase = Phase::Backward;
  p.add(1, recv, 2);
  const auto t = p.time(PairMode::Matched);
  EXPECT_DOUBLE_EQ(t[0].forward_end_s, 4);
  EXPECT_DOUBLE_EQ(t[1].forward_end_s, 1);
  EXPECT_DOUBLE_EQ(t[0].end_s, 7);
  EXPECT_DOUBLE_EQ(t[1].end_s, 7);
  EXPECT_DOUBLE_EQ(t[0].compute_forward_s, 4);
  EXPECT_DOUBLE_EQ(t[0].compute_backward_s, 1);
}

TEST(CostTimeline, AnEndThatIsNeverPostedStartsAloneInsteadOfHanging) {
  // Each rank sends only after receiving what the other sends only after receiving: no pairing
  // can start. The first waiting end (rank 0's receive, ready at 0) starts alone (0..1); rank 0's
  // send then meets rank 1's receive (1..2); rank 1's send has lost its partner and runs 2..3.
  Programs p;
  const int32_t r0 = p.add(0, message(OpKind::Recv, 1, 2), 1);
  p.add(0, message(OpKind::Send, 1, 1), 1, {r0});
  const int32_t r1 = p.add(1, message(OpKind::Recv, 0, 1), 1);
  p.add(1, message(OpKind::Send, 0, 2), 1, {r1});
  const auto t = p.time(PairMode::Matched);
  EXPECT_DOUBLE_EQ(t[0].end_s, 2);
  EXPECT_DOUBLE_EQ(t[1].end_s, 3);
}

TEST(CostTimeline, MeetingsThatCannotHappenAreCalledOffOneAtATimeInProgramOrder) {
  // The crossed pair above twice over. First call-off: rank 0's first receive (0..1); its send
  // meets rank 1's first receive (1..2); rank 1's first send runs alone (2..3). Both second
  // receives then wait again (rank 0's ready at 2, rank 1's at 3): the first in program order,
  // rank 0's, is called off (2..3); rank 0's second send meets rank 1's second receive (3..4); rank
  // 1's second send runs alone (4..5). Calling off rank 1's instead would end rank 0 at 6.
  Programs p;
  for (int r = 0; r < 2; ++r) {
    const int other = 1 - r;
    const int32_t first = p.add(r, message(OpKind::Recv, other, r == 0 ? 2 : 1), 1);
    const int32_t sent = p.add(r, message(OpKind::Send, other, r == 0 ? 1 : 2), 1, {first});
    const int32_t second = p.add(r, message(OpKind::Recv, other, r == 0 ? 4 : 3), 1, {sent});
    p.add(r, message(OpKind::Send, other, r == 0 ? 3 : 4), 1, {second});
  }
  const auto t = p.time(PairMode::Matched);
  EXPECT_DOUBLE_EQ(t[0].end_s, 4);
  EXPECT_DOUBLE_EQ(t[1].end_s, 5);
}

// Random programs built from one global order of events (a compute, a message between two ranks,
// a collective of a group), each rank listing its ops in that order: every op's predecessors come
// before it in the order, so one pass over the events gives each its start, the latest ready time
// of its ops (the reference). The timeline must find the same ends; the groups of two meet as
// pairs, the larger ones as meetings.
TEST(CostTimeline, MatchedTimesEqualOnePassOverAGlobalOrderOfEvents) {
  const std::vector<std::vector<int>> groups = {{0, 1}, {0, 1, 2, 3}, {1, 2, 3}, {2, 3}};
  std::vector<CollectiveSpec> specs;
  for (size_t g = 0; g < groups.size(); ++g) {
    CollectiveSpec spec;
    spec.kind = OpKind::AllGather;
    spec.group = int(g);
    specs.push_back(spec);
  }
  std::mt19937 random(20261205);
  for (int trial = 0; trial < 50; ++trial) {
    Programs p;
    std::vector<std::vector<double>> end(4);  // the reference, by rank and op
    std::vector<std::array<int32_t, kNumStreams>> last(4);
    for (auto& streams : last)
      streams.fill(-1);
    auto pick = [&](int n) { return int(random() % unsigned(n)); };
    // The op `op` of rank r, with its stream predecessor and a random earlier op of the rank as
    // dependencies; returns its ready time.
    auto add = [&](int r, Op op, double seconds, int32_t* index) {
      std::vector<int32_t> deps;
      double ready = 0;
      const int32_t before = last[size_t(r)][size_t(op.stream)];
      if (before >= 0) ready = end[size_t(r)][size_t(before)];
      if (!end[size_t(r)].empty() && pick(2) == 0) {
        const int32_t d = pick(int(end[size_t(r)].size()));
        deps.push_back(d);
        ready = std::max(ready, end[size_t(r)][size_t(d)]);
      }
      *index = p.add(r, op, seconds, deps);
      last[size_t(r)][size_t(op.stream)] = *index;
      end[size_t(r)].push_back(0);
      return ready;
    };
    for (int event = 0; event < 60; ++event) {
      const double seconds = 0.25 * (1 + pick(8));
      const int kind = pick(3);
      std::vector<std::pair<int, int32_t>> members;  // (rank, op)
      double start = 0;
      if (kind == 0) {
        int32_t i;
        const int r = pick(4);
        start = add(r, compute_op(), seconds, &i);
        members.push_back({r, i});
      } else if (kind == 1) {
        const int a = pick(4), b = (a + 1 + pick(3)) % 4, tag = pick(2);
        int32_t i, j;
        start = std::max(add(a, message(OpKind::Send, b, tag), seconds, &i),
                         add(b, message(OpKind::Recv, a, tag), seconds, &j));
        members = {{a, i}, {b, j}};
      } else {
        const int g = pick(int(groups.size()));
        Op gather;
        gather.kind = OpKind::AllGather;
        gather.stream = Stream::Collective;
        gather.coll = g;
        for (int r : groups[size_t(g)]) {
          int32_t i;
          start = std::max(start, add(r, gather, seconds, &i));
          members.push_back({r, i});
        }
      }
      for (auto [r, i] : members)
        end[size_t(r)][size_t(i)] = start + seconds;
    }
    for (RankProgram& program : p.ranks)
      program.collectives = specs;
    std::vector<const RankProgram*> programs;
    for (const RankProgram& program : p.ranks)
      programs.push_back(&program);
    std::vector<std::vector<double>> ends;
    const auto timings = detail::TimelineShape(programs, PairMode::Matched).run(p.seconds, &ends);
    ASSERT_EQ(ends.size(), end.size());
    for (size_t r = 0; r < end.size(); ++r) {
      ASSERT_EQ(ends[r].size(), end[r].size()) << "rank " << r;
      for (size_t i = 0; i < end[r].size(); ++i)
        EXPECT_DOUBLE_EQ(ends[r][i], end[r][i]) << "trial " << trial << ", rank " << r << ", op " << i;
      EXPECT_DOUBLE_EQ(timings[r].end_s, *std::max_element(end[r].begin(), end[r].end()));
    }
  }
}

// Shapes built one after another keep the orders they derive in a library (OrderLibrary) and take
// them for later programs that wait alike: the same flat order, template ops on the same streams
// in the same phases. A program whose ops run in another phase, or with a flat order of its own,
// gets an order of its own, so each is timed as by a shape of its own; so is every program when
// the library has no room. Two compute ops of 1 and 2 s: both forward, or the second in the
// backward; then a third of 4 s.
TEST(CostTimeline, ShapesSharingOrdersTimeEachProgramAsAlone) {
  RankProgram forward, mixed, longer;
  forward.add(compute_op());
  forward.add(compute_op());
  mixed.add(compute_op());
  mixed.add(compute_op(Phase::Backward));
  longer = mixed;
  longer.add(compute_op(Phase::Backward));
  auto unrolled_as_is = [](const RankProgram& program) {
    FlatStep flat;
    for (uint32_t i = 0; i < program.ops.size(); ++i)
      flat.origin.push_back(i);
    flat.dep_begin.assign(program.ops.size() + 1, 0);
    return flat;
  };
  const FlatStep two = unrolled_as_is(forward), three = unrolled_as_is(longer);
  struct Case {
    const RankProgram* program;
    const FlatStep* flat;
    double forward_s, backward_s;
  };
  const double durations[] = {1, 2, 4};
  for (size_t budget : {detail::OrderLibrary::kDefaultBudgetBytes, size_t(0)}) {  // keeping them, or none
    detail::OrderLibrary library(budget);
    for (const Case& c : {Case{&forward, &two, 3, 0}, Case{&mixed, &two, 1, 2}, Case{&forward, &two, 3, 0},
                          Case{&longer, &three, 1, 6}, Case{&mixed, &two, 1, 2}}) {
      const std::vector<std::vector<double>> seconds = {std::vector<double>(durations, durations + c.flat->size())};
      const RankTiming shared =
          detail::TimelineShape({detail::ProgramView(*c.program, *c.flat)}, PairMode::Unpaired, &library)
              .run(seconds)[0];
      EXPECT_DOUBLE_EQ(shared.compute_forward_s, c.forward_s);
      EXPECT_DOUBLE_EQ(shared.compute_backward_s, c.backward_s);
      EXPECT_DOUBLE_EQ(shared.forward_end_s, c.backward_s > 0 ? 1 : 3);
      EXPECT_DOUBLE_EQ(shared.end_s, c.forward_s + c.backward_s);
    }
  }
}

// A sampled step's columns of one program each share whom their ops meet when they pair alike
// (OrderLibrary): a rank's send and receive of one tag meet, so programs whose message ends differ
// in a tag pair differently. Compute 1 s, then a send of tag 1 (0.5 s); a receive (2 s) of tag 1
// meets the send and starts at 1 s, one of tag 2 meets nothing and starts at 0.
TEST(CostTimeline, ShapesSharingPairsPairEachLoneProgramByItsOwnTags) {
  auto program_receiving = [](int tag) {
    RankProgram program;
    program.add(compute_op());
    program.add(message(OpKind::Send, 0, 1));
    program.add(message(OpKind::Recv, 0, tag));
    return program;
  };
  const RankProgram same = program_receiving(1), other = program_receiving(2);
  FlatStep flat;
  flat.origin = {0, 1, 2};
  flat.dep_begin = {0, 0, 1, 1};  // the send waits for the compute op
  flat.deps = {0};
  const std::vector<std::vector<double>> seconds = {{1, 0.5, 2}};
  detail::OrderLibrary library;
  for (const auto& [program, receive_end] : {std::pair{&same, 3.0}, std::pair{&other, 2.0}, std::pair{&same, 3.0}}) {
    std::vector<std::vector<double>> ends;
    detail::TimelineShape({detail::ProgramView(*program, flat)}, PairMode::Symmetric, &library).run(seconds, &ends);
    EXPECT_DOUBLE_EQ(ends[0][2], receive_end);
    EXPECT_DOUBLE_EQ(ends[0][1], 1.5);
  }
}

// The cost model copies a lone sampled program's timing from one timed before when they time alike
// (detail::times_alike) and their template durations are equal: the same flat order, the same
// streams and phases, the same kinds and tags, and no pipeline stage message (which meets the rest
// of its column).
TEST(CostTimeline, LoneProgramsTimeAlikeOnlyWithTheSameOrderPhasesAndTags) {
  auto program_receiving = [](int tag, Phase phase = Phase::Forward) {
    RankProgram program;
    program.add(compute_op(phase));
    program.add(message(OpKind::Send, 0, 1));
    program.add(message(OpKind::Recv, 0, tag));
    return program;
  };
  const RankProgram same = program_receiving(1), copy = program_receiving(1), other_tag = program_receiving(2),
                    backward = program_receiving(1, Phase::Backward);
  RankProgram stage = same;
  stage.ops[1].fields = fieldset::kActivation;
  FlatStep flat, equal_flat;
  flat.origin = equal_flat.origin = {0, 1, 2};
  flat.dep_begin = equal_flat.dep_begin = {0, 0, 1, 1};
  flat.deps = equal_flat.deps = {0};
  using detail::ProgramView;
  EXPECT_TRUE(detail::times_alike(ProgramView(same, flat), ProgramView(copy, flat)));
  EXPECT_FALSE(detail::times_alike(ProgramView(same, flat), ProgramView(other_tag, flat)));
  EXPECT_FALSE(detail::times_alike(ProgramView(same, flat), ProgramView(backward, flat)));
  EXPECT_FALSE(detail::times_alike(ProgramView(same, flat), ProgramView(copy, equal_flat)));  // another unrolled order
  EXPECT_FALSE(detail::times_alike(ProgramView(stage, flat), ProgramView(stage, flat)));
  const std::vector<std::vector<double>> seconds = {{1, 0.5, 2}};
  std::vector<std::vector<double>> a, b;
  detail::TimelineShape({ProgramView(same, flat)}, PairMode::Symmetric).run(seconds, &a);
  detail::TimelineShape({ProgramView(copy, flat)}, PairMode::Symmetric).run(seconds, &b);
  EXPECT_EQ(a, b);
}

TEST(CostTimeline, TheSearchBoundNeverExceedsTheEstimate) {
  // Rank 0 timed without pairing is a lower bound on the whole plan's estimate, for every
  // strategy (the heuristic search prunes on it).
  const Topology topology = testing::switch_nodes(2, 4);
  const Workload w = testing::mha_workload(8 * 4096, 8, 64, /*causal=*/true);
  const CostModel model(topology, Calibration::defaults());
  std::set<StrategyKind> covered;
  for (StrategyKind kind : all_strategies()) {
    for (const StrategyParams& params : enumerate_params(kind, w, 8)) {
      if (!check_feasible(kind, params, w, 8).ok) continue;
      const Plan plan = make_plan(kind, params, w, topology, 8);
      Schedule first, all;
      model.build_timed(plan, first, 1);
      model.build_timed(plan, all);
      const double bound = model.evaluate_times(plan, first, Timing::LowerBound).step_ms;
      const double estimate = model.evaluate_times(plan, all).step_ms;
      EXPECT_LE(bound, estimate * (1 + 1e-12))
          << to_string(kind) << " C=" << team_size(params) << " u=" << ulysses_degree(params)
          << " w=" << window_size(params) << " D=" << params.data_parallel;
      EXPECT_GT(bound, 0);
      covered.insert(kind);
    }
  }
  EXPECT_EQ(covered.size(), all_strategies().size());
}

}  // namespace
}  // namespace wallfacer
