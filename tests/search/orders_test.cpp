// Node-local GPU orders: which GPUs are interchangeable, and how many distinct orders remain.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <wallfacer/topology/topology.hpp>
#include "orders.hpp"

namespace wallfacer {
namespace {

// Number of distinct classes in a twin-class vector.
size_t classes(const std::vector<int>& twin) {
  return std::set<int>(twin.begin(), twin.end()).size();
}

TEST(NodeOrders, NvSwitchGpusAreAllInterchangeable) {
  const Topology t = Topology::load("dgx-h100", 2);
  const detail::NodeOrders orders(t, t.num_gpus());
  EXPECT_EQ(classes(orders.twin_class()), 1u);
  EXPECT_EQ(orders.count_distinct(100), 1u);
  EXPECT_EQ(orders.all_distinct(100).size(), 1u);
}

TEST(NodeOrders, PcieSwitchPairsAreTwins) {
  // pcie-8gpu: four switches with two GPUs each; only GPUs under one switch are interchangeable.
  const Topology t = Topology::load("pcie-8gpu");
  const detail::NodeOrders orders(t, 8);
  const auto& twin = orders.twin_class();
  EXPECT_EQ(classes(twin), 4u);
  for (int g = 0; g < 8; g += 2)
    EXPECT_EQ(twin[size_t(g)], twin[size_t(g + 1)]);
  // 8! / (2!)^4 orders that differ by more than twin swaps; of those, the ones that exchanging
  // whole switches (a symmetry) maps onto each other count once, the identity first.
  EXPECT_EQ(orders.count_distinct(5040), 2520u);
  const auto all = orders.all_distinct(5040);
  EXPECT_EQ(all.size(), 2520u * 16 / orders.symmetries().size());
  EXPECT_EQ(all.front(), orders.identity());
  std::set<std::vector<int>> unique(all.begin(), all.end());
  EXPECT_EQ(unique.size(), all.size());
  for (const auto& o : all)
    EXPECT_TRUE(std::is_permutation(o.begin(), o.end(), orders.identity().begin()));
}

TEST(NodeOrders, TooManyOrdersGiveNone) {
  const Topology t = Topology::load("pcie-8gpu");
  const detail::NodeOrders orders(t, 8);
  EXPECT_TRUE(orders.all_distinct(100).empty());
  EXPECT_EQ(orders.count_distinct(100), 101u);
}

TEST(NodeOrders, BestRingOrderKeepsSwitchPartnersAdjacent) {
  const Topology t = Topology::load("pcie-8gpu");
  const detail::NodeOrders orders(t, 8);
  const auto best = orders.best_ring_order(50000);
  // Consecutive positions 2k, 2k+1 sit under one PCIe switch (pairs {0,1}, {2,3}, ...).
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(best[size_t(2 * k)] / 2, best[size_t(2 * k + 1)] / 2) << k;
}

TEST(NodeOrders, GpuOrderAppliesTheLocalOrderToEveryNode) {
  const Topology t = Topology::load("pcie-8gpu", 2);
  const detail::NodeOrders orders(t, 16);
  const std::vector<int> local{1, 0, 3, 2, 5, 4, 7, 6};
  const auto gpus = orders.gpu_order(local);
  ASSERT_EQ(gpus.size(), 16u);
  for (int r = 0; r < 16; ++r)
    EXPECT_EQ(gpus[size_t(r)], (r / 8) * 8 + local[size_t(r % 8)]);
}

}  // namespace
}  // namespace wallfacer
