// Collectives in the simulator: the point-to-point expansion (ring steps, pairwise and direct
// all-to-all peers and their sizes) and the simulated times of each kind against the alpha-beta closed
// forms of docs/algorithms.md §10.1 on a contention-free star.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "collective_steps.hpp"
#include "simulator/sim_test_util.hpp"

namespace wallfacer {
namespace {

constexpr double kRel = 1e-9;

// Members own consecutive token chunks of `chunk` tokens and all `heads` heads (a Ulysses-like
// all-to-all instead sends each peer the peer's head slice of the own chunk).
CollectiveSpec uniform_spec(TokenSetPool& pool, OpKind kind, int members, int64_t chunk, int heads) {
  CollectiveSpec spec;
  spec.kind = kind;
  spec.group = 0;
  spec.fields = field_bit(Field::K);
  int32_t everything = pool.intern({{0, chunk * members}});
  for (int m = 0; m < members; ++m) {
    int32_t own = pool.intern({{m * chunk, (m + 1) * chunk}});
    HeadRange all{0, heads}, slice{m * heads / members, (m + 1) * heads / members};
    bool a2a = kind == OpKind::AllToAll;
    spec.in_tokens.push_back(own);
    spec.in_heads.push_back(all);
    spec.out_tokens.push_back(a2a ? everything : own);
    spec.out_heads.push_back(a2a ? slice : all);
  }
  return spec;
}

TEST(CollectiveSteps, RingAllGatherForwardsEachMembersBlockInTurn) {
  TokenSetPool pool;
  CollectiveSpec spec;
  spec.kind = OpKind::AllGather;
  spec.group = 0;
  // Unequal contributions: member m holds (m + 1) x 10 tokens.
  int64_t begin = 0;
  for (int m = 0; m < 4; ++m) {
    spec.in_tokens.push_back(pool.intern({{begin, begin + (m + 1) * 10}}));
    spec.in_heads.push_back({0, 8});
    begin += (m + 1) * 10;
  }
  std::vector<int> group = {7, 3, 5, 1};  // ranks in ring order
  // Member at position 1 (rank 3) sends blocks of positions 1, 0, 3 (20, 10, 40 tokens): 70.
  sim::CollectiveSteps steps = sim::expand_collective(spec, 700.0, group, 3, pool);
  EXPECT_EQ(steps.order, sim::StepOrder::Ring);
  ASSERT_EQ(steps.sends.size(), 3u);
  ASSERT_EQ(steps.recvs.size(), 3u);
  const double expected[] = {200, 100, 400};
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(steps.sends[k].peer, 5);
    EXPECT_EQ(steps.recvs[k].peer, 7);
    EXPECT_DOUBLE_EQ(steps.sends[k].bytes, expected[k]);
  }
}

TEST(CollectiveSteps, ReduceScatterEndsWithTheSuccessorsOwnBlock) {
  TokenSetPool pool;
  CollectiveSpec spec = uniform_spec(pool, OpKind::ReduceScatter, 3, 10, 4);
  spec.out_tokens[2] = pool.intern({{20, 50}});  // member 2's block is 3x larger
  sim::CollectiveSteps steps = sim::expand_collective(spec, 500.0, {0, 1, 2}, 0, pool);
  ASSERT_EQ(steps.sends.size(), 2u);
  // Position 0 sends the partial of block 2 (30 tokens) first, then block 1 (10 tokens).
  EXPECT_DOUBLE_EQ(steps.sends[0].bytes, 375);
  EXPECT_DOUBLE_EQ(steps.sends[1].bytes, 125);
}

TEST(CollectiveSteps, AllReduceTakesTwiceTheRingSteps) {
  TokenSetPool pool;
  CollectiveSpec spec;
  spec.kind = OpKind::AllReduce;
  spec.group = 0;
  spec.elements = 1000;
  sim::CollectiveSteps steps = sim::expand_collective(spec, 600.0, {0, 1, 2, 3}, 2, pool);
  ASSERT_EQ(steps.sends.size(), 6u);
  for (const auto& s : steps.sends)
    EXPECT_DOUBLE_EQ(s.bytes, 100);
}

TEST(CollectiveSteps, AllToAllSkipsPeersWithoutData) {
  TokenSetPool pool;
  // A shift: member m sends its block only to member m + 1 (its out block is member m - 1's).
  CollectiveSpec spec;
  spec.kind = OpKind::AllToAll;
  spec.group = 0;
  for (int m = 0; m < 4; ++m) {
    spec.in_tokens.push_back(pool.intern({{m * 10, m * 10 + 10}}));
    spec.out_tokens.push_back(pool.intern({{((m + 3) % 4) * 10, ((m + 3) % 4) * 10 + 10}}));
    spec.in_heads.push_back({0, 2});
    spec.out_heads.push_back({0, 2});
  }
  sim::CollectiveSteps steps = sim::expand_collective(spec, 80.0, {0, 1, 2, 3}, 1, pool);
  EXPECT_EQ(steps.order, sim::StepOrder::Pairwise);
  ASSERT_EQ(steps.sends.size(), 1u);
  ASSERT_EQ(steps.recvs.size(), 1u);
  EXPECT_EQ(steps.sends[0].peer, 2);
  EXPECT_EQ(steps.recvs[0].peer, 0);
  EXPECT_DOUBLE_EQ(steps.sends[0].bytes, 80);
}

TEST(CollectiveSteps, PairwiseAllToAllSendsToPlusIAndReceivesFromMinusI) {
  TokenSetPool pool;
  CollectiveSpec spec = uniform_spec(pool, OpKind::AllToAll, 4, 16, 8);
  sim::CollectiveSteps steps = sim::expand_collective(spec, 300.0, {10, 11, 12, 13}, 11, pool);
  ASSERT_EQ(steps.sends.size(), 3u);
  ASSERT_EQ(steps.recvs.size(), 3u);
  const int to[] = {12, 13, 10}, from[] = {10, 13, 12};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(steps.sends[i].peer, to[i]);
    EXPECT_EQ(steps.recvs[i].peer, from[i]);
    EXPECT_DOUBLE_EQ(steps.sends[i].bytes, 100);
  }
  sim::ExpandOptions options;
  options.all_to_all = sim::AllToAllAlgorithm::Direct;
  sim::CollectiveSteps direct = sim::expand_collective(spec, 300.0, {10, 11, 12, 13}, 11, pool, options);
  EXPECT_EQ(direct.order, sim::StepOrder::Direct);
  EXPECT_EQ(direct.sends.size(), 3u);
}

TEST(CollectiveSteps, NonMemberIsAScheduleError) {
  TokenSetPool pool;
  CollectiveSpec spec = uniform_spec(pool, OpKind::AllGather, 2, 10, 2);
  EXPECT_THROW(sim::expand_collective(spec, 10, {0, 1}, 5, pool), ScheduleError);
}

// One collective on every rank of a star of `members` GPUs.
struct OneCollective {
  Topology topology;
  Plan plan;
  Schedule schedule;
};
OneCollective one_collective(OpKind kind, int members, double member_bytes, int64_t chunk, int heads,
                             double bandwidth_GBps, double latency_us,
                             AllReduceAlgorithm algorithm = AllReduceAlgorithm::Ring) {
  Topology topology = Topology::parse(test::star_topology_yaml(members, bandwidth_GBps, latency_us), "star.yaml");
  std::vector<int> all(static_cast<size_t>(members));
  std::iota(all.begin(), all.end(), 0);
  Plan plan = test::placement_plan(topology, members, {{"world", GroupKind::World, all, algorithm}});
  Schedule schedule = test::empty_schedule(members);
  CollectiveSpec spec = uniform_spec(schedule.tokens, kind, members, chunk, heads);
  if (kind == OpKind::AllReduce) spec.elements = 1 << 20;
  spec.algorithm = algorithm;
  for (RankProgram& p : schedule.ranks) {
    p.collectives.push_back(spec);
    Op op;
    op.kind = kind;
    op.stream = Stream::Collective;
    op.coll = 0;
    op.bytes = int64_t(member_bytes);
    op.step = 0;
    p.add(op);
  }
  return {std::move(topology), std::move(plan), std::move(schedule)};
}

SimResult simulate_one_collective(OpKind kind, int members, double member_bytes, int64_t chunk, int heads,
                                  double bandwidth_GBps, double latency_us, const SimOptions& options = {}) {
  OneCollective c = one_collective(kind, members, member_bytes, chunk, heads, bandwidth_GBps, latency_us);
  return simulate_schedule(c.plan, c.topology, c.schedule, options);
}

TEST(SimulatorCollectives, RingCollectivesMatchTheAlphaBetaClosedForm) {
  const int p = 4;
  const double bw = 50, lat_us = 1.5, block = 8 << 20;  // bytes of one member's block
  const double alpha = 2 * lat_us * 1e-6, beta = bw * 1e9;
  // All-gather and reduce-scatter: (p - 1)(alpha + M / (p beta)) with M = p x block.
  for (OpKind kind : {OpKind::AllGather, OpKind::ReduceScatter}) {
    SimResult r = simulate_one_collective(kind, p, (p - 1) * block, 1024, 8, bw, lat_us);
    EXPECT_NEAR(r.step_ms, (p - 1) * (alpha + block / beta) * 1e3, r.step_ms * kRel) << to_string(kind);
  }
  // All-reduce: 2(p - 1)(alpha + M / (p beta)); each member sends 2(p - 1) blocks.
  SimResult ar = simulate_one_collective(OpKind::AllReduce, p, 2 * (p - 1) * block, 1024, 8, bw, lat_us);
  EXPECT_NEAR(ar.step_ms, 2 * (p - 1) * (alpha + block / beta) * 1e3, ar.step_ms * kRel);
  EXPECT_EQ(ar.activities, int64_t(p) * 2 * (p - 1));
  EXPECT_EQ(ar.transfers, ar.activities);
}

TEST(SimulatorCollectives, TreeAllReduceMatchesItsClosedFormAndTheCostModel) {
  // One node (a star without NICs, so one channel): each tree is a chain of the p GPUs. Every
  // round's transfers use distinct links, so each takes alpha + (M/2) / beta; the member with the
  // most transfers (Delta) has one in every round, after the pipeline's fill of 2 (p - 1) alpha
  // less its first transfer's own latency.
  const double bw = 50, lat_us = 1.5, alpha = 2 * lat_us * 1e-6, half = double(1 << 20) * 4 / 2;
  for (int p : {8, 13}) {
    OneCollective c = one_collective(OpKind::AllReduce, p, 2.0 * (p - 1) / p * 4 * (1 << 20), 1024, 8, bw, lat_us,
                                     AllReduceAlgorithm::Tree);
    const SimResult r = simulate_schedule(c.plan, c.topology, c.schedule, {});
    int busiest = 0;
    std::vector<int> sends(size_t(p), 0), recvs(size_t(p), 0);
    for (const TreeTransfer& t : tree_transfers(tree_layout(c.plan, 0, c.topology)))
      busiest = std::max({busiest, ++sends[size_t(t.from)], ++recvs[size_t(t.to)]});
    EXPECT_EQ(busiest, 4);  // inner in both chains: one send up and one down in each
    const double expected = (2 * (p - 1) - 1) * alpha + busiest * (alpha + half / (bw * 1e9));
    EXPECT_NEAR(r.step_ms, expected * 1e3, expected * 1e3 * kRel) << p << " members";
    EXPECT_EQ(r.transfers, 4 * (p - 1));       // both trees, up and down
    EXPECT_EQ(r.activities, r.transfers + p);  // and each member's fill delay
    const CostModel model(c.topology, Calibration::defaults());
    EXPECT_NEAR(model.evaluate_times(c.plan, c.schedule).step_ms, r.step_ms, r.step_ms * kRel) << p << " members";
  }
}

TEST(SimulatorCollectives, MergedRingStepsKeepTheUncontendedTime) {
  const int p = 4;
  const double bw = 50, lat_us = 1.5, block = 8 << 20;
  const double expected = 2 * (p - 1) * (2 * lat_us * 1e-6 + block / (bw * 1e9)) * 1e3;
  // 6 all-reduce steps as 2 merged steps of 3, and as 4 merged steps of 1, 2, 1, 2.
  for (int merged : {2, 4}) {
    SimOptions options;
    options.max_ring_steps = merged;
    SimResult r = simulate_one_collective(OpKind::AllReduce, p, 2 * (p - 1) * block, 1024, 8, bw, lat_us, options);
    EXPECT_NEAR(r.step_ms, expected, expected * kRel) << merged << " merged steps";
    // Each rank sends `merged` transfers; the two that stand for more than one step wait on a
    // latency timer first (3 + 3, or 1 + 2 + 1 + 2).
    EXPECT_EQ(r.activities, int64_t(p) * (merged + 2));
    EXPECT_EQ(r.transfers, int64_t(p) * merged);
  }
}

TEST(CollectiveSteps, MergingKeepsEveryByteAndStep) {
  TokenSetPool pool;
  CollectiveSpec spec;
  spec.kind = OpKind::AllReduce;
  spec.group = 0;
  std::vector<int> group(10);
  for (int i = 0; i < 10; ++i)
    group[size_t(i)] = i;
  sim::ExpandOptions options;
  options.max_ring_steps = 4;
  sim::CollectiveSteps steps = sim::expand_collective(spec, 1800.0, group, 3, pool, options);
  ASSERT_EQ(steps.sends.size(), 4u);  // 18 steps as 4, 5, 4, 5
  const int merged[] = {4, 5, 4, 5};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(steps.sends[i].merged, merged[i]);
    EXPECT_EQ(steps.recvs[i].merged, merged[i]);
    EXPECT_DOUBLE_EQ(steps.sends[i].bytes, 100.0 * merged[i]);
  }
}

TEST(SimulatorCollectives, PairwiseAllToAllMatchesTheAlphaBetaClosedForm) {
  const int p = 4;
  const double bw = 50, lat_us = 1.5, piece = 4 << 20;  // bytes to each peer
  // p - 1 exchange steps, each a permutation (no link carries two pieces): (p - 1)·alpha +
  // (p - 1)/p·M/beta with M = p x piece.
  SimResult r = simulate_one_collective(OpKind::AllToAll, p, (p - 1) * piece, 1024, 8, bw, lat_us);
  EXPECT_NEAR(r.step_ms, (p - 1) * (2 * lat_us * 1e-6 + piece / (bw * 1e9)) * 1e3, r.step_ms * kRel);
  EXPECT_EQ(r.activities, int64_t(p) * (p - 1));
}

TEST(SimulatorCollectives, DirectAllToAllSharesEachGpusLinkAmongItsPeers) {
  const double bw = 50, lat_us = 1.5, piece = 4 << 20;
  // All p - 1 pieces leave at once through the GPU's one uplink (and arrive through each
  // downlink p - 1 at a time): alpha + (p - 1) x piece / beta. With 12 members a rank has 11
  // receives in flight, more than its activity set keeps buffers for inline.
  for (int p : {4, 12}) {
    SimOptions options;
    options.all_to_all = "direct";
    SimResult r = simulate_one_collective(OpKind::AllToAll, p, (p - 1) * piece, 1024, 2 * p, bw, lat_us, options);
    EXPECT_NEAR(r.step_ms, (2 * lat_us * 1e-6 + (p - 1) * piece / (bw * 1e9)) * 1e3, r.step_ms * kRel) << p;
    EXPECT_EQ(r.activities, int64_t(p) * (p - 1)) << p;
  }
}

}  // namespace
}  // namespace wallfacer
