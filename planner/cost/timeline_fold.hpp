// Internal to the cost model's timeline (timeline.hpp): chains of collectives folded into one op.
// A step's gradient and parameter synchronisation is cut into buckets, one collective each, that
// run back to back on one stream and that nothing else waits for but the last: nearly half the
// ops of a ZeRO 3 step. Such a chain moves as one op would: each collective starts when the one
// before ends (on every member, when it meets), so the timeline runs the chain's last op with the
// chain's durations folded into its start instead of running every op through its waiting lists.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <wallfacer/schedule/step.hpp>
#include "timeline.hpp"

namespace wallfacer::detail {

// A flat program with its folded chains taken out. Op b of the program absorbs the op a before
// it on its stream when both are collectives of the same group in the same phase, nothing depends
// on a, and every dependency of b is one of the chain's first op or a itself: b then starts when a
// ends (durations being at least zero), and a's dependencies are the chain's.
struct FoldedOps {
  FlatStep flat;                      // the kept ops: template op, dependencies (as kept indices)
  std::vector<uint32_t> kept;         // by kept op: its op in the unfolded program
  std::vector<uint32_t> chain_begin;  // by kept op, and one past the last: its slice of `chain`
  std::vector<uint32_t> chain;        // unfolded ops folded into a kept op, in the order they run
  size_t unfolded_size = 0;
  size_t chain_size(size_t kept_op) const { return chain_begin[kept_op + 1] - chain_begin[kept_op]; }
};

// The program's ops with its chains folded; null when it is not a flat step or nothing folds.
std::shared_ptr<const FoldedOps> fold_collective_chains(const ProgramView& program);

// Whether fold_collective_chains folds `a` and `b` alike: the same unrolled order, template ops on
// the same streams in the same phases, collectives at the same ops, grouped alike (equal groups in
// one are equal in the other).
bool folds_alike(const ProgramView& a, const ProgramView& b);

}  // namespace wallfacer::detail
