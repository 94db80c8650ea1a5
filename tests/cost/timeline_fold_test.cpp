// Chains of collectives folded into one op (planner/cost/timeline_fold.hpp): which ops fold, and
// that a timeline with folded chains gives every op the end it gets when every op runs on its own,
// worked out on paper and against the same programs timed unfolded (a program that is not a flat
// step is never folded). Only every rank timed together (PairMode::Matched) folds; the other
// pairings are timed both ways too, to the same ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "timeline.hpp"
#include "timeline_fold.hpp"
#include "timeline_test_ops.hpp"

namespace wallfacer {
namespace {

using detail::PairMode;
using detail::ProgramView;
using detail::RankTiming;
using testing::compute_op;
using testing::message;

// A bucket of a gradient or parameter synchronisation: collective `coll` on the sync stream.
Op bucket(int32_t coll, Phase phase = Phase::Forward) {
  Op op;
  op.kind = OpKind::AllGather;
  op.stream = Stream::Sync;
  op.coll = coll;
  op.phase = phase;
  return op;
}

// The program as a flat step of itself: op i copies template op i.
FlatStep flat_of(const RankProgram& program) {
  FlatStep flat;
  flat.dep_begin.push_back(0);
  for (uint32_t i = 0; i < program.ops.size(); ++i) {
    flat.origin.push_back(i);
    flat.deps.insert(flat.deps.end(), program.deps_begin(program.ops[i]), program.deps_end(program.ops[i]));
    flat.dep_begin.push_back(uint32_t(flat.deps.size()));
  }
  return flat;
}

// Programs whose collectives 0 and 1 are of groups 0 and 1 (every rank a member).
struct Programs {
  std::vector<RankProgram> ranks;
  std::vector<std::vector<double>> seconds;  // by rank, by op

  int32_t add(int rank, Op op, double duration, std::vector<int32_t> deps = {}) {
    if (ranks.size() <= size_t(rank)) {
      ranks.resize(size_t(rank) + 1);
      seconds.resize(size_t(rank) + 1);
    }
    RankProgram& program = ranks[size_t(rank)];
    program.rank = rank;
    if (program.collectives.empty()) {
      program.collectives.resize(2);
      program.collectives[1].group = 1;
      for (CollectiveSpec& spec : program.collectives)
        spec.kind = OpKind::AllGather;
      program.collectives[0].group = 0;
    }
    seconds[size_t(rank)].push_back(duration);
    return program.add(op, deps);
  }

  // Every op's end, timed as flat steps (folded) or as plain programs (never folded).
  std::vector<std::vector<double>> ends(PairMode mode, bool flat, std::vector<RankTiming>* timings = nullptr) const {
    std::vector<FlatStep> flats;
    flats.reserve(ranks.size());
    std::vector<ProgramView> views;
    for (const RankProgram& program : ranks) {
      flats.push_back(flat_of(program));
      views.push_back(flat ? ProgramView(program, flats.back()) : ProgramView(program));
    }
    std::vector<std::vector<double>> out;
    const std::vector<RankTiming> times = detail::TimelineShape(views, mode).run(seconds, &out);
    if (timings) *timings = times;
    return out;
  }
};

void expect_same_timings(const std::vector<RankTiming>& a, const std::vector<RankTiming>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t p = 0; p < a.size(); ++p) {
    EXPECT_EQ(a[p].end_s, b[p].end_s);
    EXPECT_EQ(a[p].forward_end_s, b[p].forward_end_s);
    EXPECT_EQ(a[p].compute_forward_s, b[p].compute_forward_s);
    EXPECT_EQ(a[p].compute_backward_s, b[p].compute_backward_s);
  }
}

// Timed folded and unfolded, every op ends at the same time and every rank's totals are equal.
void expect_folded_as_unfolded(const Programs& p, PairMode mode) {
  std::vector<RankTiming> folded_times, unfolded_times;
  EXPECT_EQ(p.ends(mode, true, &folded_times), p.ends(mode, false, &unfolded_times)) << int(mode);
  expect_same_timings(folded_times, unfolded_times);
}

size_t kept_ops(const RankProgram& program) {
  const FlatStep flat = flat_of(program);
  const auto fold = detail::fold_collective_chains(ProgramView(program, flat));
  return fold ? fold->kept.size() : program.ops.size();
}

// Three ranks compute (1, 2, 3 s), then gather four buckets of weights that wait for that
// compute, each bucket lasting a different time on each rank, then compute 2 s on the last; then
// a backward chain of three buckets of group 1 and a last compute.
Programs bucketed_step() {
  Programs p;
  for (int r = 0; r < 3; ++r) {
    const int32_t work = p.add(r, compute_op(), 1 + r);
    int32_t last = -1;
    for (int k = 0; k < 4; ++k)
      last = p.add(r, bucket(0), 0.5 + 0.25 * k + 0.1 * ((r + k) % 3), {work});
    const int32_t use = p.add(r, compute_op(), 2, {last});
    for (int k = 0; k < 3; ++k)
      last = p.add(r, bucket(1, Phase::Backward), 0.125 * (k + 1) + 0.0625 * r, {use});
    p.add(r, compute_op(Phase::Backward), 1, {last});
  }
  return p;
}

TEST(CostTimelineFold, ChainsOfBucketsTimeAsEveryOpRunOnItsOwn) {
  const Programs p = bucketed_step();
  // Each rank keeps its two computes, the last bucket of each chain and the last compute.
  for (const RankProgram& program : p.ranks)
    EXPECT_EQ(kept_ops(program), 5u);
  for (PairMode mode : {PairMode::Matched, PairMode::Symmetric, PairMode::Unpaired})
    expect_folded_as_unfolded(p, mode);
  // On paper, every rank timed: the buckets meet once the last rank computed, at 3 s, and each
  // next one once every rank ended the one before (the rank with the longest bucket); each rank
  // computes on its last bucket as soon as it ends there.
  double at = 3;
  for (int k = 0; k < 3; ++k) {
    double next = 0;
    for (int r = 0; r < 3; ++r)
      next = std::max(next, at + p.seconds[size_t(r)][size_t(1 + k)]);
    at = next;
  }
  EXPECT_NEAR(at, 3 + 0.7 + 0.95 + 1.2, 1e-12);
  const std::vector<std::vector<double>> ends = p.ends(PairMode::Matched, true);
  for (int r = 0; r < 3; ++r)
    EXPECT_DOUBLE_EQ(ends[size_t(r)][5], at + p.seconds[size_t(r)][4] + 2) << "rank " << r;
}

TEST(CostTimelineFold, OnlyOpsThatNothingElseWaitsForFoldIntoTheNextOfTheirGroupAndPhase) {
  Programs p;
  const int32_t work = p.add(0, compute_op(), 1);
  const int32_t more = p.add(0, compute_op(), 1, {work});
  p.add(0, bucket(0), 1, {work});                                // 2: folds into the next
  p.add(0, bucket(0), 1, {work});                                // 3: the next waits for more than the chain's start
  const int32_t watched = p.add(0, bucket(0), 1, {work, more});  // 4: a compute waits for it
  p.add(0, bucket(0), 1, {work});                                // 5: the next is of another group
  p.add(0, bucket(1), 1, {work});                                // 6: the next is of another phase
  const int32_t last = p.add(0, bucket(1, Phase::Backward), 1, {work});
  p.add(0, compute_op(), 1, {last});
  p.add(0, compute_op(), 1, {watched});
  EXPECT_EQ(kept_ops(p.ranks[0]), 9u);
  // A chain that nothing watches folds to its last bucket.
  Programs q;
  const int32_t start = q.add(0, compute_op(), 1);
  int32_t end = -1;
  for (int k = 0; k < 5; ++k)
    end = q.add(0, bucket(0), 1, {start});
  q.add(0, compute_op(), 1, {end});
  EXPECT_EQ(kept_ops(q.ranks[0]), 3u);
}

TEST(CostTimelineFold, MembersThatFoldDifferentChainsAreTimedUnfolded) {
  // Rank 2 computes on its second bucket, so it folds two chains of two where the others fold
  // one of four: the members' ops would meet other ops than unfolded.
  Programs p = bucketed_step();
  RankProgram& odd = p.ranks[2];
  const int32_t second = 2;  // ops: compute, buckets 1..4
  ASSERT_EQ(odd.ops[size_t(second)].kind, OpKind::AllGather);
  p.add(2, compute_op(), 0.5, {second});
  EXPECT_EQ(kept_ops(p.ranks[2]), 7u);
  EXPECT_EQ(kept_ops(p.ranks[0]), 5u);
  expect_folded_as_unfolded(p, PairMode::Matched);
}

TEST(CostTimelineFold, MeetingsOfFoldedOpsThatCannotHappenAreCalledOffAsUnfolded) {
  // Rank 0 gathers two buckets, receives from rank 1, then sends what rank 1 waits for before
  // its own buckets: the buckets never meet, and the meetings are called off one at a time in
  // program order. Folded or not, every op ends at the same time.
  Programs p;
  p.add(0, bucket(0), 1);
  const int32_t later = p.add(0, message(OpKind::Recv, 1, 3), 0.5);
  const int32_t gathered = p.add(0, bucket(0), 2);
  p.add(0, message(OpKind::Send, 1, 4), 1, {gathered});
  p.add(0, compute_op(), 1, {later});
  const int32_t arrival = p.add(1, message(OpKind::Recv, 0, 4), 1);
  p.add(1, message(OpKind::Send, 0, 3), 0.25, {arrival});
  p.add(1, bucket(0), 1.5, {arrival});
  p.add(1, bucket(0), 0.75, {arrival});
  EXPECT_EQ(kept_ops(p.ranks[0]), 4u);
  EXPECT_EQ(kept_ops(p.ranks[1]), 3u);
  expect_folded_as_unfolded(p, PairMode::Matched);
}

TEST(CostTimelineFold, ChainsWithADurationBelowZeroAreTimedUnfolded) {
  // Folding relies on each bucket ending no earlier than it starts; with one that does not, the
  // programs are timed unfolded.
  // (Unfolded, the third buckets then start when the last rank's compute ends, not 10 s before.)
  Programs p = bucketed_step();
  for (std::vector<double>& seconds : p.seconds)
    seconds[2] = -10;
  for (PairMode mode : {PairMode::Matched, PairMode::Symmetric, PairMode::Unpaired})
    expect_folded_as_unfolded(p, mode);
}

TEST(CostTimelineFold, RunsReadDurationsByTemplateOpAndTakeTheEndsOfTheProgramAskedFor) {
  // Two ranks, each a flat step copying its template (a compute, then a bucket on it) three
  // times: durations listed once per template op give the ends that listing every copy gives.
  Programs p;
  for (int r = 0; r < 2; ++r) {
    const int32_t work = p.add(r, compute_op(), 1 + r);
    p.add(r, bucket(0), 0.5 + 0.25 * r, {work});
  }
  std::vector<FlatStep> flats;
  std::vector<ProgramView> views;
  std::vector<std::vector<double>> per_op(2);
  flats.reserve(2);
  for (int r = 0; r < 2; ++r) {
    FlatStep& flat = flats.emplace_back();
    flat.dep_begin.push_back(0);
    for (uint32_t copy = 0; copy < 3; ++copy) {
      flat.origin.insert(flat.origin.end(), {0, 1});
      flat.deps.push_back(int32_t(2 * copy));  // the bucket of each copy waits for its compute
      flat.dep_begin.insert(flat.dep_begin.end(), {uint32_t(flat.deps.size() - 1), uint32_t(flat.deps.size())});
      per_op[size_t(r)].insert(per_op[size_t(r)].end(), p.seconds[size_t(r)].begin(), p.seconds[size_t(r)].end());
    }
    views.emplace_back(p.ranks[size_t(r)], flat);
  }
  const detail::TimelineShape shape(views, PairMode::Matched);
  std::vector<std::vector<double>> listed, by_template, one;
  const std::vector<RankTiming> times = shape.run(per_op, &listed);
  detail::TimelineShape::RunOptions options;
  options.by_template_op = true;
  expect_same_timings(shape.run(p.seconds, &by_template, options), times);
  EXPECT_EQ(by_template, listed);
  // Rank 1 computes longer: each copy's bucket meets when its third compute of 2 s ends, and
  // rank 1's lasts longer, so it ends last, at 6.75.
  EXPECT_DOUBLE_EQ(times[0].end_s, 6.5);
  EXPECT_DOUBLE_EQ(times[1].end_s, 6.75);
  EXPECT_EQ(detail::critical_program(times), 1u);
  options.ends_of = detail::critical_program;
  shape.run(p.seconds, &one, options);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_TRUE(one[0].empty());
  EXPECT_EQ(one[1], listed[1]);
}

}  // namespace
}  // namespace wallfacer
