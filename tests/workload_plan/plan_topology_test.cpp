// Plans against topologies: a plan only runs on the topology it was made for, and its ranks must
// sit on GPUs and NICs that topology has.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/topology/topology.hpp>
#include "sample_plan.hpp"
#include "test_util.hpp"

namespace wallfacer {
namespace {

using testing::input_error_of;

// Two nodes of four GPUs behind two PCIe switches with one NIC each, on one network switch.
std::string two_node_yaml(const std::string& name = "two-node") {
  return "name: " + name + R"(
description: a small cluster for plan tests
gpu: {model: TEST-GPU, peak_bf16_tflops: 100, peak_fp16_tflops: 100, memory_GiB: 16, hbm_GBps: 1000}
nodes: 2
node:
  gpus: 4
  cpus:
    count: 1
    link: {bandwidth_GBps: 10, latency_us: 0.5}
  gpu_fabric: {type: nvswitch, bandwidth_GBps: 100, latency_us: 0.3}
  pcie:
    bandwidth_GBps: 32
    latency_us: 0.5
    switches:
      - {cpu: 0, gpus: [0, 1], nics: [0]}
      - {cpu: 0, gpus: [2, 3], nics: [1]}
  nics: {count: 2, rate_Gbps: 200}
network:
  type: single_switch
  link_latency_us: 0.35
)";
}

// The sample plan, made for `topology`: its name, hash and node count, rank r on GPU r with the
// topology's node, local index and NIC.
Plan plan_for(const Topology& topology) {
  Plan plan = testing::sample_plan(topology.num_nodes(), topology.name(), topology.content_hash());
  for (RankSlot& slot : plan.ranks) {
    slot.node = topology.node_of_gpu(slot.gpu);
    slot.local_gpu = topology.local_gpu(slot.gpu);
    const int nic = topology.nic_of_gpu(slot.gpu);
    slot.nic = nic < 0 ? "" : topology.devices()[nic].name;
  }
  return plan;
}

TEST(PlanTopology, MatchingTopologyPasses) {
  const Topology topology = Topology::parse(two_node_yaml(), "t.yaml");
  ASSERT_EQ(topology.num_gpus(), 8);
  const Plan plan = plan_for(topology);
  EXPECT_NO_THROW(check_plan_against_topology(plan, topology, "plan.yaml"));
  // Through the file as well: what the checker sees after a round trip is the same.
  EXPECT_NO_THROW(check_plan_against_topology(parse_plan(plan_to_yaml(plan), "plan.yaml"), topology, "plan.yaml"));
}

TEST(PlanTopology, OtherNodeCountIsRefused) {
  const Topology two = Topology::parse(two_node_yaml(), "t.yaml");
  const Topology one = Topology::parse(two_node_yaml(), "t.yaml", 1);
  ASSERT_NE(two.content_hash(), one.content_hash());
  EXPECT_EQ(input_error_of([&] { check_plan_against_topology(plan_for(two), one, "plan.yaml"); }),
            fmt::format("plan.yaml: error: plan was made for topology 'two-node' with hash {} (2 nodes), but the "
                        "given topology has hash {} (1 node)",
                        two.content_hash(), one.content_hash()));
}

TEST(PlanTopology, OtherTopologyIsRefused) {
  const Topology mine = Topology::parse(two_node_yaml(), "t.yaml");
  const Topology other = Topology::parse(two_node_yaml("other-cluster"), "o.yaml");
  EXPECT_EQ(input_error_of([&] { check_plan_against_topology(plan_for(mine), other, "plan.yaml"); }),
            fmt::format("plan.yaml: error: plan was made for topology 'two-node' with hash {} (2 nodes), but the "
                        "given topology is 'other-cluster' with hash {} (2 nodes)",
                        mine.content_hash(), other.content_hash()));
}

TEST(PlanTopology, ChangedHashIsRefused) {
  const Topology topology = Topology::parse(two_node_yaml(), "t.yaml");
  Plan plan = plan_for(topology);
  plan.topology_hash = "0000000000000000";
  EXPECT_EQ(input_error_of([&] { check_plan_against_topology(plan, topology, "plan.yaml"); }),
            fmt::format("plan.yaml: error: plan was made for topology 'two-node' with hash 0000000000000000 (2 "
                        "nodes), but the given topology has hash {} (2 nodes)",
                        topology.content_hash()));
}

TEST(PlanTopology, RanksMustFitTheTopology) {
  const Topology topology = Topology::parse(two_node_yaml(), "t.yaml");
  Plan missing_gpu = plan_for(topology);
  missing_gpu.ranks[7].gpu = 99;
  EXPECT_EQ(input_error_of([&] { check_plan_against_topology(missing_gpu, topology, "plan.yaml"); }),
            "plan.yaml: error: rank 7 uses gpu 99, but topology 'two-node' has 8 GPUs");

  Plan wrong_node = plan_for(topology);
  wrong_node.ranks[5].node = 0;
  EXPECT_EQ(input_error_of([&] { check_plan_against_topology(wrong_node, topology, "plan.yaml"); }),
            "plan.yaml: error: rank 5: gpu 5 is local gpu 1 of node 1 in topology 'two-node', but the plan says "
            "local gpu 1 of node 0");

  Plan wrong_nic = plan_for(topology);
  const std::string far_nic = wrong_nic.ranks[4].nic;  // a NIC of node 1
  ASSERT_FALSE(far_nic.empty());
  wrong_nic.ranks[0].nic = far_nic;
  EXPECT_EQ(input_error_of([&] { check_plan_against_topology(wrong_nic, topology, "plan.yaml"); }),
            fmt::format("plan.yaml: error: rank 0: '{}' is not a NIC of node 0 in topology 'two-node'", far_nic));

  Plan gpu_as_nic = plan_for(topology);
  gpu_as_nic.ranks[1].nic = topology.devices()[topology.gpu_device(1)].name;
  EXPECT_NE(input_error_of([&] { check_plan_against_topology(gpu_as_nic, topology, "plan.yaml"); }), "<no error>");
}

}  // namespace
}  // namespace wallfacer
