// Internal pieces of the schedule checker (checker.cpp): token-set arithmetic, counting how many
// boxes cover each cell of a grid, and the execution under blocking semantics that finds
// deadlocks. Nothing outside planner/ includes this header.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::detail::check {

TokenSet normalize(TokenSet set);                       // sorted by position, touching ranges merged
TokenSet merge_adjacent(const TokenSet& set);           // order kept, touching neighbours merged
bool is_subset(const TokenSet& a, const TokenSet& b);   // both normalized
int64_t overlap(const TokenSet& a, const TokenSet& b);  // tokens in both; both normalized
int64_t causal_pairs(TokenRange q, TokenRange k);       // pairs with key <= query
std::string describe(const TokenSet& set);              // "[0, 8) [24, 32)"

// Why the per-member token and head lists of an AllGather, AllToAll or ReduceScatter break the
// rules of CollectiveSpec (schedule.hpp); "" when they hold. `normalized` holds normalize() of
// every set of `pool`.
std::string collective_spec_problem(const CollectiveSpec& spec, const TokenSetPool& pool,
                                    const std::vector<TokenSet>& normalized);

// A box [lo, hi) on three integer axes, and one cell of the grid that the distinct box
// boundaries (plus 0 and the extent of each axis) cut the space into.
struct Box {
  std::array<int64_t, 3> lo, hi;
};
struct GridCell {
  std::array<int64_t, 3> lo, hi;
  int32_t count = 0;  // boxes covering the cell
};
// Visits every cell with the number of boxes covering it: a 3-D difference array, so the cost is
// O(boxes + cells) however large the boxes are.
void count_cover(const std::vector<Box>& boxes, const std::array<int64_t, 3>& extent,
                 const std::function<void(const GridCell&)>& visit);

// Ops that complete together, by global op id (offset[rank] + op index).
struct Rendezvous {
  std::vector<int64_t> offset;                  // one entry per rank, plus the total
  std::vector<int64_t> partner;                 // Send <-> Recv; -1 when unmatched
  std::vector<int32_t> instance_of;             // collective op -> instance; -1 when none
  std::vector<std::vector<int64_t>> instances;  // instance -> its members' ops
};
struct BlockedOp {
  int rank = 0;
  int32_t op = 0;
  bool started = false;  // at the head of its stream with its dependencies met, waiting on peers
};
// Executes the schedule under the blocking semantics of schedule.hpp. Returns the head op of every
// stream that never finishes (empty when everything completes); started_members receives, per
// collective instance, how many members started it.
std::vector<BlockedOp> run_blocking(const Schedule& schedule, const Rendezvous& rendezvous,
                                    std::vector<int32_t>& started_members);

}  // namespace wallfacer::detail::check
