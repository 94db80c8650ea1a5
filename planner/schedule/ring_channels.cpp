#include <wallfacer/schedule/ring_channels.hpp>

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_map>

#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

// The group's members (indices into its ranks) per node, nodes in the order of their first
// member, members in group order.
std::vector<std::vector<int32_t>> members_by_node(const Plan& plan, const std::vector<int>& ranks) {
  std::vector<std::vector<int32_t>> nodes;
  std::unordered_map<int, size_t> index;
  for (int32_t m = 0; m < int32_t(ranks.size()); ++m) {
    const int node = plan.ranks[size_t(ranks[size_t(m)])].node;
    auto [it, fresh] = index.try_emplace(node, nodes.size());
    if (fresh) nodes.emplace_back();
    nodes[it->second].push_back(m);
  }
  return nodes;
}

// Orders a node's members by NIC (NICs in the order of their first member, members of one NIC in
// group order) and returns where each NIC's members start; members without a NIC count as none.
std::vector<int32_t> group_by_nic(const Plan& plan, const std::vector<int>& ranks, std::vector<int32_t>& node,
                                  const Topology& topology) {
  std::vector<int> nics;  // distinct, in order of first appearance
  std::vector<int> block(node.size());
  for (size_t i = 0; i < node.size(); ++i) {
    const int nic = topology.nic_of_gpu(plan.ranks[size_t(ranks[size_t(node[i])])].gpu);
    auto it = std::find(nics.begin(), nics.end(), nic);
    block[i] = int(it - nics.begin());
    if (it == nics.end()) nics.push_back(nic);
  }
  std::vector<size_t> order(node.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return block[a] < block[b]; });
  std::vector<int32_t> sorted;
  std::vector<int32_t> starts;
  for (size_t i = 0; i < order.size(); ++i) {
    if ((i == 0 || block[order[i]] != block[order[i - 1]]) && nics[size_t(block[order[i]])] >= 0)
      starts.push_back(int32_t(i));
    sorted.push_back(node[order[i]]);
  }
  node = std::move(sorted);
  return starts;
}

}  // namespace

RingChannels ring_channels(const Plan& plan, int group, const Topology& topology) {
  const std::vector<int>& ranks = plan.groups[size_t(group)].ranks;
  std::vector<std::vector<int32_t>> nodes = members_by_node(plan, ranks);
  std::vector<std::vector<int32_t>> entries;
  size_t channels = nodes.size() > 1 ? std::numeric_limits<size_t>::max() : 1;
  for (size_t j = 0; j < nodes.size() && channels > 1; ++j) {
    entries.push_back(group_by_nic(plan, ranks, nodes[j], topology));
    channels = std::min(channels, entries.back().size());
  }
  RingChannels result;
  if (channels <= 1) {
    result.rings.emplace_back(ranks.size());
    std::iota(result.rings[0].begin(), result.rings[0].end(), 0);
    result.at = result.rings;
    return result;
  }
  for (size_t c = 0; c < channels; ++c) {
    std::vector<int32_t> ring;
    ring.reserve(ranks.size());
    for (size_t j = 0; j < nodes.size(); ++j) {
      const int32_t k = int32_t(nodes[j].size()), entry = entries[j][c];
      // Even nodes: from the channel's entry forwards; odd nodes: from the member before it backwards.
      for (int32_t t = 0; t < k; ++t)
        ring.push_back(nodes[j][size_t(j % 2 == 0 ? (entry + t) % k : ((entry - 1 - t) % k + k) % k)]);
    }
    std::vector<int32_t> at(ring.size());
    for (int32_t i = 0; i < int32_t(ring.size()); ++i)
      at[size_t(ring[size_t(i)])] = i;
    result.rings.push_back(std::move(ring));
    result.at.push_back(std::move(at));
  }
  return result;
}

}  // namespace wallfacer
