// Routing at the scale the planner searches: 2,048 DGX H100 nodes (16,384 GPUs) on the
// rail-optimised fabric. Prints the route throughput (no time assertion) and checks every route
// against the closed form: 50 GB/s NIC-bound, 2.7 us on a shared leaf, 3.3 us through a spine.
// Routes asked for from several threads at once (as the search's pricing threads do) equal those
// of a topology routed on one thread.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>
#include <unordered_set>
#include <vector>

#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(Scale, HundredThousandInterNodeRoutesOn2048Nodes) {
  const auto load_start = Clock::now();
  const Topology topo = Topology::load("dgx-h100", 2048);
  const double load_s = seconds_since(load_start);
  ASSERT_EQ(topo.num_gpus(), 16384);

  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<int> pick(0, topo.num_gpus() - 1);
  std::unordered_set<uint64_t> seen;
  std::vector<std::pair<int, int>> pairs;
  while (pairs.size() < 100000) {
    const int a = pick(rng), b = pick(rng);
    if (a / 8 == b / 8 || !seen.insert(static_cast<uint64_t>(a) << 32 | static_cast<uint64_t>(b)).second) continue;
    pairs.emplace_back(a, b);
  }

  std::vector<const Route*> routes;
  routes.reserve(pairs.size());
  const auto route_start = Clock::now();
  const std::clock_t route_cpu_start = std::clock();
  for (const auto& [a, b] : pairs)
    routes.push_back(&topo.route(a, b));
  const double route_s = seconds_since(route_start);
  const double route_cpu_s = static_cast<double>(std::clock() - route_cpu_start) / CLOCKS_PER_SEC;

  const auto cached_start = Clock::now();
  size_t hops = 0;
  for (const auto& [a, b] : pairs)
    hops += topo.route(a, b).hops.size();
  const double cached_s = seconds_since(cached_start);

  // CPU time next to wall time: on a loaded machine the wall clock mostly measures waiting.
  std::printf(
      "[ scale ] dgx-h100 x 2048 nodes: load %.3f s; %zu distinct inter-node routes in %.3f s wall, %.3f s CPU "
      "(%.2f us each); cached lookups %.3f s\n",
      load_s, pairs.size(), route_s, route_cpu_s, 1e6 * route_cpu_s / static_cast<double>(pairs.size()), cached_s);

  EXPECT_GT(hops, 0u);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [a, b] = pairs[i];
    const Route& r = *routes[i];
    // NIC k sits on rail k; 32 nodes share a leaf of each rail.
    const bool same_leaf = a % 8 == b % 8 && a / 8 / 32 == b / 8 / 32;
    ASSERT_DOUBLE_EQ(r.bottleneck_GBps, 50.0) << a << "->" << b;
    ASSERT_NEAR(r.latency_us, same_leaf ? 2.7 : 3.3, 1e-9) << a << "->" << b;
    ASSERT_EQ(r.hops.size(), same_leaf ? 6u : 8u) << a << "->" << b;
  }
}

TEST(Scale, RoutesAskedFromSeveralThreadsAtOnceEqualOneThreads) {
  // 64 nodes, 512 GPUs: 262,144 GPU pairs; each thread asks for 20,000 random ones, most
  // of them new, so that fills of the cache overlap lookups and fills on the other threads.
  constexpr int kThreads = 4, kPairsPerThread = 20000;
  const Topology shared = Topology::load("dgx-h100", 64);
  const Topology alone = Topology::load("dgx-h100", 64);
  std::vector<std::vector<std::pair<int, int>>> pairs(kThreads);
  std::vector<std::vector<const Route*>> routes(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937_64 rng(1000 + t);
    std::uniform_int_distribution<int> pick(0, shared.num_gpus() - 1);
    for (int i = 0; i < kPairsPerThread; ++i)
      pairs[t].emplace_back(pick(rng), pick(rng));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (const auto& [a, b] : pairs[size_t(t)])
        routes[size_t(t)].push_back(&shared.route(a, b));
    });
  for (std::thread& thread : threads)
    thread.join();
  size_t checked = 0;
  for (int t = 0; t < kThreads; ++t)
    for (size_t i = 0; i < pairs[size_t(t)].size(); ++i) {
      const auto [a, b] = pairs[size_t(t)][i];
      const Route& got = *routes[size_t(t)][i];
      const Route& want = alone.route(a, b);
      ASSERT_EQ(got.src_gpu, a);
      ASSERT_EQ(got.dst_gpu, b);
      ASSERT_EQ(got.devices, want.devices) << a << "->" << b;
      ASSERT_EQ(got.hops, want.hops) << a << "->" << b;
      ASSERT_EQ(got.latency_us, want.latency_us) << a << "->" << b;
      ASSERT_EQ(&got, &shared.route(a, b)) << "a route moved after another thread filled the cache";
      ++checked;
    }
  EXPECT_EQ(checked, size_t(kThreads * kPairsPerThread));
}

TEST(Scale, BisectionOf2048Nodes) {
  const Topology topo = Topology::load("dgx-h100", 2048);
  const auto start = Clock::now();
  const double bisection = topo.bisection_bandwidth_GBps();
  std::printf("[ scale ] dgx-h100 x 2048 nodes: bisection %.0f GB/s in %.3f s\n", bisection, seconds_since(start));
  // Non-blocking: half the nodes' NICs, 1024 x 8 x 50 GB/s.
  EXPECT_DOUBLE_EQ(bisection, 1024 * 8 * 50.0);
}

}  // namespace
}  // namespace wallfacer
