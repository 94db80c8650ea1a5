// How the simulator turns one member's part of a collective into point-to-point transfers, so
// collectives contend on links like the rest of the traffic: ring all-gather and reduce-scatter
// (p-1 steps), ring all-reduce (2(p-1) steps of M/p), each step one transfer per ring channel
// (ring_channels.hpp) with its share of the step's bytes, or, where the plan says so, NCCL's double
// binary tree (per channel, one transfer of M/2 over the channels each way on every tree edge,
// pairwise in rounds; the replay delays the first by the tree's path latency), and all-to-all as
// one direct transfer to
// each peer that has data for it, either pairwise (step i sends to member +i and receives from
// member -i, one step after the other, as NCCL schedules its grouped point-to-point calls and
// as the alpha-beta form (p-1)·alpha + (p-1)/p·M/beta assumes) or all at once. Sizes follow the
// schedule: the member's bytes (Op::bytes) are split over its sends in proportion to the
// tokens x heads each one carries, or evenly for a flat collective (gradients or weights by
// element count, no token lists: is_flat_collective), whose all-gather and reduce-scatter always
// run as rings (a tree is an all-reduce's only).
#pragma once

#include <cstdint>
#include <vector>

#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/schedule/ring_channels.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::sim {

struct CollectiveTransfer {
  int peer = -1;     // rank
  double bytes = 0;  // sends only; receives take whatever the peer sends
  int merged = 1;    // ring steps this transfer stands for (see max_ring_steps)
  int lane = 0;      // the ring channel (ring_channels.hpp) the transfer belongs to
  int channel = -1;  // filled in by the replay: where the transfer pairs with its peer
  double delay = 0;  // filled in by the replay: seconds to wait before a merged ring or tree send
};

// When a member may post its next transfer.
enum class StepOrder : uint8_t {
  // Step k+1's receives after step k's; its sends after step k's sends and receives (a member
  // forwards what arrived). A step is one transfer per ring channel.
  Ring,
  Pairwise,  // receives one after the other, sends one after the other, each chain on its own
  Direct,    // everything at once
};

struct CollectiveSteps {
  StepOrder order = StepOrder::Ring;
  // Transfers per ring step: the group's ring channels, whose step k runs at once, k-th step's
  // transfers at [k * width, (k + 1) * width), by channel. 1 for every other order.
  int width = 1;
  std::vector<CollectiveTransfer> sends, recvs;  // in step order
};

enum class AllToAllAlgorithm { Pairwise, Direct };

struct ExpandOptions {
  AllToAllAlgorithm all_to_all = AllToAllAlgorithm::Pairwise;
  // A ring with more steps than this (an all-reduce over thousands of ranks has 2(p-1)) runs as
  // this many merged steps: each carries the bytes of the consecutive steps it stands for and,
  // before it is sent, waits the latency of all but one of them, so an uncontended ring takes
  // exactly as long as step by step. 0 keeps every step.
  int max_ring_steps = 0;
  int grad_elem_bytes = 4;  // the schedule's gradient element size (ScheduleDims), for tree all-reduces
};

// A group's tree all-reduce transfers (all_reduce.hpp), with each member's sends and receives in
// round order: built once per group, read by every member.
struct TreeRounds {
  int channels = 1;
  std::vector<TreeTransfer> transfers;
  std::vector<std::vector<int32_t>> sends, recvs;  // by member index: indices into transfers
};
TreeRounds index_tree_rounds(const TreeLayout& layout);

// `group` lists the member ranks in group order, or for a tree all-reduce in the layout's member
// order (TreeLayout::members), whose transfers come from `tree` (one channel over `group` when
// null); `self` is this member's rank. A ring collective runs on `rings` (members as indices into
// `group`), each channel carrying member_bytes / channels, or on the one ring in group order when
// null. Throws ScheduleError when `self` is not in the group or the spec does not fit it.
CollectiveSteps expand_collective(const CollectiveSpec& spec, double member_bytes, const std::vector<int>& group,
                                  int self, const TokenSetPool& pool, const ExpandOptions& options = {},
                                  const TreeRounds* tree = nullptr, const RingChannels* rings = nullptr);

// Tokens two token sets have in common.
int64_t common_tokens(const TokenSet& a, const TokenSet& b);

}  // namespace wallfacer::sim
