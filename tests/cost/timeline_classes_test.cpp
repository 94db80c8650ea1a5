// Ranks timed by class (planner/cost/timeline_classes.hpp): which ranks the refinement puts in one
// class, worked out by hand on rings and groups, and that timing one renamed representative per
// class gives every rank the timing and every op the end it gets when every rank is timed. Cases
// the quotient cannot stand for (one rank unlike all others, an end without its other end, names
// a representative would merge) give no classes.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "timeline.hpp"
#include "timeline_classes.hpp"
#include "timeline_test_ops.hpp"

namespace wallfacer {
namespace {

using detail::PairMode;
using detail::ProgramView;
using detail::RankTiming;
using testing::compute_op;
using testing::message;

// Ranks with one program shape each (same ops, streams and dependencies), written by `write`,
// sharing one flat step of themselves (op i copies template op i).
struct Ranks {
  std::vector<RankProgram> programs;
  std::vector<std::vector<double>> seconds;  // by rank, by op
  FlatStep flat;

  std::vector<ProgramView> views() const {
    std::vector<ProgramView> out;
    for (const RankProgram& program : programs)
      out.emplace_back(program, flat);
    return out;
  }
  void finish() {
    const RankProgram& first = programs.front();
    flat.dep_begin.push_back(0);
    for (uint32_t i = 0; i < first.ops.size(); ++i) {
      flat.origin.push_back(i);
      flat.deps.insert(flat.deps.end(), first.deps_begin(first.ops[i]), first.deps_end(first.ops[i]));
      flat.dep_begin.push_back(uint32_t(flat.deps.size()));
    }
  }
};

// `n` ranks, each in a ring of `ring` ranks (consecutive ranks): compute, send to the next member
// and receive from the one before (tag 7), compute on what came in, then an all-gather of group 0
// (every rank) and of its ring's group (1 + ring index). Rank r's ops last `scale(r)` times 1 s.
template <typename Scale>
Ranks rings(int n, int ring, Scale scale) {
  Ranks r;
  for (int rank = 0; rank < n; ++rank) {
    RankProgram& p = r.programs.emplace_back();
    p.rank = rank;
    const int first = rank / ring * ring, next = first + (rank - first + 1) % ring,
              before = first + (rank - first + ring - 1) % ring;
    p.collectives.resize(2);
    p.collectives[0].kind = p.collectives[1].kind = OpKind::AllGather;
    p.collectives[0].group = 0;
    p.collectives[1].group = 1 + rank / ring;
    const int32_t a = p.add(compute_op());
    p.add(message(OpKind::Send, next, 7), {a});
    const int32_t in = p.add(message(OpKind::Recv, before, 7));
    const int32_t b = p.add(compute_op(Phase::Backward), {in});
    for (int32_t coll : {0, 1}) {
      Op gather;
      gather.kind = OpKind::AllGather;
      gather.stream = Stream::Sync;
      gather.coll = coll;
      p.add(gather, {b});
    }
    r.seconds.push_back(std::vector<double>(p.ops.size(), scale(rank)));
  }
  r.finish();
  return r;
}

// Timed by class, every rank's timing and every op's end equal those of every rank timed.
void expect_quotient_times_every_rank(const Ranks& r, const detail::RankClasses& classes) {
  const std::vector<ProgramView> every = r.views();
  std::vector<std::vector<double>> every_end;
  const std::vector<RankTiming> full = detail::TimelineShape(every, PairMode::Matched).run(r.seconds, &every_end);
  std::vector<ProgramView> representatives;
  std::vector<std::vector<double>> seconds;
  for (size_t c = 0; c < classes.quotient.size(); ++c) {
    representatives.emplace_back(classes.quotient[c], r.flat);
    seconds.push_back(r.seconds[classes.representative[c]]);
  }
  std::vector<std::vector<double>> class_end;
  const std::vector<RankTiming> by_class =
      detail::TimelineShape(representatives, PairMode::Matched).run(seconds, &class_end);
  ASSERT_EQ(classes.class_of.size(), every.size());
  for (size_t p = 0; p < every.size(); ++p) {
    const uint32_t c = classes.class_of[p];
    EXPECT_EQ(full[p].end_s, by_class[c].end_s) << p;
    EXPECT_EQ(full[p].forward_end_s, by_class[c].forward_end_s) << p;
    EXPECT_EQ(full[p].compute_backward_s, by_class[c].compute_backward_s) << p;
    EXPECT_EQ(every_end[p], class_end[c]) << p;
  }
}

TEST(RankClasses, OneRingOfEqualRanksIsOneClass) {
  const Ranks r = rings(6, 6, [](int) { return 1.0; });
  const std::optional<detail::RankClasses> classes = detail::rank_classes(r.views(), r.seconds);
  ASSERT_TRUE(classes);
  EXPECT_EQ(classes->class_of, std::vector<uint32_t>(6, 0));
  // The representative sends to and receives from its own class: one program meets itself.
  EXPECT_EQ(classes->quotient[0].ops[1].peer, 0);
  EXPECT_EQ(classes->quotient[0].ops[1].tag, classes->quotient[0].ops[2].tag);
  expect_quotient_times_every_rank(r, *classes);
}

// Two rings of three, the second twice as slow: a class per ring (each ring's members are alike).
TEST(RankClasses, TwoRingsOfDifferentSpeedsAreTwoClasses) {
  const Ranks r = rings(6, 3, [](int rank) { return rank < 3 ? 1.0 : 2.0; });
  const std::optional<detail::RankClasses> classes = detail::rank_classes(r.views(), r.seconds);
  ASSERT_TRUE(classes);
  EXPECT_EQ(classes->class_of, (std::vector<uint32_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(classes->representative, (std::vector<size_t>{0, 3}));
  expect_quotient_times_every_rank(r, *classes);
}

// One slow rank in a ring of four splits it by distance from that rank: the rank after it
// receives from it, the one after that from a rank that receives from it, and so on, so every
// rank is a class of its own and nothing is gained: no classes.
TEST(RankClasses, OneUnlikeRankInARingLeavesEveryRankAlone) {
  const Ranks r = rings(4, 4, [](int rank) { return rank == 2 ? 3.0 : 1.0; });
  EXPECT_FALSE(detail::rank_classes(r.views(), r.seconds));
}

// Two rings of four, in each one rank slower at the same place: the ranks of one place in either
// ring are alike, four classes of two.
TEST(RankClasses, LikePlacesOfTwoRingsShareAClass) {
  const Ranks r = rings(8, 4, [](int rank) { return rank % 4 == 1 ? 2.0 : 1.0; });
  const std::optional<detail::RankClasses> classes = detail::rank_classes(r.views(), r.seconds);
  ASSERT_TRUE(classes);
  EXPECT_EQ(classes->class_of, (std::vector<uint32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  expect_quotient_times_every_rank(r, *classes);
}

// A send whose receive is not among the programs, or a rank timed twice: no classes (the full
// timing calls the meeting off as it would).
TEST(RankClasses, AnEndWithoutItsOtherEndGivesNoClasses) {
  Ranks r = rings(4, 4, [](int) { return 1.0; });
  r.programs[3].ops[1].peer = 9;  // rank 9 is not timed
  EXPECT_FALSE(detail::rank_classes(r.views(), r.seconds));
  r = rings(4, 4, [](int) { return 1.0; });
  r.programs[1].ops[2].tag = 8;  // rank 0's send finds no receive of its tag on rank 1
  EXPECT_FALSE(detail::rank_classes(r.views(), r.seconds));
  r = rings(4, 4, [](int) { return 1.0; });
  r.programs[3].rank = 2;  // rank 2 twice, rank 3 missing: not every rank once
  EXPECT_FALSE(detail::rank_classes(r.views(), r.seconds));
}

// Two ranks, both in groups 0 and 1, that list them in the opposite order on the same streams:
// alike, but the representative's two groups have members of the same kinds and would get one
// name, and then its collective of group 0 would not meet its collective of group 1 as the other
// rank's does (a collective meets the other member's k-th collective of its group). No classes.
TEST(RankClasses, TwoGroupsARepresentativeWouldMergeGiveNoClasses) {
  Ranks r;
  for (int rank = 0; rank < 2; ++rank) {
    RankProgram& p = r.programs.emplace_back();
    p.rank = rank;
    p.collectives.resize(2);
    for (int32_t c : {0, 1}) {
      p.collectives[size_t(c)].kind = OpKind::AllGather;
      p.collectives[size_t(c)].group = rank == 0 ? c : 1 - c;
      Op gather;
      gather.kind = OpKind::AllGather;
      gather.stream = c == 0 ? Stream::Sync : Stream::Collective;
      gather.coll = c;
      p.add(gather);
    }
    r.seconds.push_back({1.0, 2.0});
  }
  r.finish();
  EXPECT_FALSE(detail::rank_classes(r.views(), r.seconds));
}

}  // namespace
}  // namespace wallfacer
