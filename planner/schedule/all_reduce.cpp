#include <wallfacer/schedule/all_reduce.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

// Tree 0: the in-order binary tree rooted at 0 (NCCL's btree).
TreeLinks binary_tree_links(int n, int r) {
  TreeLinks links;
  if (n <= 1) return links;
  int bit = 1;  // r's lowest set bit; for the root, the first power of two not below n
  while (bit < n && !(bit & r))
    bit <<= 1;
  if (r == 0) {
    links.children[0] = bit >> 1;
    return links;
  }
  links.parent = (r ^ bit) | (bit << 1);
  if (links.parent >= n) links.parent = r ^ bit;
  int low = bit >> 1;
  if (low == 0) return links;  // odd positions are leaves
  links.children[0] = r - low;
  while (low > 0 && r + low >= n)
    low >>= 1;
  if (low > 0) links.children[1] = r + low;
  return links;
}

// Tree 1's position r is tree 0's position to_tree0(r): mirrored for even n, shifted by one for
// odd n (either way tree 0's inner positions, the even ones, become leaves); from_tree0 maps back.
int to_tree0(int n, int r) {
  return n % 2 == 0 ? n - 1 - r : (r - 1 + n) % n;
}
int from_tree0(int n, int s) {
  return s < 0 ? -1 : (n % 2 == 0 ? n - 1 - s : (s + 1) % n);
}

// The longest root-to-leaf path of a tree given by parent links, each hop (parent, child) costing
// `edge(parent, child)`; each member's distance is filled in by walking up to the nearest member
// already known.
template <typename Edge>
double longest_path(const std::vector<int32_t>& parent, Edge edge) {
  std::vector<double> from_root(parent.size(), -1.0);
  std::vector<int32_t> path;
  double longest = 0;
  for (int32_t m = 0; m < int32_t(parent.size()); ++m) {
    int32_t at = m;
    while (from_root[size_t(at)] < 0) {
      if (parent[size_t(at)] < 0) {
        from_root[size_t(at)] = 0;
        break;
      }
      path.push_back(at);
      at = parent[size_t(at)];
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it)
      from_root[size_t(*it)] = from_root[size_t(parent[size_t(*it)])] + edge(parent[size_t(*it)], *it);
    path.clear();
    longest = std::max(longest, from_root[size_t(m)]);
  }
  return longest;
}

// Both trees of double_tree_links over `order` (position -> member index) as parent links.
std::array<std::vector<int32_t>, 2> binary_tree_parents(const std::vector<int32_t>& order) {
  const int n = int(order.size());
  std::array<std::vector<int32_t>, 2> parents{std::vector<int32_t>(size_t(n), -1), std::vector<int32_t>(size_t(n), -1)};
  for (int k = 0; k < n; ++k) {
    const std::array<TreeLinks, 2> links = double_tree_links(n, k);
    for (size_t t = 0; t < 2; ++t)
      if (links[t].parent >= 0) parents[t][size_t(order[size_t(k)])] = order[size_t(links[t].parent)];
  }
  return parents;
}

struct AlphaBeta {
  double alpha_s = 0, bytes_per_s = 0;
};

AlphaBeta link_class(const Topology& topology, int a, int b) {
  const Route& route = topology.route(a, b);
  return {route.latency_us * 1e-6, route.bottleneck_GBps * 1e9};
}

// Positions 0..n-1 in order.
std::vector<int32_t> identity_order(size_t n) {
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

}  // namespace

bool runs_all_reduces(GroupKind kind) {
  return kind == GroupKind::World || kind == GroupKind::Data || kind == GroupKind::Sequence;
}

std::array<TreeLinks, 2> double_tree_links(int n, int position) {
  std::array<TreeLinks, 2> links;
  links[0] = binary_tree_links(n, position);
  if (n <= 1) return links;
  const TreeLinks mapped = binary_tree_links(n, to_tree0(n, position));
  links[1].parent = from_tree0(n, mapped.parent);
  links[1].children = {from_tree0(n, mapped.children[0]), from_tree0(n, mapped.children[1])};
  return links;
}

namespace {

// The NIC of each local GPU of node 0 as an index among the node's NICs (by NIC order), -1 where
// a GPU has none; nodes are alike.
std::vector<int> nic_index_of_local_gpu(const Topology& topology) {
  const int per_node = std::min(topology.gpus_per_node(), topology.num_gpus());
  std::vector<int> nics;
  for (int gpu = 0; gpu < per_node; ++gpu)
    if (topology.node_of_gpu(gpu) == 0 && topology.nic_of_gpu(gpu) >= 0) nics.push_back(topology.nic_of_gpu(gpu));
  std::sort(nics.begin(), nics.end());
  nics.erase(std::unique(nics.begin(), nics.end()), nics.end());
  std::vector<int> index(size_t(std::max(per_node, 0)), -1);
  for (int gpu = 0; gpu < per_node; ++gpu) {
    if (topology.node_of_gpu(gpu) != 0) continue;
    const auto it = std::find(nics.begin(), nics.end(), topology.nic_of_gpu(gpu));
    if (it != nics.end()) index[size_t(gpu)] = int(it - nics.begin());
  }
  return index;
}

}  // namespace

int node_nics(const Topology& topology) {
  const std::vector<int> index = nic_index_of_local_gpu(topology);
  return index.empty() ? 0 : *std::max_element(index.begin(), index.end()) + 1;
}

int tree_channels(const Topology& topology) {
  return std::max(1, std::min(node_nics(topology), topology.gpus_per_node()) / 2);
}

TreeLayout tree_layout(const Plan& plan, int group, const Topology& topology) {
  TreeLayout layout;
  layout.members = plan.groups[size_t(group)].ranks;
  const auto& slots = plan.ranks;
  std::sort(layout.members.begin(), layout.members.end(),
            [&](int a, int b) { return slots[size_t(a)].gpu < slots[size_t(b)].gpu; });
  const int n = int(layout.members.size()), per_node = std::max(topology.gpus_per_node(), 1);
  // The group's nodes in GPU order, each with its members (member indices, by GPU).
  std::vector<std::vector<int32_t>> nodes;
  for (int32_t m = 0; m < n; ++m) {
    const int node = slots[size_t(layout.members[size_t(m)])].node;
    if (m == 0 || node != slots[size_t(layout.members[size_t(m - 1)])].node) nodes.emplace_back();
    nodes.back().push_back(m);
  }
  const std::array<std::vector<int32_t>, 2> node_parents = binary_tree_parents(identity_order(nodes.size()));
  const int channels = tree_channels(topology);
  const std::vector<int> nic_index = nic_index_of_local_gpu(topology);
  const int nics = std::max(1, nic_index.empty() ? 0 : *std::max_element(nic_index.begin(), nic_index.end()) + 1);
  // Tree t of channel c joins a node through NIC 2c - t: at the first local GPU from 2c - t on
  // behind it (local GPU 2c - t itself where every GPU has its own NIC, or all share one).
  auto entry_gpu = [&](int c, int t) {
    const int start = ((2 * c - t) % per_node + per_node) % per_node, nic = ((2 * c - t) % nics + nics) % nics;
    for (int k = 0; k < per_node && k < int(nic_index.size()); ++k)
      if (nic_index[size_t((start + k) % per_node)] == nic) return (start + k) % per_node;
    return start;
  };
  for (int c = 0; c < channels; ++c) {
    std::array<std::vector<int32_t>, 2> parents{std::vector<int32_t>(size_t(n), -1),
                                                std::vector<int32_t>(size_t(n), -1)};
    std::array<std::vector<int32_t>, 2> heads{std::vector<int32_t>(nodes.size()), std::vector<int32_t>(nodes.size())};
    for (size_t t = 0; t < 2; ++t) {
      const int entry = entry_gpu(c, int(t));  // local GPU joining the node
      for (size_t j = 0; j < nodes.size(); ++j) {
        std::vector<int32_t> chain = nodes[j];
        auto distance = [&](int32_t m) {
          return ((slots[size_t(layout.members[size_t(m)])].local_gpu - entry) % per_node + per_node) % per_node;
        };
        std::stable_sort(chain.begin(), chain.end(), [&](int32_t a, int32_t b) { return distance(a) < distance(b); });
        heads[t][j] = chain.front();
        for (size_t i = 1; i < chain.size(); ++i)
          parents[t][size_t(chain[i])] = chain[i - 1];
      }
      for (size_t j = 0; j < nodes.size(); ++j)
        if (node_parents[t][j] >= 0) parents[t][size_t(heads[t][j])] = heads[t][size_t(node_parents[t][j])];
    }
    layout.parents.push_back(std::move(parents));
  }
  return layout;
}

TreeLayout single_channel_layout(std::vector<int> members) {
  TreeLayout layout;
  layout.members = std::move(members);
  layout.parents.push_back(binary_tree_parents(identity_order(layout.members.size())));
  return layout;
}

double tree_transfer_bytes(int64_t buffer_bytes, int channels) {
  return double(buffer_bytes) / (2.0 * std::max(channels, 1));
}

namespace {

std::vector<TreeTransfer> tree_edges(const TreeLayout& layout) {
  std::vector<TreeTransfer> transfers;
  for (int32_t c = 0; c < int32_t(layout.parents.size()); ++c)
    for (int32_t t = 0; t < 2; ++t) {
      const std::vector<int32_t>& parent = layout.parents[size_t(c)][size_t(t)];
      for (int32_t m = 0; m < int32_t(parent.size()); ++m) {
        if (parent[size_t(m)] < 0) continue;
        transfers.push_back({m, parent[size_t(m)], c, t, -1});  // up: the partial sum
        transfers.push_back({parent[size_t(m)], m, c, t, -1});  // down: the result
      }
    }
  return transfers;
}

}  // namespace

std::vector<TreeTransfer> tree_transfers(const TreeLayout& layout) {
  std::vector<TreeTransfer> transfers = tree_edges(layout);
  const int n = int(layout.members.size());
  std::vector<int> sends(size_t(n), 0), recvs(size_t(n), 0);
  int rounds = 0;
  for (const TreeTransfer& t : transfers)
    rounds = std::max({rounds, ++sends[size_t(t.from)], ++recvs[size_t(t.to)]});
  // send_slot[k * rounds + c]: the transfer member k sends in round c (-1: none); recv_slot alike.
  std::vector<int32_t> send_slot(size_t(n) * size_t(rounds), -1), recv_slot(send_slot.size(), -1);
  auto slot = [&](std::vector<int32_t>& slots, int k, int c) -> int32_t& {
    return slots[size_t(k) * size_t(rounds) + size_t(c)];
  };
  auto free_round = [&](std::vector<int32_t>& slots, int k) {
    int c = 0;
    while (slot(slots, k, c) >= 0)
      ++c;
    return c;
  };
  std::vector<int32_t> path;
  for (int32_t e = 0; e < int32_t(transfers.size()); ++e) {
    const int from = transfers[size_t(e)].from, to = transfers[size_t(e)].to;
    const int a = free_round(send_slot, from), b = free_round(recv_slot, to);
    if (slot(recv_slot, to, a) >= 0) {
      // Round a is taken at the receiver: swap rounds a and b along the path that alternates a
      // (into a receiver) and b (out of a sender) from it. It cannot reach `from`, which sends
      // nothing in round a, so afterwards both ends are free in round a.
      path.clear();
      for (int at = to, round = a; at >= 0;) {
        const int32_t next = round == a ? slot(recv_slot, at, a) : slot(send_slot, at, b);
        if (next < 0) break;
        path.push_back(next);
        at = round == a ? transfers[size_t(next)].from : transfers[size_t(next)].to;
        round = round == a ? b : a;
      }
      for (int32_t p : path) {
        TreeTransfer& t = transfers[size_t(p)];
        slot(send_slot, t.from, t.round) = slot(recv_slot, t.to, t.round) = -1;
      }
      for (int32_t p : path) {
        TreeTransfer& t = transfers[size_t(p)];
        t.round = t.round == a ? b : a;
        slot(send_slot, t.from, t.round) = slot(recv_slot, t.to, t.round) = p;
      }
    }
    transfers[size_t(e)].round = a;
    slot(send_slot, from, a) = slot(recv_slot, to, a) = e;
  }
  std::stable_sort(transfers.begin(), transfers.end(),
                   [](const TreeTransfer& x, const TreeTransfer& y) { return x.round < y.round; });
  return transfers;
}

int tree_depth(int n) {
  // The root's child is the largest power of two below n, 2^d, and the left children below it
  // halve down to an odd position: d + 1 hops, the same in the mirrored or shifted tree.
  if (n < 2) return 0;
  int d = 0;
  while ((int64_t(2) << d) <= n - 1)
    ++d;
  return d + 1;
}

double tree_critical_latency_s(const TreeLayout& layout, const std::function<double(int, int)>& latency_s) {
  double critical = 0;
  for (const auto& trees : layout.parents)
    for (const std::vector<int32_t>& parent : trees) {
      const double down = longest_path(parent, [&](int32_t up, int32_t child) { return latency_s(up, child); });
      const double up = longest_path(parent, [&](int32_t up, int32_t child) { return latency_s(child, up); });
      critical = std::max(critical, up + down);
    }
  return critical;
}

double ring_all_reduce_estimate_s(int members, double bytes, double alpha_s, double bytes_per_s) {
  if (members < 2) return 0;
  const double p = members;
  return 2 * (p - 1) * alpha_s + 2 * (p - 1) / p * bytes / bytes_per_s;
}

double ring_estimate_bytes_per_s(int nodes, int fewest, int nics, double intra_bytes_per_s, double inter_bytes_per_s) {
  if (nodes < 2) return intra_bytes_per_s;
  const int channels = std::min(fewest, nics);
  return channels > 1 ? std::min(intra_bytes_per_s, channels * inter_bytes_per_s) : inter_bytes_per_s;
}

double tree_all_reduce_estimate_s(int nodes, int per_node, int channels, double bytes, double intra_alpha_s,
                                  double intra_bytes_per_s, double inter_alpha_s, double inter_bytes_per_s) {
  if (nodes * per_node < 2) return 0;
  const double latency = 2 * ((per_node - 1) * intra_alpha_s + tree_depth(nodes) * inter_alpha_s);
  const double inside = per_node > 1 ? 2 * bytes / intra_bytes_per_s : 0;
  const double between = nodes > 1 ? 2 * bytes / (std::max(channels, 1) * inter_bytes_per_s) : 0;
  return latency + std::max(inside, between);
}

void choose_all_reduce_algorithms(Plan& plan, const Topology& topology, std::optional<AllReduceAlgorithm> forced) {
  const int per_node = topology.gpus_per_node();
  const AlphaBeta intra = per_node > 1 ? link_class(topology, 0, 1) : AlphaBeta{};
  const AlphaBeta inter = topology.num_nodes() > 1 ? link_class(topology, 0, per_node) : intra;
  const double bytes = double(plan.workload.attention_parameters_per_layer()) * bytes_of(plan.workload.grad_comm_dtype);
  const int channels = tree_channels(topology), nics = node_nics(topology);
  for (CommGroup& group : plan.groups) {
    group.all_reduce = AllReduceAlgorithm::Ring;
    const int p = int(group.ranks.size());
    if (!runs_all_reduces(group.kind) || p < 3) continue;
    if (forced) {
      group.all_reduce = *forced;
      continue;
    }
    std::map<int, int> per_group_node;  // node -> members there
    for (int r : group.ranks)
      ++per_group_node[plan.ranks[size_t(r)].node];
    int most = 0, fewest = p;
    for (const auto& [node, count] : per_group_node) {
      most = std::max(most, count);
      fewest = std::min(fewest, count);
    }
    const int nodes = int(per_group_node.size());
    const AlphaBeta& link = nodes > 1 ? inter : intra;
    if (!(link.bytes_per_s > 0) || (most > 1 && !(intra.bytes_per_s > 0))) continue;
    const double ring_bytes_per_s =
        ring_estimate_bytes_per_s(nodes, fewest, nics, intra.bytes_per_s, inter.bytes_per_s);
    if (tree_all_reduce_estimate_s(nodes, most, channels, bytes, intra.alpha_s, intra.bytes_per_s, inter.alpha_s,
                                   inter.bytes_per_s) <
        ring_all_reduce_estimate_s(p, bytes, link.alpha_s, ring_bytes_per_s))
      group.all_reduce = AllReduceAlgorithm::Tree;
  }
}

}  // namespace wallfacer
