#include "planner/all_reduce.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "planner/topology.hpp"

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

// Per tree, each position's hop count or latency from the root, filled in by walking up to the
// nearest position already known.
template <typename Edge>
double longest_path(int n, int tree, Edge edge) {
  std::vector<double> from_root(size_t(n), -1.0);
  std::vector<int> path;
  double longest = 0;
  for (int r = 0; r < n; ++r) {
    int at = r;
    while (from_root[size_t(at)] < 0) {
      const int parent = double_tree_links(n, at)[size_t(tree)].parent;
      if (parent < 0) {
        from_root[size_t(at)] = 0;
        break;
      }
      path.push_back(at);
      at = parent;
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const int parent = double_tree_links(n, *it)[size_t(tree)].parent;
      from_root[size_t(*it)] = from_root[size_t(parent)] + edge(parent, *it);
    }
    path.clear();
    longest = std::max(longest, from_root[size_t(r)]);
  }
  return longest;
}

struct AlphaBeta {
  double alpha_s = 0, bytes_per_s = 0;
};

AlphaBeta link_class(const Topology& topology, int a, int b) {
  const Route& route = topology.route(a, b);
  return {route.latency_us * 1e-6, route.bottleneck_GBps * 1e9};
}

bool runs_all_reduces(GroupKind kind) {
  return kind == GroupKind::World || kind == GroupKind::Data || kind == GroupKind::Sequence;
}

}  // namespace

std::array<TreeLinks, 2> double_tree_links(int n, int position) {
  std::array<TreeLinks, 2> links;
  links[0] = binary_tree_links(n, position);
  if (n <= 1) return links;
  const TreeLinks mapped = binary_tree_links(n, to_tree0(n, position));
  links[1].parent = from_tree0(n, mapped.parent);
  links[1].children = {from_tree0(n, mapped.children[0]), from_tree0(n, mapped.children[1])};
  return links;
}

std::vector<int> tree_members(const Plan& plan, int group) {
  std::vector<int> members = plan.groups[size_t(group)].ranks;
  std::sort(members.begin(), members.end(),
            [&](int a, int b) { return plan.ranks[size_t(a)].gpu < plan.ranks[size_t(b)].gpu; });
  return members;
}

std::vector<TreeTransfer> tree_transfers(int n) {
  std::vector<TreeTransfer> transfers;
  for (int k = 0; k < n && n > 1; ++k) {
    const std::array<TreeLinks, 2> links = double_tree_links(n, k);
    for (int32_t t = 0; t < 2; ++t)
      for (int peer : {links[size_t(t)].parent, links[size_t(t)].children[0], links[size_t(t)].children[1]})
        if (peer >= 0) transfers.push_back({k, peer, t, -1});
  }
  std::vector<int> sends(size_t(n), 0), recvs(size_t(n), 0);
  int rounds = 0;
  for (const TreeTransfer& t : transfers)
    rounds = std::max({rounds, ++sends[size_t(t.from)], ++recvs[size_t(t.to)]});
  // send_slot[k * rounds + c]: the transfer position k sends in round c (-1: none); recv_slot alike.
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
  return transfers;
}

std::shared_ptr<const std::vector<TreeTransfer>> tree_transfers_by_round(int n) {
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<const std::vector<TreeTransfer>>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = cache[n];
  if (!entry) {
    std::vector<TreeTransfer> transfers = tree_transfers(n);
    std::stable_sort(transfers.begin(), transfers.end(),
                     [](const TreeTransfer& a, const TreeTransfer& b) { return a.round < b.round; });
    entry = std::make_shared<const std::vector<TreeTransfer>>(std::move(transfers));
  }
  return entry;
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

double tree_critical_latency_s(int n, const std::function<double(int, int)>& latency_s) {
  double critical = 0;
  for (int tree = 0; tree < 2 && n > 1; ++tree) {
    const double down = longest_path(n, tree, [&](int parent, int child) { return latency_s(parent, child); });
    const double up = longest_path(n, tree, [&](int parent, int child) { return latency_s(child, parent); });
    critical = std::max(critical, up + down);
  }
  return critical;
}

double ring_all_reduce_estimate_s(int members, double bytes, double alpha_s, double bytes_per_s) {
  if (members < 2) return 0;
  const double p = members;
  return 2 * (p - 1) * alpha_s + 2 * (p - 1) / p * bytes / bytes_per_s;
}

double tree_all_reduce_estimate_s(int members, double bytes, double alpha_s, double bytes_per_s) {
  if (members < 2) return 0;
  // A position inner in one tree and a leaf of the other sends half the buffer four times.
  return 2 * tree_depth(members) * alpha_s + 2 * bytes / bytes_per_s;
}

void choose_all_reduce_algorithms(Plan& plan, const Topology& topology, std::optional<AllReduceAlgorithm> forced) {
  const int per_node = topology.gpus_per_node();
  const AlphaBeta intra = per_node > 1 ? link_class(topology, 0, 1) : AlphaBeta{};
  const AlphaBeta inter = topology.num_nodes() > 1 ? link_class(topology, 0, per_node) : intra;
  const double bytes = double(plan.workload.attention_parameters_per_layer()) * 4;
  for (CommGroup& group : plan.groups) {
    group.all_reduce = AllReduceAlgorithm::Ring;
    const int p = int(group.ranks.size());
    if (!runs_all_reduces(group.kind) || p < 3) continue;
    if (forced) {
      group.all_reduce = *forced;
      continue;
    }
    const int first_node = plan.ranks[size_t(group.ranks.front())].node;
    const bool spans_nodes = std::any_of(group.ranks.begin(), group.ranks.end(),
                                         [&](int r) { return plan.ranks[size_t(r)].node != first_node; });
    const AlphaBeta& link = spans_nodes ? inter : intra;
    if (!(link.bytes_per_s > 0)) continue;
    if (tree_all_reduce_estimate_s(p, bytes, link.alpha_s, link.bytes_per_s) <
        ring_all_reduce_estimate_s(p, bytes, link.alpha_s, link.bytes_per_s))
      group.all_reduce = AllReduceAlgorithm::Tree;
  }
}

}  // namespace wallfacer
