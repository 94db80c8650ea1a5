#include "collective_steps.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::sim {
namespace {

int32_t common_heads(const HeadRange& a, const HeadRange& b) {
  return std::max(0, std::min(a.end, b.end) - std::max(a.begin, b.begin));
}

// tokens x heads of a member's slice: the unit the schedule's bytes are proportional to.
double slice_weight(const std::vector<int32_t>& tokens, const std::vector<HeadRange>& heads, size_t member,
                    const TokenSetPool& pool) {
  if (member >= tokens.size() || tokens[member] < 0 || size_t(tokens[member]) >= pool.size()) return 0;
  double head_count = member < heads.size() ? double(heads[member].size()) : 1.0;
  return double(token_count(pool.get(tokens[member]))) * head_count;
}

// Splits `total` bytes over the sends in proportion to their weights (evenly when all are 0).
void distribute(std::vector<CollectiveTransfer>& sends, const std::vector<double>& weights, double total) {
  double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  for (size_t i = 0; i < sends.size(); ++i)
    sends[i].bytes = sum > 0 ? total * weights[i] / sum : total / double(sends.size());
}

// Bytes of each ring step of a member at position `pos` of `ring` (ring position -> member index;
// the group order when null): all-reduce steps carry equal shares of the member's buffer;
// all-gather forwards the block of the member at (pos - k) and reduce-scatter the partial of the
// block at (pos - k - 1), so the last step hands each member its own block.
std::vector<double> ring_step_bytes(OpKind kind, const CollectiveSpec& spec, double member_bytes, size_t p, size_t pos,
                                    const TokenSetPool& pool, const std::vector<int32_t>* ring) {
  size_t count = kind == OpKind::AllReduce ? 2 * (p - 1) : p - 1;
  auto member_at = [&](size_t position) { return ring ? size_t((*ring)[position]) : position; };
  std::vector<double> weights(count, 1.0);
  // A flat vector (gradients, weights) has no token lists: p equal blocks.
  for (size_t k = 0; k < count && !is_flat_collective(spec); ++k) {
    if (kind == OpKind::AllGather)
      weights[k] = slice_weight(spec.in_tokens, spec.in_heads, member_at((pos + p - k) % p), pool);
    if (kind == OpKind::ReduceScatter)
      weights[k] = slice_weight(spec.out_tokens, spec.out_heads, member_at((pos + 2 * p - k - 1) % p), pool);
  }
  double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  for (double& w : weights)
    w = sum > 0 ? member_bytes * w / sum : member_bytes / double(count);
  return weights;
}

// One ring channel as a member at position `pos` of `ring` sees it (the group order when null).
struct RingLane {
  int next = -1, prev = -1;   // ranks
  std::vector<double> bytes;  // per step; empty when the steps are equal
};

RingLane ring_lane(OpKind kind, const CollectiveSpec& spec, double lane_bytes, const std::vector<int>& group,
                   size_t pos, const TokenSetPool& pool, const std::vector<int32_t>* ring) {
  const size_t p = group.size();
  auto member_at = [&](size_t position) { return ring ? size_t((*ring)[position]) : position; };
  RingLane lane{group[member_at((pos + 1) % p)], group[member_at((pos + p - 1) % p)], {}};
  // All-reduce and flat steps are equal: no per-step table (8,190 of them per member at 4,096 ranks).
  if (kind != OpKind::AllReduce && !is_flat_collective(spec))
    lane.bytes = ring_step_bytes(kind, spec, lane_bytes, p, pos, pool, ring);
  return lane;
}

// Steps [g·n/limit, (g+1)·n/limit) become merged transfer g: the same partition on every member,
// so merged sends still pair with merged receives. Each step is one transfer per channel, all
// channels in the same order on every member.
CollectiveSteps ring_steps(OpKind kind, const CollectiveSpec& spec, double member_bytes, const std::vector<int>& group,
                           size_t self, const TokenSetPool& pool, size_t limit, const RingChannels* rings) {
  const size_t p = group.size();
  const size_t width = rings && rings->count() > 1 ? size_t(rings->count()) : 1;
  const double lane_bytes = member_bytes / double(width);
  std::vector<RingLane> lanes;
  for (size_t c = 0; c < width; ++c) {
    const std::vector<int32_t>* ring = width > 1 ? &rings->rings[c] : nullptr;
    const size_t pos = ring ? size_t(rings->at[c][self]) : self;
    lanes.push_back(ring_lane(kind, spec, lane_bytes, group, pos, pool, ring));
  }
  size_t count = kind == OpKind::AllReduce ? 2 * (p - 1) : p - 1;
  size_t transfers = limit > 0 ? std::min(limit, count) : count;
  CollectiveSteps steps;
  steps.width = int(width);
  steps.sends.reserve(transfers * width);
  steps.recvs.reserve(transfers * width);
  for (size_t g = 0; g < transfers; ++g) {
    size_t begin = g * count / transfers, end = (g + 1) * count / transfers;
    for (size_t c = 0; c < width; ++c) {
      const RingLane& lane = lanes[c];
      double total = lane.bytes.empty() ? lane_bytes * double(end - begin) / double(count)
                                        : std::accumulate(lane.bytes.begin() + ptrdiff_t(begin),
                                                          lane.bytes.begin() + ptrdiff_t(end), 0.0);
      steps.sends.push_back({lane.next, total, int(end - begin), int(c)});
      steps.recvs.push_back({lane.prev, 0, int(end - begin), int(c)});
    }
  }
  return steps;
}

// NCCL's pipelined double binary tree (all_reduce.hpp) in its steady state: every tree edge
// carries its half of the buffer, up (partial sums) and down (results), while the others do. The
// transfers run pairwise in their rounds, each member sending and receiving one at a time: through
// a NIC they share that takes as long as NCCL's concurrent streams, and each flow then crosses
// links nearly alone. (All at once, thousands of flows tied together by shared NICs make every
// completion re-solve SimGrid's whole max-min system.) The pipeline's fill, the latency of the
// tree's longest path, is the delay the replay puts before the first send.
CollectiveSteps tree_steps(const CollectiveSpec& spec, const std::vector<int>& group, size_t pos,
                           const TreeRounds& tree, int grad_elem_bytes) {
  const double bytes = tree_transfer_bytes(spec.elements * grad_elem_bytes, tree.channels);
  CollectiveSteps steps;
  steps.order = StepOrder::Pairwise;
  for (int32_t index : tree.sends[pos])
    steps.sends.push_back({group[size_t(tree.transfers[size_t(index)].to)], bytes});
  for (int32_t index : tree.recvs[pos])
    steps.recvs.push_back({group[size_t(tree.transfers[size_t(index)].from)], 0});
  return steps;
}

// Tokens x heads member `from` sends to member `to` in an all-to-all.
double all_to_all_weight(const CollectiveSpec& spec, size_t from, size_t to, const TokenSetPool& pool) {
  auto valid = [&](int32_t id) { return id >= 0 && size_t(id) < pool.size(); };
  if (!valid(spec.in_tokens[from]) || !valid(spec.out_tokens[to])) return 0;
  int64_t tokens = common_tokens(pool.get(spec.in_tokens[from]), pool.get(spec.out_tokens[to]));
  return double(tokens) * double(common_heads(spec.in_heads[from], spec.out_heads[to]));
}

// Peer +i receives this member's step-i send and peer -i sends its step-i piece here, so both
// ends walk the offsets in the same order and skip the same empty pieces.
CollectiveSteps all_to_all_steps(const CollectiveSpec& spec, double member_bytes, const std::vector<int>& group,
                                 size_t pos, const TokenSetPool& pool, AllToAllAlgorithm algorithm) {
  size_t p = group.size();
  CollectiveSteps steps;
  steps.order = algorithm == AllToAllAlgorithm::Direct ? StepOrder::Direct : StepOrder::Pairwise;
  bool described = spec.in_tokens.size() == p && spec.out_tokens.size() == p && spec.in_heads.size() == p &&
                   spec.out_heads.size() == p;
  std::vector<double> weights;
  for (size_t i = 1; i < p; ++i) {
    size_t to = (pos + i) % p, from = (pos + p - i) % p;
    double out = described ? all_to_all_weight(spec, pos, to, pool) : 1.0;
    double in = described ? all_to_all_weight(spec, from, pos, pool) : 1.0;
    if (out > 0) {
      steps.sends.push_back({group[to], 0});
      weights.push_back(out);
    }
    if (in > 0) steps.recvs.push_back({group[from], 0});
  }
  distribute(steps.sends, weights, member_bytes);
  return steps;
}

}  // namespace

TreeRounds index_tree_rounds(const TreeLayout& layout) {
  TreeRounds tree;
  tree.channels = std::max(int(layout.parents.size()), 1);
  tree.transfers = tree_transfers(layout);  // by round, so each member's lists are in round order
  tree.sends.resize(layout.members.size());
  tree.recvs.resize(layout.members.size());
  for (int32_t i = 0; i < int32_t(tree.transfers.size()); ++i) {
    tree.sends[size_t(tree.transfers[size_t(i)].from)].push_back(i);
    tree.recvs[size_t(tree.transfers[size_t(i)].to)].push_back(i);
  }
  return tree;
}

int64_t common_tokens(const TokenSet& a, const TokenSet& b) {
  int64_t total = 0;
  for (const TokenRange& x : a)
    for (const TokenRange& y : b)
      total += std::max<int64_t>(0, std::min(x.end, y.end) - std::max(x.begin, y.begin));
  return total;
}

CollectiveSteps expand_collective(const CollectiveSpec& spec, double member_bytes, const std::vector<int>& group,
                                  int self, const TokenSetPool& pool, const ExpandOptions& options,
                                  const TreeRounds* tree, const RingChannels* rings) {
  auto it = std::find(group.begin(), group.end(), self);
  if (it == group.end())
    throw ScheduleError(
        fmt::format("rank {} runs a {} on group {} without being a member", self, to_string(spec.kind), spec.group));
  size_t pos = size_t(it - group.begin());
  if (group.size() < 2) return {};
  switch (spec.kind) {
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
      if (spec.kind == OpKind::AllReduce && spec.algorithm == AllReduceAlgorithm::Tree) {
        if (tree) return tree_steps(spec, group, pos, *tree, options.grad_elem_bytes);
        return tree_steps(spec, group, pos, index_tree_rounds(single_channel_layout(group)), options.grad_elem_bytes);
      }
      WF_ASSERT(!rings || (rings->at.size() == rings->rings.size() && rings->at.front().size() == group.size()),
                "a group's ring channels cover its members");
      return ring_steps(spec.kind, spec, member_bytes, group, pos, pool, size_t(options.max_ring_steps), rings);
    case OpKind::AllToAll:
      return all_to_all_steps(spec, member_bytes, group, pos, pool, options.all_to_all);
    default:
      throw ScheduleError(fmt::format("collective spec of kind {} is not a collective", to_string(spec.kind)));
  }
}

}  // namespace wallfacer::sim
