// Internal to the cost model: prices point-to-point transfers and collectives of one plan on its
// topology. Flows that run together (a schedule FlowSet, or every group of one kind running the
// same collective) divide each contended resource (a link direction) evenly; a flow gets the
// minimum over its hops of resource bandwidth / flows on it.
//
// Counting. Up to kExactFlows flows, every flow of the set is routed and counted. Larger sets
// count, for the flow being priced, the flows with an end on the same nodes as it: exact for
// every link inside those nodes and their NIC links (so exact on a single-switch fabric), but it
// misses flows between other nodes that meet it only on switch-to-switch links of a fat tree.
// This keeps a 16K-GPU plan to a few thousand routes. Results are cached per set and flow.
// Not thread-safe (the topology's route cache is not).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::detail {

constexpr size_t kExactFlows = 4096;

// Bandwidth (GB/s) a flow gets and the latency (µs) of its route.
struct FlowPrice {
  double bandwidth_GBps = 0;
  double latency_us = 0;
};

// Price of one group's flows under a collective pattern, every group of its kind running it.
struct GroupPrice {
  double bandwidth_GBps = std::numeric_limits<double>::infinity();  // slowest member-to-member flow
  double latency_us = 0;                                            // largest route latency among those flows
  // The flows that may take longest for some size: none other is both slower and later. A ring
  // step waits for the slowest of its flows, which need not be the one with the largest latency.
  std::vector<FlowPrice> frontier;
  void add(const FlowPrice& flow);
  // Seconds of the slowest flow carrying `bytes`.
  double slowest_seconds(double bytes) const;
};

// Counts flows per contended resource and turns counts into per-flow bandwidth.
class ContentionCounter {
 public:
  explicit ContentionCounter(const Topology& topology);
  void add(int src_gpu, int dst_gpu);
  // Takes back one add() of the same pair.
  void remove(int src_gpu, int dst_gpu);
  // Price of a flow between two GPUs given the flows added since the last clear().
  FlowPrice price(int src_gpu, int dst_gpu) const;
  // The same on a flow's resources looked up once (resources_of): a pattern counts, takes back
  // and prices each of its flows several times.
  double resources_of(int src_gpu, int dst_gpu, std::vector<ResourceId>& ids) const;  // appends; the latency
  void add(std::span<const ResourceId> ids);
  void remove(std::span<const ResourceId> ids);
  FlowPrice price(std::span<const ResourceId> ids, double latency_us) const;
  void clear();

 private:
  const Topology& topology_;
  std::vector<int32_t> count_;  // by resource id
  std::vector<int64_t> touched_;
};

// Tree all-reduce prices by the group's GPUs in tree position order and the buffer's size: the
// same for every plan whose group covers the same GPUs (a world group always does), so a search
// prices each once. Thread-safe.
class TreePriceCache {
 public:
  std::optional<double> find(const std::vector<int>& gpus, int64_t buffer_bytes) const;
  void store(const std::vector<int>& gpus, int64_t buffer_bytes, double seconds);

 private:
  static constexpr size_t kMaxEntries = 4096;  // data groups differ between plans; keep it bounded
  mutable std::mutex mutex_;
  std::map<std::pair<int64_t, std::vector<int>>, double> seconds_;
};

// Prices of flows that run together (every flow of a small flow set, every group of a kind under
// one collective pattern) by the GPUs those flows connect: a pricer's answers depend on nothing
// else, so every plan that puts them on the same GPUs (each pricer of one candidate, candidates
// with equal groups) gets them from here after the first. Keys are the GPU lists themselves (and
// for a pattern whether it runs on the groups' ring channels, which follow from their GPUs, and
// how many), so equal keys mean equal prices. Bounded; thread-safe.
class FlowPriceCache {
 public:
  using Prices = std::shared_ptr<const std::vector<FlowPrice>>;  // a flow set's, flow by flow
  Prices find(const std::vector<int32_t>& key) const;
  void store(std::vector<int32_t> key, Prices prices);
  using GroupPrices = std::shared_ptr<const std::vector<GroupPrice>>;  // a pattern's, group by group
  GroupPrices find_groups(const std::vector<int32_t>& key) const;
  void store_groups(std::vector<int32_t> key, GroupPrices prices);

 private:
  struct KeyHash {
    size_t operator()(const std::vector<int32_t>& key) const;
  };
  static constexpr size_t kMaxInts = size_t(1) << 24;  // keys and prices, about 64 MiB
  mutable std::mutex mutex_;
  std::unordered_map<std::vector<int32_t>, Prices, KeyHash> prices_;
  std::unordered_map<std::vector<int32_t>, GroupPrices, KeyHash> group_prices_;
  size_t ints_ = 0;  // of both maps
  void make_room(size_t ints);
};

class NetworkPricer {
 public:
  NetworkPricer(const Topology& topology, const Plan& plan, const std::vector<FlowSet>& flow_sets,
                TreePriceCache* tree_prices = nullptr, FlowPriceCache* flow_prices = nullptr);
  // Seconds a Send/Recv of `bytes` from src_rank to dst_rank takes inside flow set `flow_set`
  // (-1: a lone flow).
  double p2p_seconds(int flow_set, int src_rank, int dst_rank, int64_t bytes);
  FlowPrice p2p_price(int flow_set, int src_rank, int dst_rank);
  // Seconds a ring collective (all-gather, reduce-scatter, all-reduce) takes when this member sends
  // `bytes`, with every group of the same kind running it at once, on the group's channels
  // (ring_channels.hpp): each channel carries bytes / channels over its ring.
  double collective_seconds(OpKind kind, int group, int64_t bytes);
  // Seconds a tree all-reduce of a `buffer_bytes` gradient buffer over `group` takes (all_reduce.hpp): the
  // tree's transfers timed as the simulator runs them: pairwise in their rounds after the
  // pipeline's fill (the longest path's latency up and down), each sharing its links with the
  // others of its round. Flows of other groups are not counted: the weight-gradient all-reduce
  // runs after the attention traffic.
  double tree_all_reduce_seconds(int group, int64_t buffer_bytes);
  // Seconds an all-to-all op of `program` takes. Only member pairs whose slices intersect exchange
  // data (a shift is an all-to-all with one peer); every member is assumed to use the same peer
  // offsets in group order (true of shifts and full exchanges), and so is every group of the kind.
  double all_to_all_seconds(const RankProgram& program, const Op& op, const TokenSetPool& pool,
                            const ScheduleDims& dims);
  // The same in two parts: what the member sends to each peer offset (sorted by offset), which
  // does not depend on the GPUs, and its seconds on this plan's GPUs.
  std::vector<std::pair<int, int64_t>> all_to_all_slices(const RankProgram& program, const Op& op,
                                                         const TokenSetPool& pool, const ScheduleDims& dims);
  double all_to_all_seconds(int group, const std::vector<std::pair<int, int64_t>>& slices);

 private:
  // Flows of every group of one kind: where member k sends to member k + offset (mod size), for
  // each offset (all-to-all steps), or, for the ring algorithms, to its successor in each of the
  // group's ring channels.
  struct Pattern {
    GroupKind kind;
    std::vector<int> offsets;
    bool ring = false;
    size_t flows = 0;
    std::unordered_map<int, GroupPrice> prices;  // by group index
  };
  // A group's ring channels as successor and predecessor tables: next[c * size + k] is the member
  // after member k in channel c.
  struct RingLanes {
    int channels = 1;
    std::vector<int32_t> next, prev;
  };
  struct SetIndex {
    std::unordered_map<uint64_t, FlowPrice> prices;         // by (src rank, dst rank)
    std::unordered_map<int, std::vector<int32_t>> by_node;  // flows with an end on the node (large sets)
  };

  SetIndex& set_index(int flow_set);
  Pattern& pattern(GroupKind kind, const std::vector<int>& offsets, bool ring = false);
  void price_pattern(Pattern& pattern);
  const RingLanes& ring_lanes(int group);
  // Calls visit(l) for every member l that member k of `group` sends to (or receives from) in
  // the pattern.
  template <typename Visit>
  void for_each_successor(const Pattern& pattern, int group, int k, Visit&& visit);
  template <typename Visit>
  void for_each_predecessor(const Pattern& pattern, int group, int k, Visit&& visit);
  GroupPrice group_price(Pattern& pattern, int group);
  void flows_near(const Pattern& pattern, int group, std::vector<int32_t>& out);
  void index_kind(GroupKind kind);
  int member_index(int group, int rank);
  int gpu_of(int rank) const { return plan_.ranks[size_t(rank)].gpu; }
  int node_of(int rank) const { return plan_.ranks[size_t(rank)].node; }

  const Topology& topology_;
  const Plan& plan_;
  const std::vector<FlowSet>& flow_sets_;
  ContentionCounter counter_;
  // Bytes that cross one resource during a tree all-reduce, and when the first may start to.
  struct ResourceLoad {
    double first_s = std::numeric_limits<double>::infinity();
    double bytes = 0;
  };
  static void add_load(std::vector<ResourceLoad>& loads, std::span<const ResourceId> resources, double first_s,
                       double bytes);
  std::unordered_map<int, SetIndex> sets_;
  struct LastFlow {
    int flow_set = -2, src = -1, dst = -1;
    FlowPrice price;
  } last_;
  std::map<std::tuple<int, bool, std::vector<int>>, Pattern> patterns_;  // by (kind, ring, offsets)
  std::unordered_map<int, RingLanes> ring_lanes_;                        // by group
  std::unordered_map<uint64_t, int> member_index_;                       // (group, rank) -> position in the group
  std::vector<bool> group_indexed_;
  // Per group kind: node -> (group, member position) of the members placed on it.
  std::map<int, std::unordered_map<int, std::vector<std::pair<int, int>>>> members_by_node_;
  std::map<std::pair<int, int64_t>, double> tree_seconds_;  // by (group, buffer bytes)
  TreePriceCache* tree_prices_;                             // across pricers; may be null
  FlowPriceCache* flow_prices_;                             // across pricers; may be null
};

}  // namespace wallfacer::detail
