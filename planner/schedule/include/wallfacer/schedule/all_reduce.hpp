// The two all-reduce algorithms NCCL chooses between, in the one form the planner, the cost model
// and the simulator share: NCCL's trees over a group (per channel, a double binary tree over its
// nodes and a chain inside each node), their transfers in rounds, the latency of their longest
// path, and the rule that picks tree or ring for a group (docs/simulator.md, "Tree all-reduce").
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <wallfacer/plan/plan.hpp>

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

// NCCL's tree all-reduce, as modelled: per channel, a double binary tree over the group's nodes,
// and inside each node a chain of its members from the one that joins the node to the others;
// the two trees of a channel carry half its share each. There is one channel per two NICs of a
// node (at least one), so that the channels together use every rail: tree t of channel c enters
// a node through NIC 2c - t, at the first local GPU from 2c - t on that sits behind it (local GPU
// 2c - t itself where every GPU has its own NIC; or the member next after it in local order when
// the group lacks that GPU), as NCCL spreads its channels over the NICs. Each NIC then carries
// one tree of 1/NICs of the buffer, as in NCCL, whose trees run on the ring's channels (one per
// NIC, ring_channels.hpp) with both trees of a channel through its NIC at half the share each. A
// group inside one node is a chain.
struct TreeLayout {
  std::vector<int> members;  // the group's ranks by GPU: member index -> rank
  // parents[c][t][m]: member m's parent in tree t of channel c (member indices; -1: the root).
  std::vector<std::array<std::vector<int32_t>, 2>> parents;
};
int tree_channels(const Topology& topology);
TreeLayout tree_layout(const Plan& plan, int group, const Topology& topology);
// One channel of double_tree_links over the members in the given order, without nodes (tests,
// hand-built cases).
TreeLayout single_channel_layout(std::vector<int> members);

// One transfer of a tree all-reduce: a channel's share of the buffer, halved between its two
// trees, along a tree edge, up or down.
struct TreeTransfer {
  int32_t from = -1, to = -1;  // member indices (TreeLayout::members)
  int32_t channel = 0, tree = 0;
  int32_t round = 0;  // see tree_transfers
};

// Every transfer of a tree all-reduce (each tree edge of each channel, both ways), each given a
// round in which its sender sends and its receiver receives nothing else. The rounds are a
// bipartite edge colouring (König): as many as the most transfers a member sends or receives, so
// a member whose link carries its transfers one round after the other needs no more time than
// sharing that link among all of them at once. Deterministic; sorted by round.
std::vector<TreeTransfer> tree_transfers(const TreeLayout& layout);
// Bytes of one transfer: the buffer (elements x the gradient's element size) over two trees per
// channel.
double tree_transfer_bytes(int64_t buffer_bytes, int channels);

// Hops of the longest root-to-leaf path of a double binary tree over n positions.
int tree_depth(int n);

// Seconds of latency a pipelined tree all-reduce pays besides its bytes: the longest leaf-to-root
// path plus the longest root-to-leaf path, each hop at `latency_s(from, to)` (member indices),
// the largest over the layout's trees. NCCL's tuner prices a tree the same way, 2 x (the chain's
// hops x the latency inside a node + the node tree's depth x the latency between nodes).
double tree_critical_latency_s(const TreeLayout& layout, const std::function<double(int, int)>& latency_s);

// Seconds of an uncontended all-reduce of `bytes` over `members` ranks whose links have latency
// `alpha_s` and bandwidth `bytes_per_s` (both the slowest the group crosses).
double ring_all_reduce_estimate_s(int members, double bytes, double alpha_s, double bytes_per_s);
// The bandwidth of a ring collective over `nodes` nodes of at least `fewest` members each, for
// ring_all_reduce_estimate_s: inside one node the link inside it; across nodes one ring channel
// per NIC a node's members reach (ring_channels.hpp; at most `fewest` of the node's `nics`), each
// at the link between nodes, and no more than the link inside a node. Independent of which GPUs
// of a node the members sit on, as the choice below must be.
double ring_estimate_bytes_per_s(int nodes, int fewest, int nics, double intra_bytes_per_s, double inter_bytes_per_s);
// Distinct NICs the GPUs of a node reach (nodes are alike).
int node_nics(const Topology& topology);
// The tree over `nodes` nodes of at most `per_node` members in `channels` channels: chains of
// per_node - 1 hops at the latency inside a node, the node tree's depth at the latency between
// nodes; every member sends twice the buffer through its own links inside the node (up and down
// each chain), and a node twice a channel's share through each channel's link between nodes (an
// entry inner in one tree and a leaf of the other sends half of it four times).
double tree_all_reduce_estimate_s(int nodes, int per_node, int channels, double bytes, double intra_alpha_s,
                                  double intra_bytes_per_s, double inter_alpha_s, double inter_bytes_per_s);

// Whether strategies all-reduce over groups of this kind (world, data, sequence).
bool runs_all_reduces(GroupKind kind);

// Sets CommGroup::all_reduce on the groups a strategy all-reduces over (world, data, sequence) of
// three members or more: `forced` when given, else the tree where the estimates above make it
// faster than the ring for the workload's weight gradients, with the topology's links inside a
// node and between nodes. Depends only on each group's size, the nodes it spans and how many of
// its members each holds, so permuting GPUs inside nodes keeps it.
void choose_all_reduce_algorithms(Plan& plan, const Topology& topology,
                                  std::optional<AllReduceAlgorithm> forced = std::nullopt);

}  // namespace wallfacer
