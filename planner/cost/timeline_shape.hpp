// The internals of a timeline shape (timeline.hpp), shared by the code that builds one
// (timeline.cpp: orders, foldings, pairings) and the code that runs one (timeline_run.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "timeline.hpp"
#include "timeline_fold.hpp"

namespace wallfacer::detail {

struct OpRef {
  int32_t program = -1;
  int32_t op = -1;
};

class MessageKeys;  // the message ends of a shape's programs by key (timeline.cpp)

// What each op waits for. An op is *posted* once its stream predecessor and its dependencies have
// started (their ends are then known, durations being fixed); it starts when posted, or, when it
// meets other ops (the two ends of a message, the members' ops of one collective), when all of
// them are posted.
struct TimelineShape::Impl {
  // What a program's ops wait for on their own rank: built from its ops' streams, phases and
  // dependencies, and shared by the programs that have the same (a step's ranks mostly share a few
  // unrolled orders, see same_unrolled_order).
  struct Order {
    std::vector<int32_t> waiting;           // by op: predecessors it waits for
    std::vector<int32_t> next;              // by op: the next op of its stream, -1 at the end
    std::vector<uint32_t> first_dependent;  // CSR over `dependents`, by op
    std::vector<int32_t> dependents;        // ops naming this one as a dependency
    std::vector<uint8_t> kind;              // by op: kCompute | kForward (what the totals read)
  };
  // Whom a program's ops meet. Written while the shape pairs its programs, then only read, so a
  // lone program of a sample shares it with the programs that pair alike (OrderLibrary). Made for
  // a program when the first of its ops meets another: none (a null record) means every op starts
  // alone, as in a bound's programs without pipeline stages, which need no record per op.
  struct Pairs {
    std::vector<int32_t> meet;   // by op: its meeting, kAlone or kPaired
    std::vector<OpRef> partner;  // by op: the other end of its pair (kPaired)
  };
  struct Lanes {
    std::shared_ptr<const Order> order;
    std::shared_ptr<Pairs> pairs;
  };
  static constexpr uint8_t kCompute = 1, kForward = 2;
  // Pairs::meet of an op that starts alone, and of one of two ops that meet (most are message
  // ends): a pair is kept in the ops themselves rather than as a meeting, so that a run finds the
  // other end in its record instead of through the meeting lists.
  static constexpr int32_t kAlone = -1, kPaired = -2;
  PairMode mode = PairMode::Matched;
  std::vector<ProgramView> unfolded;                    // the programs as given
  std::vector<ProgramView> programs;                    // as timed: with their chains of collectives folded
  std::vector<std::shared_ptr<const FoldedOps>> folds;  // by program: its folded chains, or null
  bool misaligned = false;                              // a meeting's members folded different chains into their ops
  std::vector<Lanes> lanes;
  std::vector<size_t> order_owners;        // the first program of each distinct Order
  std::vector<OpRef> meet_ops;             // every meeting's ops, one meeting after another
  std::vector<uint32_t> meet_begin = {0};  // meeting m: meet_ops[begin[m], begin[m + 1])

  void build(std::vector<ProgramView> given, PairMode pairing, OrderLibrary::Impl* library, bool fold);
  void fold_programs(OrderLibrary::Impl* library);
  size_t chain_size(OpRef ref) const {
    const FoldedOps* f = folds[size_t(ref.program)].get();
    return f ? f->chain_size(size_t(ref.op)) : 0;
  }
  void add_lanes(const ProgramView& program, OrderLibrary::Impl* library);
  bool pair_lone_from(const OrderLibrary::Impl* library);
  void keep_lone_pairs(OrderLibrary::Impl* library) const;
  Pairs& pairs_of(int32_t program) {
    std::shared_ptr<Pairs>& pairs = lanes[size_t(program)].pairs;
    if (!pairs) {
      const size_t n = programs[size_t(program)].size();
      pairs = std::make_shared<Pairs>(Pairs{std::vector<int32_t>(n, kAlone), std::vector<OpRef>(n)});
    }
    return *pairs;
  }
  void add_meet(const OpRef* begin, const OpRef* end) {
    if (end - begin == 2) {
      for (int k = 0; k < 2; ++k) {
        Pairs& pairs = pairs_of(begin[k].program);
        pairs.meet[size_t(begin[k].op)] = kPaired;
        pairs.partner[size_t(begin[k].op)] = begin[1 - k];
      }
      return;
    }
    const auto index = int32_t(meet_begin.size() - 1);
    for (const OpRef* ref = begin; ref != end; ++ref) {
      pairs_of(ref->program).meet[size_t(ref->op)] = index;
      meet_ops.push_back(*ref);
    }
    meet_begin.push_back(uint32_t(meet_ops.size()));
  }
  void pair_messages(const MessageKeys& ends);
  void pair_matched(bool stage_only);
  void pair_symmetric();
  void meet_collectives();
};

}  // namespace wallfacer::detail
