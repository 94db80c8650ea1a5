// Internal to the topology scheduler: node-local GPU orders. An order lists a node's local GPUs
// in the sequence consecutive ranks use them; the same order applies to every node. Orders that
// differ by swapping interchangeable GPUs ("twins": a swap that maps every route onto an equal
// route, with the same link sharing) price the same, so only one per class is enumerated; so do
// orders that a symmetry of the whole cluster (a permutation of every node's GPUs that maps every
// route onto an equal one, each resource on the way one-to-one: exchanging two PCIe switches with
// their GPUs and NICs, or two sockets) maps onto each other.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/search/search.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::detail {

struct ResourceMap;

class NodeOrders {
 public:
  // `ranks` GPUs are used, filling nodes in order.
  NodeOrders(const Topology& topology, int ranks);

  // False when orders do not apply (nodes of different sizes): identity only.
  bool applicable() const { return applicable_; }
  int gpus_per_node() const { return gpus_per_node_; }
  // Twin class of each local GPU (GPUs of one class are interchangeable).
  const std::vector<int>& twin_class() const { return class_; }
  // Distinct orders (one per class of equivalent orders), identity first; empty when more than
  // `limit` exist. Of equivalent orders, the first in the walk over twin classes stands for them.
  std::vector<std::vector<int>> all_distinct(size_t limit) const;
  // Number of orders that differ by more than twin swaps, saturating at `limit`.
  size_t count_distinct(size_t limit) const;
  // The order whose rings over the used GPUs (the ring channels a collective over them runs on,
  // ring_channels.hpp) have the best contended bandwidth (then the fastest pairwise all-to-all over
  // those GPUs, then the best ring sum), among the distinct orders when at most `limit` exist,
  // else built greedily. Scored on up to `threads` threads; the order found is the same on any.
  std::vector<int> best_ring_order(size_t limit, int threads = 1) const;
  // best_ring_order without remembering the order found (best_ring_order remembers one per
  // topology content, GPUs used per node and nodes scored, which is all it depends on).
  std::vector<int> score_ring_orders(size_t limit, int threads = 1) const;
  // The global GPU of each rank under a node-local order.
  std::vector<int> gpu_order(const std::vector<int>& local_order) const;
  std::vector<int> identity() const;
  // Moves the ranks of `plan` onto the GPUs of `local_order`, given `identity_positions`: the GPU
  // of each rank under the identity order. What make_plan gives for that order: groups and
  // all-reduce algorithms depend on ranks and nodes alone, which node-local orders keep.
  void place(Plan& plan, const std::vector<int>& identity_positions, const std::vector<int>& local_order) const;
  // The permutations of a node's local GPUs that are symmetries of the cluster, identity first
  // (identity only on clusters of more than kMaxSymmetryNodes nodes). Looked for on first use:
  // where the orders are too many to list they are not needed, and on nodes of many GPUs with
  // many symmetries (16 GPUs under 8 PCIe switches) looking for them takes seconds.
  const std::vector<std::vector<int>>& symmetries() const;
  // What equivalent orders have in common: the smallest twin-class sequence of the used
  // positions over every symmetry's image of `order`.
  std::vector<int> canonical(const std::vector<int>& order) const;
  static constexpr int kMaxSymmetryNodes = 8;
  static constexpr size_t kMaxSymmetryChecks = 2048;                // complete permutations checked
  static constexpr size_t kMaxSymmetrySteps = 100000;               // partial ones
  static constexpr size_t kMaxSymmetries = kMaxSymmetryChecks + 2;  // kept: identity, one a check

 private:
  bool swap_is_symmetry(int a, int b) const;
  bool extends_to_symmetry(const std::vector<int>& sigma, int k, ResourceMap& map) const;
  bool is_symmetry(const std::vector<int>& sigma) const;
  std::vector<std::vector<int>> find_symmetries() const;
  std::vector<int> class_sequence(const std::vector<int>& order) const;
  std::vector<int> materialize(const std::vector<int>& class_sequence) const;
  // Contended bandwidth of the ring channels over the first one or two nodes: (the slowest edge
  // times the channels, the sum over every edge).
  std::pair<double, double> ring_score(const std::vector<int>& local_order) const;
  // Seconds per byte of a pairwise all-to-all over the first one or two nodes.
  double all_to_all_score(const std::vector<int>& local_order) const;
  // The used GPUs of the first one or two nodes in rank order.
  std::vector<int> first_nodes(const std::vector<int>& local_order) const;

  const Topology& topology_;
  int ranks_ = 0;
  bool applicable_ = false;
  int gpus_per_node_ = 0;
  int used_per_node_ = 0;  // positions of a node that ranks use: min(ranks, gpus per node)
  std::vector<int> class_;
  std::vector<int> class_size_;
  struct Symmetries {
    std::once_flag found;
    std::vector<std::vector<int>> list;
  };
  std::shared_ptr<Symmetries> symmetries_ = std::make_shared<Symmetries>();  // shared by copies
};

// The node-local orders a search prices its candidates under: exhaustive, every distinct order
// (up to options.max_orders, else as the heuristic with a warning); heuristic, every distinct order
// when there are at most kFewOrders, else the identity and best_ring_order (up to kScoredOrders
// scored).
constexpr size_t kFewOrders = 24;
constexpr size_t kScoredOrders = 50000;
std::vector<std::vector<int>> choose_orders(const NodeOrders& orders, SearchMode mode, const SearchOptions& options);

}  // namespace wallfacer::detail
