// Contention-aware pricing of transfers and collectives for the cost model (network.hpp).
#include <wallfacer/cost/network.hpp>

#include <algorithm>
#include <limits>
#include <unordered_set>

#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/schedule/ring_channels.hpp>

namespace wallfacer::detail {
namespace {

uint64_t pair_key(int a, int b) {
  return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
}
constexpr double kInf = std::numeric_limits<double>::infinity();
// First int of a FlowPriceCache group key (2 and 3 open the keys of whole patterns).
constexpr int32_t kNearKey = 4;

}  // namespace

ContentionCounter::ContentionCounter(const Topology& topology)
    : topology_(topology), count_(2 * topology.links().size() + 2, 0) {}

void ContentionCounter::add(int src_gpu, int dst_gpu) {
  if (src_gpu == dst_gpu) return;
  for (const Hop& hop : topology_.route(src_gpu, dst_gpu).hops) {
    const ResourceId id = topology_.resource_of(hop);
    if (count_[size_t(id)]++ == 0) touched_.push_back(id);
  }
}

FlowPrice ContentionCounter::price(int src_gpu, int dst_gpu) const {
  const Route& route = topology_.route(src_gpu, dst_gpu);
  FlowPrice price{kInf, route.latency_us};
  for (const Hop& hop : route.hops) {
    const ResourceId id = topology_.resource_of(hop);
    const double share = topology_.resource_bandwidth_GBps(id) / std::max(count_[size_t(id)], 1);
    price.bandwidth_GBps = std::min(price.bandwidth_GBps, share);
  }
  return price;
}

void ContentionCounter::remove(int src_gpu, int dst_gpu) {
  if (src_gpu == dst_gpu) return;
  for (const Hop& hop : topology_.route(src_gpu, dst_gpu).hops)
    --count_[size_t(topology_.resource_of(hop))];
}

double ContentionCounter::resources_of(int src_gpu, int dst_gpu, std::vector<ResourceId>& ids) const {
  if (src_gpu == dst_gpu) return 0;
  const Route& route = topology_.route(src_gpu, dst_gpu);
  for (const Hop& hop : route.hops)
    ids.push_back(topology_.resource_of(hop));
  return route.latency_us;
}

void ContentionCounter::add(std::span<const ResourceId> ids) {
  for (const ResourceId id : ids)
    if (count_[size_t(id)]++ == 0) touched_.push_back(id);
}

void ContentionCounter::remove(std::span<const ResourceId> ids) {
  for (const ResourceId id : ids)
    --count_[size_t(id)];
}

FlowPrice ContentionCounter::price(std::span<const ResourceId> ids, double latency_us) const {
  FlowPrice price{kInf, latency_us};
  for (const ResourceId id : ids) {
    const double share = topology_.resource_bandwidth_GBps(id) / std::max(count_[size_t(id)], 1);
    price.bandwidth_GBps = std::min(price.bandwidth_GBps, share);
  }
  return price;
}

void ContentionCounter::clear() {
  for (int64_t id : touched_)
    count_[size_t(id)] = 0;
  touched_.clear();
}

std::optional<double> TreePriceCache::find(const std::vector<int>& gpus, int64_t buffer_bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = seconds_.find({buffer_bytes, gpus});
  if (it == seconds_.end()) return std::nullopt;
  return it->second;
}

void TreePriceCache::store(const std::vector<int>& gpus, int64_t buffer_bytes, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (seconds_.size() >= kMaxEntries) seconds_.clear();
  seconds_.emplace(std::make_pair(buffer_bytes, gpus), seconds);
}

size_t FlowPriceCache::KeyHash::operator()(const std::vector<int32_t>& key) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ key.size();
  for (int32_t v : key)
    h = (h ^ uint32_t(v)) * 0x100000001B3ull;
  return size_t(h ^ (h >> 29));
}

FlowPriceCache::Prices FlowPriceCache::find(const std::vector<int32_t>& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = prices_.find(key);
  return it == prices_.end() ? nullptr : it->second;
}

void FlowPriceCache::make_room(size_t ints) {
  if (ints_ + ints > kMaxInts) prices_.clear(), group_prices_.clear(), ints_ = 0;
}

void FlowPriceCache::store(std::vector<int32_t> key, Prices prices) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t ints = key.size() + 4 * prices->size();
  make_room(ints);
  if (prices_.emplace(std::move(key), std::move(prices)).second) ints_ += ints;
}

FlowPriceCache::GroupPrices FlowPriceCache::find_groups(const std::vector<int32_t>& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = group_prices_.find(key);
  return it == group_prices_.end() ? nullptr : it->second;
}

void FlowPriceCache::store_groups(std::vector<int32_t> key, GroupPrices prices) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t ints = key.size();
  for (const GroupPrice& price : *prices)
    ints += 4 * (1 + price.frontier.size());
  make_room(ints);
  if (group_prices_.emplace(std::move(key), std::move(prices)).second) ints_ += ints;
}

NetworkPricer::NetworkPricer(const Topology& topology, const Plan& plan, const std::vector<FlowSet>& flow_sets,
                             TreePriceCache* tree_prices, FlowPriceCache* flow_prices)
    : topology_(topology),
      plan_(plan),
      flow_sets_(flow_sets),
      counter_(topology),
      tree_prices_(tree_prices),
      flow_prices_(flow_prices) {}

// ---- point-to-point ------------------------------------------------------------------------

NetworkPricer::SetIndex& NetworkPricer::set_index(int flow_set) {
  auto [it, fresh] = sets_.try_emplace(flow_set);
  SetIndex& index = it->second;
  if (!fresh) return index;
  const auto& flows = flow_sets_[size_t(flow_set)].flows;
  if (flows.size() <= kExactFlows) {
    // Every flow's price depends on the GPUs of the set's flows alone.
    std::vector<int32_t> key{1};
    for (const auto& [src, dst] : flows)
      key.insert(key.end(), {gpu_of(src), gpu_of(dst)});
    FlowPriceCache::Prices prices = flow_prices_ ? flow_prices_->find(key) : nullptr;
    if (!prices) {
      // Count first, then price: a flow's share depends on every flow of the set.
      for (const auto& [src, dst] : flows)
        counter_.add(gpu_of(src), gpu_of(dst));
      auto computed = std::make_shared<std::vector<FlowPrice>>();
      for (const auto& [src, dst] : flows)
        computed->push_back(counter_.price(gpu_of(src), gpu_of(dst)));
      counter_.clear();
      prices = computed;
      if (flow_prices_) flow_prices_->store(std::move(key), prices);
    }
    for (size_t f = 0; f < flows.size(); ++f)
      index.prices.emplace(pair_key(flows[f].first, flows[f].second), (*prices)[f]);
    return index;
  }
  for (size_t f = 0; f < flows.size(); ++f) {
    const int a = node_of(flows[f].first), b = node_of(flows[f].second);
    index.by_node[a].push_back(int32_t(f));
    if (b != a) index.by_node[b].push_back(int32_t(f));
  }
  return index;
}

FlowPrice NetworkPricer::p2p_price(int flow_set, int src_rank, int dst_rank) {
  auto lone = [&] {
    const Route& route = topology_.route(gpu_of(src_rank), gpu_of(dst_rank));
    return FlowPrice{route.bottleneck_GBps, route.latency_us};
  };
  if (flow_set < 0 || flow_set >= int(flow_sets_.size())) return lone();
  SetIndex& index = set_index(flow_set);
  const uint64_t key = pair_key(src_rank, dst_rank);
  if (auto it = index.prices.find(key); it != index.prices.end()) return it->second;
  if (index.by_node.empty()) return lone();  // not in this (small) set

  // Large set: the flows with an end on either node of this flow.
  const auto& flows = flow_sets_[size_t(flow_set)].flows;
  const int na = node_of(src_rank), nb = node_of(dst_rank);
  bool member = false;
  for (int node : {na, nb}) {
    auto it = index.by_node.find(node);
    if (it == index.by_node.end()) continue;
    for (int32_t f : it->second) {
      const auto [s, d] = flows[size_t(f)];
      if (node == nb && nb != na && (node_of(s) == na || node_of(d) == na)) continue;  // counted already
      counter_.add(gpu_of(s), gpu_of(d));
      member = member || (s == src_rank && d == dst_rank);
    }
  }
  FlowPrice price = member ? counter_.price(gpu_of(src_rank), gpu_of(dst_rank)) : lone();
  counter_.clear();
  index.prices.emplace(key, price);
  return price;
}

double NetworkPricer::p2p_seconds(int flow_set, int src_rank, int dst_rank, int64_t bytes) {
  if (src_rank == dst_rank || gpu_of(src_rank) == gpu_of(dst_rank)) return 0;
  // Programs repeat the same flow op after op: remember the last one.
  if (flow_set != last_.flow_set || src_rank != last_.src || dst_rank != last_.dst)
    last_ = {flow_set, src_rank, dst_rank, p2p_price(flow_set, src_rank, dst_rank)};
  const FlowPrice& price = last_.price;
  return price.latency_us * 1e-6 + double(bytes) / (price.bandwidth_GBps * 1e9);
}

// ---- collectives ---------------------------------------------------------------------------

void GroupPrice::add(const FlowPrice& flow) {
  bandwidth_GBps = std::min(bandwidth_GBps, flow.bandwidth_GBps);
  latency_us = std::max(latency_us, flow.latency_us);
  auto covers = [](const FlowPrice& a, const FlowPrice& b) {  // a takes at least as long as b at every size
    return a.latency_us >= b.latency_us && a.bandwidth_GBps <= b.bandwidth_GBps;
  };
  for (const FlowPrice& kept : frontier)
    if (covers(kept, flow)) return;
  std::erase_if(frontier, [&](const FlowPrice& kept) { return covers(flow, kept); });
  frontier.push_back(flow);
}

double GroupPrice::slowest_seconds(double bytes) const {
  double seconds = 0;
  for (const FlowPrice& flow : frontier)
    seconds = std::max(seconds,
                       flow.latency_us * 1e-6 + (flow.bandwidth_GBps < kInf ? bytes / (flow.bandwidth_GBps * 1e9) : 0));
  return seconds;
}

const NetworkPricer::RingLanes& NetworkPricer::ring_lanes(int group) {
  auto [it, fresh] = ring_lanes_.try_emplace(group);
  RingLanes& lanes = it->second;
  if (!fresh) return lanes;
  const RingChannels channels = ring_channels(plan_, group, topology_);
  const size_t n = plan_.groups[size_t(group)].ranks.size();
  lanes.channels = channels.count();
  lanes.next.assign(size_t(lanes.channels) * n, -1);
  lanes.prev.assign(lanes.next.size(), -1);
  for (size_t c = 0; c < channels.rings.size(); ++c) {
    const std::vector<int32_t>& ring = channels.rings[c];
    for (size_t i = 0; i < n; ++i) {
      const int32_t from = ring[i], to = ring[(i + 1) % n];
      lanes.next[c * n + size_t(from)] = to;
      lanes.prev[c * n + size_t(to)] = from;
    }
  }
  return lanes;
}

template <typename Visit>
void NetworkPricer::for_each_successor(const Pattern& p, int group, int k, Visit&& visit) {
  const int n = int(plan_.groups[size_t(group)].ranks.size());
  if (!p.ring) {
    for (int offset : p.offsets)
      visit((k + offset) % n);
    return;
  }
  const RingLanes& lanes = ring_lanes(group);
  for (int c = 0; c < lanes.channels; ++c)
    visit(int(lanes.next[size_t(c) * size_t(n) + size_t(k)]));
}

template <typename Visit>
void NetworkPricer::for_each_predecessor(const Pattern& p, int group, int k, Visit&& visit) {
  const int n = int(plan_.groups[size_t(group)].ranks.size());
  if (!p.ring) {
    for (int offset : p.offsets)
      visit((k - offset % n + n) % n);
    return;
  }
  const RingLanes& lanes = ring_lanes(group);
  for (int c = 0; c < lanes.channels; ++c)
    visit(int(lanes.prev[size_t(c) * size_t(n) + size_t(k)]));
}

NetworkPricer::Pattern& NetworkPricer::pattern(GroupKind kind, const std::vector<int>& offsets, bool ring) {
  auto [it, fresh] = patterns_.try_emplace(std::make_tuple(int(kind), ring, offsets));
  Pattern& p = it->second;
  if (!fresh) return p;
  p.kind = kind;
  p.offsets = offsets;
  p.ring = ring;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const CommGroup& group = plan_.groups[g];
    if (group.kind != kind || group.ranks.size() < 2) continue;
    p.flows += group.ranks.size() * (ring ? size_t(ring_lanes(int(g)).channels) : offsets.size());
  }
  if (p.flows > kExactFlows) return p;
  // Every group's price depends on the pattern (ring channels or offsets) and the GPUs of the
  // kind's groups alone: a group's channels follow from its GPUs on this topology
  // (ring_channels.hpp), and their count is in the key as well.
  std::vector<int32_t> key{ring ? 3 : 2, int32_t(offsets.size())};
  key.insert(key.end(), offsets.begin(), offsets.end());
  std::vector<int> groups;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    if (plan_.groups[g].kind != kind) continue;
    groups.push_back(int(g));
    key.push_back(int32_t(plan_.groups[g].ranks.size()));
    if (ring) key.push_back(plan_.groups[g].ranks.size() > 1 ? ring_lanes(int(g)).channels : 1);
    for (int rank : plan_.groups[g].ranks)
      key.push_back(gpu_of(rank));
  }
  if (FlowPriceCache::GroupPrices known = flow_prices_ ? flow_prices_->find_groups(key) : nullptr) {
    for (size_t k = 0; k < groups.size(); ++k)
      p.prices.emplace(groups[k], (*known)[k]);
    return p;
  }
  price_pattern(p);
  if (flow_prices_) {
    auto prices = std::make_shared<std::vector<GroupPrice>>();
    for (int g : groups)
      prices->push_back(p.prices.at(g));
    flow_prices_->store_groups(std::move(key), std::move(prices));
  }
  return p;
}

// Small patterns: every group priced against every flow of its kind that can run at the same time.
void NetworkPricer::price_pattern(Pattern& p) {
  const GroupKind kind = p.kind;
  // Every flow of the kind, its route's resources looked up once: (group, source rank, latency,
  // its resources in `ids` from `first` up to the next flow's). A flow within one GPU has none.
  struct Flow {
    int group;
    int from;
    double latency_us;
    bool local;
    size_t first;
  };
  std::vector<Flow> flows;
  std::vector<ResourceId> ids;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const std::vector<int>& members = plan_.groups[g].ranks;
    if (plan_.groups[g].kind != kind || members.size() < 2) continue;
    for (int k = 0; k < int(members.size()); ++k)
      for_each_successor(p, int(g), k, [&](int l) {
        const int a = members[size_t(k)], b = members[size_t(l)];
        const size_t first = ids.size();
        const double latency = counter_.resources_of(gpu_of(a), gpu_of(b), ids);
        flows.push_back({int(g), a, latency, gpu_of(a) == gpu_of(b), first});
      });
  }
  auto resources = [&](size_t f) {
    const size_t last = f + 1 < flows.size() ? flows[f + 1].first : ids.size();
    return std::span<const ResourceId>(ids.data() + flows[f].first, last - flows[f].first);
  };
  // A rank runs one collective at a time, so another group's flows that start at one of this
  // group's members are not concurrent with it (e.g. two groups over the same ranks). Every flow
  // of the kind counted once; each group then takes out, while it is priced, the other groups'
  // flows that start at one of its members. (Counting them again per group made a search at 4,096
  // GPUs spend seconds here: 128 groups x 4,096 flows per pattern.)
  std::unordered_map<int, std::vector<size_t>> flows_from;  // rank -> its flows
  for (size_t f = 0; f < flows.size(); ++f) {
    counter_.add(resources(f));
    flows_from[flows[f].from].push_back(f);
  }
  size_t own = 0;  // the group's flows are consecutive, in group order
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    if (plan_.groups[g].kind != kind) continue;
    auto for_each_foreign_flow = [&](auto&& visit) {
      for (int a : plan_.groups[g].ranks)
        if (auto it = flows_from.find(a); it != flows_from.end())
          for (size_t f : it->second)
            if (flows[f].group != int(g)) visit(f);
    };
    for_each_foreign_flow([&](size_t f) { counter_.remove(resources(f)); });
    GroupPrice price;
    for (; own < flows.size() && flows[own].group == int(g); ++own)
      if (!flows[own].local) price.add(counter_.price(resources(own), flows[own].latency_us));
    p.prices.emplace(int(g), price);
    for_each_foreign_flow([&](size_t f) { counter_.add(resources(f)); });
  }
  counter_.clear();
}

void NetworkPricer::index_kind(GroupKind kind) {
  auto [it, fresh] = members_by_node_.try_emplace(int(kind));
  if (!fresh) return;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    if (plan_.groups[g].kind != kind) continue;
    const auto& members = plan_.groups[g].ranks;
    for (size_t k = 0; k < members.size(); ++k)
      it->second[node_of(members[k])].emplace_back(int(g), int(k));
  }
}

// Lists the pattern's flows with an end on a node that holds a member of `group` (as GPU pairs,
// two ints each), the flows that share those nodes' links with the group's own.
void NetworkPricer::flows_near(const Pattern& p, int group, std::vector<int32_t>& out) {
  index_kind(p.kind);
  const auto& by_node = members_by_node_[int(p.kind)];
  std::unordered_set<int> nodes;
  for (int rank : plan_.groups[size_t(group)].ranks)
    nodes.insert(node_of(rank));
  const std::unordered_set<int> own(plan_.groups[size_t(group)].ranks.begin(), plan_.groups[size_t(group)].ranks.end());
  for (int node : nodes) {
    auto it = by_node.find(node);
    if (it == by_node.end()) continue;
    for (const auto& [g, k] : it->second) {
      const auto& members = plan_.groups[size_t(g)].ranks;
      if (members.size() < 2) continue;
      // A rank runs one collective at a time: another group's flows from our members don't compete.
      const bool concurrent = g == group || !own.count(members[size_t(k)]);
      if (concurrent)
        for_each_successor(p, g, k, [&](int l) {
          out.insert(out.end(), {gpu_of(members[size_t(k)]), gpu_of(members[size_t(l)])});  // leaves the node
        });
      for_each_predecessor(p, g, k, [&](int l) {
        const int from = members[size_t(l)];
        if (!nodes.count(node_of(from)) && (g == group || !own.count(from)))
          out.insert(out.end(), {gpu_of(from), gpu_of(members[size_t(k)])});  // arrives
      });
    }
  }
}

// A large pattern's group is priced against the flows near it (flows_near). The price depends on
// those flows' GPUs and the group's own flows alone, which is the cache's key: the pricers of one
// candidate (its attention, its bounds, its step) and candidates with equal groups price the same
// flows again and again, and counting them is a route lookup per hop of every flow.
GroupPrice NetworkPricer::group_price(Pattern& p, int group) {
  if (auto it = p.prices.find(group); it != p.prices.end()) return it->second;
  std::vector<int32_t> key{kNearKey};
  flows_near(p, group, key);
  const size_t counted_end = key.size();
  key.push_back(-1);  // then the group's own flows
  const auto& members = plan_.groups[size_t(group)].ranks;
  for (int k = 0; k < int(members.size()); ++k)
    for_each_successor(p, group, k, [&](int l) {
      const int a = gpu_of(members[size_t(k)]), b = gpu_of(members[size_t(l)]);
      if (a != b) key.insert(key.end(), {a, b});
    });
  if (FlowPriceCache::GroupPrices known = flow_prices_ ? flow_prices_->find_groups(key) : nullptr)
    return p.prices.emplace(group, known->front()).first->second;
  for (size_t i = 1; i < counted_end; i += 2)
    counter_.add(key[i], key[i + 1]);
  GroupPrice price;
  for (size_t i = counted_end + 1; i < key.size(); i += 2)
    price.add(counter_.price(key[i], key[i + 1]));
  counter_.clear();
  if (flow_prices_) flow_prices_->store_groups(std::move(key), std::make_shared<std::vector<GroupPrice>>(1, price));
  p.prices.emplace(group, price);
  return price;
}

int NetworkPricer::member_index(int group, int rank) {
  if (group_indexed_.empty()) group_indexed_.assign(plan_.groups.size(), false);
  if (!group_indexed_[size_t(group)]) {
    group_indexed_[size_t(group)] = true;
    const auto& members = plan_.groups[size_t(group)].ranks;
    for (size_t i = 0; i < members.size(); ++i)
      member_index_.emplace(pair_key(group, members[i]), int(i));
  }
  auto it = member_index_.find(pair_key(group, rank));
  return it == member_index_.end() ? -1 : it->second;
}

double NetworkPricer::collective_seconds(OpKind kind, int group, int64_t bytes) {
  if (group < 0 || group >= int(plan_.groups.size())) return 0;
  const CommGroup& g = plan_.groups[size_t(group)];
  const int p = int(g.ranks.size());
  if (p < 2) return 0;
  const GroupPrice price = group_price(pattern(g.kind, {1}, true), group);
  // Ring algorithms (docs/algorithms.md §10.1): p-1 steps (all-reduce 2(p-1)), each one latency plus
  // the step's bytes over a ring edge under contention. The channels run at once, each carrying
  // its share of every step, and a step waits for the slowest of their edges (as the replay runs
  // them): steps x the slowest edge's latency + bytes / (steps x channels) at its bandwidth, which
  // is steps·α + bytes/(channels·β) where one edge has both the largest α and the smallest β.
  const int steps = kind == OpKind::AllReduce ? 2 * (p - 1) : p - 1;
  const double channels = ring_lanes(group).channels;
  return steps * price.slowest_seconds(double(bytes) / (steps * channels));
}

void NetworkPricer::add_load(std::vector<ResourceLoad>& loads, std::span<const ResourceId> resources, double first_s,
                             double bytes) {
  for (const ResourceId resource : resources) {
    const auto id = size_t(resource);
    if (loads.size() <= id) loads.resize(id + 1);
    loads[id].first_s = std::min(loads[id].first_s, first_s);
    loads[id].bytes += bytes;
  }
}

double NetworkPricer::tree_all_reduce_seconds(int group, int64_t buffer_bytes) {
  if (group < 0 || group >= int(plan_.groups.size())) return 0;
  const int n = int(plan_.groups[size_t(group)].ranks.size());
  if (n < 2) return 0;
  auto [it, fresh] = tree_seconds_.try_emplace({group, buffer_bytes}, 0.0);
  if (!fresh) return it->second;
  // The layout follows from the GPUs alone (TreeLayout::members are by GPU).
  std::vector<int> gpus;
  for (int rank : plan_.groups[size_t(group)].ranks)
    gpus.push_back(gpu_of(rank));
  std::sort(gpus.begin(), gpus.end());
  if (tree_prices_) {
    if (std::optional<double> known = tree_prices_->find(gpus, buffer_bytes)) return it->second = *known;
  }
  const TreeLayout layout = tree_layout(plan_, group, topology_);
  auto gpu = [&](int member) { return gpus[size_t(member)]; };
  const double critical_s =
      tree_critical_latency_s(layout, [&](int a, int b) { return topology_.route(gpu(a), gpu(b)).latency_us * 1e-6; });
  // Timed as the simulator runs them: pairwise in their rounds, so a transfer starts when its
  // sender's previous send and its receiver's previous receive are done, a member's first send
  // after the pipeline's fill (the critical latency, less that transfer's own latency); each
  // takes its latency and its bytes at its share of the links it crosses with the other
  // transfers of its round.
  const double bytes = tree_transfer_bytes(buffer_bytes, int(layout.parents.size()));
  const std::vector<TreeTransfer> transfers = tree_transfers(layout);
  std::vector<double> send_free(size_t(n), -1.0), recv_free(size_t(n), 0.0);
  double end_s = 0;
  // Rounds are no barriers in the replay: a member starts its next transfer once its previous
  // send (or receive) is done, so transfers of different rounds that cross one resource (a node's
  // only NIC) overlap there and share it, which round-by-round pricing misses. Each resource's
  // whole load bounds the end from below: the end of its earliest transfer's latency, plus every
  // byte that crosses it at its bandwidth.
  std::vector<ResourceLoad> loads;
  std::vector<ResourceId> ids;  // a round's transfers' resources, each route looked up once
  std::vector<size_t> first;    // by transfer of the round: where its resources start in `ids`
  std::vector<double> latency_us;
  for (size_t begin = 0; begin < transfers.size();) {
    size_t end = begin;
    while (end < transfers.size() && transfers[end].round == transfers[begin].round)
      ++end;
    ids.clear();
    first.clear();
    latency_us.clear();
    for (size_t i = begin; i < end; ++i) {
      first.push_back(ids.size());
      latency_us.push_back(counter_.resources_of(gpu(transfers[i].from), gpu(transfers[i].to), ids));
    }
    first.push_back(ids.size());
    auto resources = [&](size_t i) {
      return std::span<const ResourceId>(ids.data() + first[i - begin], first[i - begin + 1] - first[i - begin]);
    };
    for (size_t i = begin; i < end; ++i)
      counter_.add(resources(i));
    for (size_t i = begin; i < end; ++i) {
      const TreeTransfer& t = transfers[i];
      const FlowPrice flow = counter_.price(resources(i), latency_us[i - begin]);
      const double latency_s = flow.latency_us * 1e-6;
      double& sender = send_free[size_t(t.from)];
      if (sender < 0) sender = std::max(critical_s - latency_s, 0.0);
      const double start = std::max(sender, recv_free[size_t(t.to)]);
      const double finish = start + latency_s + (flow.bandwidth_GBps < kInf ? bytes / (flow.bandwidth_GBps * 1e9) : 0);
      sender = recv_free[size_t(t.to)] = finish;
      end_s = std::max(end_s, finish);
      add_load(loads, resources(i), start + latency_s, bytes);
    }
    counter_.clear();
    begin = end;
  }
  for (size_t id = 0; id < loads.size(); ++id)
    if (loads[id].bytes > 0)
      end_s = std::max(end_s,
                       loads[id].first_s + loads[id].bytes / (topology_.resource_bandwidth_GBps(ResourceId(id)) * 1e9));
  it->second = end_s;
  if (tree_prices_) tree_prices_->store(gpus, buffer_bytes, it->second);
  return it->second;
}

std::vector<std::pair<int, int64_t>> NetworkPricer::all_to_all_slices(const RankProgram& program, const Op& op,
                                                                      const TokenSetPool& pool,
                                                                      const ScheduleDims& dims) {
  const CollectiveSpec& spec = program.collectives[size_t(op.coll)];
  if (spec.group < 0 || spec.group >= int(plan_.groups.size())) return {};
  const int p = int(plan_.groups[size_t(spec.group)].ranks.size());
  const int me = member_index(spec.group, program.rank);
  if (p < 2 || me < 0 || size_t(me) >= spec.in_tokens.size()) return {};
  // Peers this member sends to, and the largest slice it sends.
  const TokenSet& in = pool.get(spec.in_tokens[size_t(me)]);
  const HeadRange in_heads = spec.in_heads[size_t(me)];
  const bool fp32 = op.buf[0] >= 0 && program.buffers[size_t(op.buf[0])].fp32;
  const int batch = std::max(program.batch_end - program.batch_begin, 1);
  std::vector<std::pair<int, int64_t>> slices;  // (peer offset, bytes)
  for (int j = 0; j < p; ++j) {
    if (j == me) continue;
    const HeadRange out_heads = spec.out_heads[size_t(j)];
    const int32_t heads = std::min(in_heads.end, out_heads.end) - std::max(in_heads.begin, out_heads.begin);
    if (heads <= 0) continue;
    int64_t tokens = 0;
    for (const TokenRange& a : in)
      for (const TokenRange& b : pool.get(spec.out_tokens[size_t(j)]))
        tokens += std::max<int64_t>(0, std::min(a.end, b.end) - std::max(a.begin, b.begin));
    if (tokens <= 0) continue;
    slices.emplace_back((j - me + p) % p, payload_bytes(dims, spec.fields, tokens, heads, batch, fp32));
  }
  std::sort(slices.begin(), slices.end());
  return slices;
}

double NetworkPricer::all_to_all_seconds(int group, const std::vector<std::pair<int, int64_t>>& slices) {
  if (slices.empty()) return 0;
  // Pairwise, as the simulator runs it (and NCCL its grouped point-to-point calls): the member
  // sends to offset +1, then +2, ..., one peer at a time, each step at its latency and at the
  // share its flow gets among that step's flows of every group of the kind. Priced as if all
  // flows were in flight at once instead, a member whose peers sit behind links of different
  // speeds (NVLink inside a node, a NIC between nodes) would overlap its fast steps with its slow
  // ones, which it does not: a Ulysses group over two DGX H100 nodes came out 7.7 % under.
  const GroupKind kind = plan_.groups[size_t(group)].kind;
  double seconds = 0;
  for (const auto& [offset, bytes] : slices) {
    const GroupPrice price = group_price(pattern(kind, {offset}), group);
    seconds +=
        price.latency_us * 1e-6 + (price.bandwidth_GBps < kInf ? double(bytes) / (price.bandwidth_GBps * 1e9) : 0);
  }
  return seconds;
}

double NetworkPricer::all_to_all_seconds(const RankProgram& program, const Op& op, const TokenSetPool& pool,
                                         const ScheduleDims& dims) {
  return all_to_all_seconds(program.collectives[size_t(op.coll)].group, all_to_all_slices(program, op, pool, dims));
}

}  // namespace wallfacer::detail
