// The two all-reduce algorithms NCCL chooses between, in the one form the planner, the cost model
// and the simulator share: NCCL's double binary tree over a group's members (positions by GPU),
// its transfers in rounds, the latency of its longest path, and the rule that picks tree or ring
// for a group (docs/simulator.md, "Collectives").
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "planner/plan.hpp"

namespace wallfacer {

class Topology;

// A position's neighbours in one binary tree (positions; -1: none).
struct TreeLinks {
  int32_t parent = -1;
  std::array<int32_t, 2> children{-1, -1};
};

// NCCL's double binary tree over n positions. Tree 0 is the in-order binary tree rooted at 0: a
// position whose lowest set bit is b hangs below the position with bit 2b (or b's neighbour
// without it when that lies past n) and has children at -b/2 and +b/2 (the right one moved in
// when it lies past n). Tree 1 is tree 0 mirrored when n is even and shifted by one position when
// n is odd, so that the inner positions of one tree are leaves of the other.
std::array<TreeLinks, 2> double_tree_links(int n, int position);

// The members of `group` in tree position order: by GPU, so that (GPUs being numbered node by
// node) the lowest tree levels stay inside a node and the edges between nodes join GPUs of one
// rail, as NCCL's trees run inside nodes first and between them over one NIC per tree.
std::vector<int> tree_members(const Plan& plan, int group);

// One transfer of a tree all-reduce: half the buffer along a tree edge, up or down.
struct TreeTransfer {
  int32_t from = -1, to = -1;  // positions
  int32_t tree = 0;            // which half of the buffer
  int32_t round = 0;           // see tree_transfers
};

// Every transfer of a tree all-reduce over n positions (each tree edge, both ways), each given a
// round in which its sender sends and its receiver receives nothing else. The rounds are a
// bipartite edge colouring (König): as many as the most transfers a position sends or receives,
// so a member whose link carries its transfers one round after the other needs no more time than
// sharing that link among all of them at once. Deterministic.
std::vector<TreeTransfer> tree_transfers(int n);
// The same, ordered by round, computed once per n and process (the search prices many plans of
// one size).
std::shared_ptr<const std::vector<TreeTransfer>> tree_transfers_by_round(int n);

// Hops of the longest root-to-leaf path over both trees.
int tree_depth(int n);

// Seconds of latency a pipelined tree all-reduce pays besides its bytes: the longest leaf-to-root
// path plus the longest root-to-leaf path, each hop at `latency_s(from, to)` (positions), the
// larger of the two trees. NCCL's tuner prices a tree the same way (2 x depth x hop latency).
double tree_critical_latency_s(int n, const std::function<double(int, int)>& latency_s);

// Seconds of an uncontended all-reduce of `bytes` over `members` ranks whose links have latency
// `alpha_s` and bandwidth `bytes_per_s` (both the slowest the group crosses).
double ring_all_reduce_estimate_s(int members, double bytes, double alpha_s, double bytes_per_s);
double tree_all_reduce_estimate_s(int members, double bytes, double alpha_s, double bytes_per_s);

// Sets CommGroup::all_reduce on the groups a strategy all-reduces over (world, data, sequence) of
// three members or more: `forced` when given, else the tree where the estimates above make it
// faster than the ring for the workload's weight gradients, with the topology's link inside a
// node or between nodes as the group spans. Depends only on each group's size and the nodes it
// spans, so permuting GPUs inside nodes keeps it.
void choose_all_reduce_algorithms(Plan& plan, const Topology& topology,
                                  std::optional<AllReduceAlgorithm> forced = std::nullopt);

}  // namespace wallfacer
