// Internal to the cost model's timeline (timeline.hpp): ranks of a matched timing that run the
// same timeline, so that one of each kind is timed for all of them.
//
// With every rank timed (PairMode::Matched) a step's ranks mostly run a few kinds of program: the
// same unrolled order and op durations, meeting ranks of the same kinds at the same ops (the
// members of a ring that all send within a node, say). Such a partition of the ranks into classes
// is *equitable*: two ranks of one class have, op by op, the same order, the same durations and
// partners of the same class at the same op of theirs. Then every op starts at the same time on
// every rank of its class: the list schedule's times are the least solution of "an op starts when
// its predecessors have ended and the ops it meets are ready", which maps times equal within each
// class to times equal within each class, so the least solution is one of those, and it is the
// least solution of the quotient: one program per class, each meeting naming the class
// representatives of its members. The quotient is timed instead of every rank.
//
// The classes are found by refinement (as colour refinement finds them for a graph): ranks start
// grouped by order, durations and the places of their messages and collectives, and are split by
// the classes of their partners until no class splits. Every test is on the step templates (a
// few thousand ops a rank), not on the unrolled step (millions).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <wallfacer/schedule/schedule.hpp>
#include "timeline.hpp"

namespace wallfacer::detail {

struct RankClasses {
  std::vector<uint32_t> class_of;      // by program: its class
  std::vector<size_t> representative;  // by class: its first program
  // By class: the representative's template with its rank, peers, message tags and collective
  // groups renamed after classes, so that a matched pairing of the representatives alone meets
  // each op with the representatives of its real partners' classes. Only the rank, the ops, their
  // dependencies and the collectives are kept (what a timeline reads).
  std::vector<RankProgram> quotient;
};

// The classes of `programs` (flat step programs, every rank of a plan once, each op of program p
// lasting durations[p][its template op]), or none when every rank is a class of its own or the
// quotient could not stand for the ranks: a message end without its other end, or two ends or
// groups of a representative that the renaming would merge.
std::optional<RankClasses> rank_classes(const std::vector<ProgramView>& programs,
                                        const std::vector<std::vector<double>>& durations);

}  // namespace wallfacer::detail
