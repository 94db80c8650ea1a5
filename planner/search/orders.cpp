// Node-local GPU orders for the topology scheduler (orders.hpp).
#include "orders.hpp"
#include "parallel.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include <wallfacer/core/log.hpp>
#include <wallfacer/cost/network.hpp>
#include <wallfacer/schedule/ring_channels.hpp>

namespace wallfacer::detail {

// Resource correspondence built while comparing routes under a GPU permutation.
struct ResourceMap {
  std::unordered_map<ResourceId, ResourceId> forward, backward;
  bool bind(ResourceId a, ResourceId b) {
    auto [fi, fnew] = forward.emplace(a, b);
    auto [bi, bnew] = backward.emplace(b, a);
    return fi->second == b && bi->second == a;
  }
};

namespace {

struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(int n) : parent(size_t(n)) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[size_t(x)] == x ? x : parent[size_t(x)] = find(parent[size_t(x)]); }
  void unite(int a, int b) {
    a = find(a), b = find(b);
    if (a != b) parent[size_t(std::max(a, b))] = std::min(a, b);
  }
};

bool link_inside_a_node(const Topology& topology, const Link& link) {
  const auto& devices = topology.devices();
  return devices[size_t(link.a)].node >= 0 || devices[size_t(link.b)].node >= 0;
}

// Same hop count, equal links hop by hop, and node-internal resources mapped one-to-one (fabric
// links beyond the nodes only need equal bandwidth and latency: the fabric is taken as symmetric).
// With `every_link`, fabric links are mapped one-to-one too (nothing about the fabric is assumed).
bool routes_match(const Topology& topology, const Route& a, const Route& b, ResourceMap& map, bool every_link = false) {
  if (a.hops.size() != b.hops.size()) return false;
  const auto& links = topology.links();
  for (size_t i = 0; i < a.hops.size(); ++i) {
    const Link& la = links[size_t(a.hops[i].link)];
    const Link& lb = links[size_t(b.hops[i].link)];
    if (la.bandwidth_GBps != lb.bandwidth_GBps || la.latency_us != lb.latency_us || la.kind != lb.kind ||
        la.full_duplex != lb.full_duplex)
      return false;
    const bool local_a = link_inside_a_node(topology, la), local_b = link_inside_a_node(topology, lb);
    if (local_a != local_b) return false;
    if ((local_a || every_link) && !map.bind(topology.resource_of(a.hops[i]), topology.resource_of(b.hops[i])))
      return false;
  }
  return true;
}

}  // namespace

NodeOrders::NodeOrders(const Topology& topology, int ranks) : topology_(topology), ranks_(ranks) {
  gpus_per_node_ = topology.gpus_per_node();
  applicable_ = gpus_per_node_ > 1 && ranks >= 2 && topology.num_gpus() == topology.num_nodes() * gpus_per_node_;
  used_per_node_ = std::min(ranks, gpus_per_node_);
  const int g = gpus_per_node_;
  class_.assign(size_t(std::max(g, 0)), 0);
  std::iota(class_.begin(), class_.end(), 0);
  if (!applicable_) return;
  UnionFind twins(g);
  for (int a = 0; a < g; ++a)
    for (int b = a + 1; b < g; ++b)
      if (twins.find(a) != twins.find(b) && swap_is_symmetry(a, b)) twins.unite(a, b);
  for (int x = 0; x < g; ++x)
    class_[size_t(x)] = twins.find(x);
  class_size_.assign(size_t(g), 0);
  for (int c : class_)
    ++class_size_[size_t(c)];
}

const std::vector<std::vector<int>>& NodeOrders::symmetries() const {
  std::call_once(symmetries_->found, [this] { symmetries_->list = find_symmetries(); });
  return symmetries_->list;
}

bool NodeOrders::swap_is_symmetry(int a, int b) const {
  const int g = gpus_per_node_;
  auto swapped = [&](int x) { return x == a ? b : x == b ? a : x; };
  ResourceMap map;
  for (int x = 0; x < g; ++x)
    for (int y = 0; y < g; ++y)
      if (x != y && !routes_match(topology_, topology_.route(x, y), topology_.route(swapped(x), swapped(y)), map))
        return false;
  if (topology_.num_nodes() < 2) return true;
  for (int x = 0; x < g; ++x)
    for (int y = 0; y < g; ++y) {
      if (!routes_match(topology_, topology_.route(x, g + y), topology_.route(swapped(x), g + swapped(y)), map))
        return false;
      if (!routes_match(topology_, topology_.route(g + y, x), topology_.route(g + swapped(y), swapped(x)), map))
        return false;
    }
  return true;
}

// Routes between the GPUs `sigma` has placed so far and the latest one, inside the first node and
// between the first two, map onto their images: what a symmetry must satisfy on its first k + 1.
bool NodeOrders::extends_to_symmetry(const std::vector<int>& sigma, int k, ResourceMap& map) const {
  const int g = gpus_per_node_;
  auto same = [&](int a, int b, int image_a, int image_b) {
    return routes_match(topology_, topology_.route(a, b), topology_.route(image_a, image_b), map, true);
  };
  for (int j = 0; j <= k; ++j) {
    const int x = sigma[size_t(k)], y = sigma[size_t(j)];
    if (j != k && (!same(k, j, x, y) || !same(j, k, y, x))) return false;
    if (topology_.num_nodes() < 2) continue;
    if (!same(k, g + j, x, g + y) || !same(j, g + k, y, g + x) || !same(g + j, k, g + y, x) ||
        !same(g + k, j, g + x, y))
      return false;
  }
  return true;
}

// Every route between any two GPUs of the cluster maps onto its image under `sigma` (applied to
// every node), every resource on the way one-to-one, fabric links included.
bool NodeOrders::is_symmetry(const std::vector<int>& sigma) const {
  const int g = gpus_per_node_, nodes = topology_.num_nodes();
  ResourceMap map;
  for (int m = 0; m < nodes; ++m)
    for (int n = 0; n < nodes; ++n)
      for (int x = 0; x < g; ++x)
        for (int y = 0; y < g; ++y) {
          if (m == n && x == y) continue;
          const Route& route = topology_.route(m * g + x, n * g + y);
          const Route& image = topology_.route(m * g + sigma[size_t(x)], n * g + sigma[size_t(y)]);
          if (!routes_match(topology_, route, image, map, true)) return false;
        }
  return true;
}

std::vector<std::vector<int>> NodeOrders::find_symmetries() const {
  std::vector<std::vector<int>> symmetries{identity()};
  // One twin class: every order is already one. Large clusters: the check is quadratic in GPUs.
  if (!applicable_ || topology_.num_nodes() > kMaxSymmetryNodes) return symmetries;
  if (std::count(class_size_.begin(), class_size_.end(), 0) == gpus_per_node_ - 1) return symmetries;
  // Full and partial checks are bounded (nodes of many GPUs): a subset of the symmetries is still
  // exact, it only merges fewer orders.
  size_t checks = 0, steps = 0;
  const int g = gpus_per_node_;
  std::vector<int> sigma(size_t(g), -1);
  std::vector<bool> taken(size_t(g), false);
  std::function<void(int, const ResourceMap&)> extend = [&](int k, const ResourceMap& map) {
    if (checks > kMaxSymmetryChecks || steps > kMaxSymmetrySteps) return;
    if (k == g) {
      ++checks;
      if (sigma != symmetries.front() && is_symmetry(sigma)) symmetries.push_back(sigma);
      return;
    }
    for (int image = 0; image < g; ++image) {
      if (taken[size_t(image)]) continue;
      sigma[size_t(k)] = image;
      ResourceMap next = map;
      ++steps;
      if (!extends_to_symmetry(sigma, k, next)) continue;
      taken[size_t(image)] = true;
      extend(k + 1, next);
      taken[size_t(image)] = false;
    }
    sigma[size_t(k)] = -1;
  };
  extend(0, ResourceMap{});
  return symmetries;
}

std::vector<int> NodeOrders::class_sequence(const std::vector<int>& order) const {
  std::vector<int> sequence;
  for (int pos = 0; pos < used_per_node_; ++pos)
    sequence.push_back(class_[size_t(order[size_t(pos)])]);
  return sequence;
}

std::vector<int> NodeOrders::canonical(const std::vector<int>& order) const {
  std::vector<int> best, image(order.size());
  for (const std::vector<int>& sigma : symmetries()) {
    for (size_t pos = 0; pos < order.size(); ++pos)
      image[pos] = sigma[size_t(order[pos])];
    std::vector<int> key = class_sequence(image);
    if (best.empty() || key < best) best = std::move(key);
  }
  return best;
}

std::vector<int> NodeOrders::identity() const {
  std::vector<int> order(size_t(std::max(gpus_per_node_, 1)));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::vector<int> NodeOrders::materialize(const std::vector<int>& class_sequence) const {
  std::vector<std::vector<int>> members(static_cast<size_t>(gpus_per_node_));
  for (int x = 0; x < gpus_per_node_; ++x)
    members[size_t(class_[size_t(x)])].push_back(x);
  std::vector<size_t> next(size_t(gpus_per_node_), 0);
  std::vector<int> order;
  std::vector<bool> used(size_t(gpus_per_node_), false);
  for (int c : class_sequence) {
    const int gpu = members[size_t(c)][next[size_t(c)]++];
    order.push_back(gpu);
    used[size_t(gpu)] = true;
  }
  for (int x = 0; x < gpus_per_node_; ++x)
    if (!used[size_t(x)]) order.push_back(x);
  return order;
}

size_t NodeOrders::count_distinct(size_t limit) const {
  if (!applicable_) return 1;
  // Sequences of used_per_node_ twin classes, each class used at most as often as it has GPUs,
  // counted class by class: ways[j] sequences of length j so far, each interleaved with k GPUs of
  // the next class in C(j + k, k) ways. Saturates above `limit` (a node of 16 GPUs has billions).
  const double cap = double(limit) + 1;
  const int used = used_per_node_;
  std::vector<double> ways(size_t(used) + 1, 0.0);
  ways[0] = 1;
  for (const int size : class_size_) {
    if (size == 0) continue;
    std::vector<double> next(ways.size(), 0.0);
    for (int j = 0; j <= used; ++j) {
      if (ways[size_t(j)] == 0) continue;
      double choose = 1;  // C(j + k, k), exact while below 2^53; above the cap it only saturates
      for (int k = 0; k <= std::min(size, used - j); ++k) {
        if (k > 0) choose = choose * (j + k) / k;
        next[size_t(j + k)] = std::min(cap, next[size_t(j + k)] + ways[size_t(j)] * choose);
      }
    }
    ways = std::move(next);
  }
  return size_t(std::min(ways[size_t(used)], cap));
}

std::vector<std::vector<int>> NodeOrders::all_distinct(size_t limit) const {
  std::vector<std::vector<int>> orders{identity()};
  if (!applicable_) return orders;
  // Orders of one class of twin orders, walked as before; of those a symmetry maps onto each
  // other, the first walked stands for them all (so ties still go to the first in this order).
  // Each class of equivalent orders holds at most one order per symmetry: more than `limit` times
  // the most symmetries there can be, and the orders are too many whatever the symmetries are.
  if (count_distinct(limit * kMaxSymmetries) > limit * kMaxSymmetries) return {};
  const size_t symmetry_count = symmetries().size();
  if (count_distinct(limit * symmetry_count) > limit * symmetry_count) return {};
  std::vector<int> identity_classes(class_.begin(), class_.begin() + used_per_node_);
  std::set<std::vector<int>> seen{canonical(identity())};
  std::vector<int> left = class_size_, sequence;
  bool too_many = false;
  std::function<void()> walk = [&]() {
    if (too_many) return;
    if (int(sequence.size()) == used_per_node_) {
      if (sequence == identity_classes) return;
      std::vector<int> order = materialize(sequence);
      if (symmetry_count > 1 && !seen.insert(canonical(order)).second) return;
      orders.push_back(std::move(order));
      too_many = orders.size() > limit;
      return;
    }
    for (int c = 0; c < gpus_per_node_; ++c)
      if (left[size_t(c)] > 0) {
        --left[size_t(c)];
        sequence.push_back(c);
        walk();
        sequence.pop_back();
        ++left[size_t(c)];
      }
  };
  walk();
  if (too_many) return {};
  return orders;
}

std::vector<int> NodeOrders::first_nodes(const std::vector<int>& local_order) const {
  const int nodes = std::min(2, (ranks_ + gpus_per_node_ - 1) / gpus_per_node_);
  std::vector<int> gpus;
  for (int n = 0; n < nodes; ++n)
    for (int pos = 0; pos < used_per_node_; ++pos)
      gpus.push_back(n * gpus_per_node_ + local_order[size_t(pos)]);
  return gpus;
}

std::pair<double, double> NodeOrders::ring_score(const std::vector<int>& local_order) const {
  // The rings a collective over these GPUs runs on (ring_channels.hpp): the ring in rank order, or
  // across nodes with several NICs one per NIC, all at once.
  const std::vector<int> gpus = first_nodes(local_order);
  Plan plan;
  std::vector<int> ranks;
  for (int r = 0; r < int(gpus.size()); ++r) {
    const int gpu = gpus[size_t(r)];
    plan.ranks.push_back({r, gpu, topology_.node_of_gpu(gpu), topology_.local_gpu(gpu), ""});
    ranks.push_back(r);
  }
  plan.groups.push_back({"ring", GroupKind::World, ranks});
  const RingChannels channels = ring_channels(plan, 0, topology_);
  ContentionCounter counter(topology_);
  const size_t k = gpus.size();
  for (const std::vector<int32_t>& ring : channels.rings)
    for (size_t i = 0; i < k; ++i)
      counter.add(gpus[size_t(ring[i])], gpus[size_t(ring[(i + 1) % k])]);
  double worst = std::numeric_limits<double>::infinity(), sum = 0;
  for (const std::vector<int32_t>& ring : channels.rings)
    for (size_t i = 0; i < k; ++i) {
      const double bw = counter.price(gpus[size_t(ring[i])], gpus[size_t(ring[(i + 1) % k])]).bandwidth_GBps;
      worst = std::min(worst, bw);
      sum += bw;
    }
  return {worst * channels.count(), sum};
}

// A search scores every distinct order of a node of eight GPUs in a fraction of a second (40,320
// on a DGX-1V cluster too large for its symmetries to be looked for), and the suggestions for a
// plan that does not fit run a dozen searches on the same cluster, some on fewer GPUs: the order
// found is remembered by what it depends on, the topology's content (its hash, which counts the
// nodes and so decides the symmetries), the GPUs a node uses, the nodes scored (first_nodes) and
// the limit.
std::vector<int> NodeOrders::best_ring_order(size_t limit, int threads) const {
  if (!applicable_) return identity();
  using Key = std::tuple<std::string, int, size_t, size_t>;
  static std::mutex mutex;
  static std::map<Key, std::vector<int>> found;
  constexpr size_t kKept = 64;
  Key key{topology_.content_hash(), used_per_node_, first_nodes(identity()).size(), limit};
  {
    const std::lock_guard lock(mutex);
    if (const auto it = found.find(key); it != found.end()) return it->second;
  }
  std::vector<int> order = score_ring_orders(limit, threads);
  const std::lock_guard lock(mutex);
  if (found.size() >= kKept) found.clear();
  found.emplace(std::move(key), order);
  return order;
}

std::vector<int> NodeOrders::score_ring_orders(size_t limit, int threads) const {
  std::vector<std::vector<int>> orders = all_distinct(limit);
  if (orders.empty()) {
    // Too many to score: greedy path, always to the best-connected unvisited GPU.
    std::vector<int> order{0};
    std::vector<bool> seen(size_t(gpus_per_node_), false);
    seen[0] = true;
    while (int(order.size()) < gpus_per_node_) {
      int best = -1;
      double best_bw = -1;
      for (int x = 0; x < gpus_per_node_; ++x) {
        if (seen[size_t(x)]) continue;
        const double bw = topology_.route(order.back(), x).bottleneck_GBps;
        if (bw > best_bw) best = x, best_bw = bw;
      }
      seen[size_t(best)] = true;
      order.push_back(best);
    }
    return order;
  }
  // Among orders whose rings have the same bottleneck (often many: a ring crosses a slow link the
  // same number of times in several ways), the one a pairwise all-to-all over the same GPUs runs
  // fastest on, then the best ring sum: Ulysses and USP plans need both a good ring (their
  // gradient all-reduce) and a good all-to-all. Of equal scores the first order wins. Each order
  // is scored on its own, on the threads.
  std::vector<std::pair<double, double>> rings(orders.size());  // ring bottleneck, ring sum
  for_each_index(orders.size(), threads, [&](size_t i) { rings[i] = ring_score(orders[i]); });
  double widest = -1;
  for (const auto& ring : rings)
    widest = std::max(widest, ring.first);
  std::vector<size_t> widest_orders;
  for (size_t i = 0; i < orders.size(); ++i)
    if (rings[i].first == widest) widest_orders.push_back(i);
  std::vector<double> all_to_all(widest_orders.size());
  for_each_index(widest_orders.size(), threads,
                 [&](size_t k) { all_to_all[k] = all_to_all_score(orders[widest_orders[k]]); });
  size_t best = 0;
  for (size_t k = 1; k < widest_orders.size(); ++k)
    if (std::pair(-all_to_all[k], rings[widest_orders[k]].second) >
        std::pair(-all_to_all[best], rings[widest_orders[best]].second))
      best = k;
  return orders[widest_orders[best]];
}

double NodeOrders::all_to_all_score(const std::vector<int>& local_order) const {
  const std::vector<int> gpus = first_nodes(local_order);
  const size_t k = gpus.size();
  ContentionCounter counter(topology_);
  // As the cost model prices a pairwise all-to-all: each step at its slowest flow.
  double seconds_per_byte = 0;
  for (size_t offset = 1; offset < k; ++offset) {
    for (size_t i = 0; i < k; ++i)
      counter.add(gpus[i], gpus[(i + offset) % k]);
    double worst = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < k; ++i)
      worst = std::min(worst, counter.price(gpus[i], gpus[(i + offset) % k]).bandwidth_GBps);
    counter.clear();
    seconds_per_byte += 1 / worst;
  }
  return seconds_per_byte;
}

std::vector<int> NodeOrders::gpu_order(const std::vector<int>& local_order) const {
  std::vector<int> gpus(static_cast<size_t>(ranks_));
  for (int r = 0; r < ranks_; ++r) {
    if (!applicable_) {
      gpus[size_t(r)] = r;
      continue;
    }
    gpus[size_t(r)] = (r / gpus_per_node_) * gpus_per_node_ + local_order[size_t(r % gpus_per_node_)];
  }
  return gpus;
}

void NodeOrders::place(Plan& plan, const std::vector<int>& identity_positions,
                       const std::vector<int>& local_order) const {
  const std::vector<int> gpus = gpu_order(local_order);
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    RankSlot& slot = plan.ranks[r];
    slot.gpu = gpus[size_t(identity_positions[r])];
    slot.node = topology_.node_of_gpu(slot.gpu);
    slot.local_gpu = topology_.local_gpu(slot.gpu);
    const int nic = topology_.nic_of_gpu(slot.gpu);
    slot.nic = nic >= 0 ? topology_.devices()[size_t(nic)].name : std::string();
  }
}

std::vector<std::vector<int>> choose_orders(const NodeOrders& orders, SearchMode mode, const SearchOptions& options) {
  if (mode == SearchMode::Exhaustive) {
    auto all = orders.all_distinct(options.max_orders);
    if (!all.empty()) return all;
    WF_LOG_WARN("search", "more than {} distinct node-local GPU orders; using the heuristic orders",
                options.max_orders);
  }
  if (orders.count_distinct(kFewOrders) <= kFewOrders) return orders.all_distinct(kFewOrders);
  std::vector<std::vector<int>> chosen{orders.identity()};
  auto ring = orders.best_ring_order(kScoredOrders, options.threads);
  if (ring != chosen.front()) chosen.push_back(ring);
  return chosen;
}

}  // namespace wallfacer::detail
