// Every preset loads, has the shape its hardware description says (counted by hand from the
// vendor descriptions in docs/hardware.md §3, not from the loader), cites a source for every
// number, and keeps the graph invariants routing relies on. Also: --nodes scaling and the content
// hash.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/topology/topology.hpp>
#include "topology_test_util.hpp"

namespace wallfacer {
namespace {

struct PresetShape {
  std::string name;
  int nodes, gpus_per_node, cpus, pcie_switches, nvswitches, nics, net_switches;
  std::string fabric;
};

// Per node: GPUs, CPU sockets, PCIe switches, NVSwitch vertex, NICs. Network switches in total:
// leaves = ceil(nodes / nodes_per_leaf) (per rail when rail-optimised), spines = leaf down ports
// / oversubscription when there is more than one leaf.
const PresetShape kShapes[] = {
    {"dgx-h100", 8, 8, 2, 8, 1, 8, 8 + 32, "rail_optimized"},  // 8 rails x 1 leaf, 32 down ports
    {"dgx-a100", 4, 8, 2, 4, 1, 8, 2 + 16, "fat_tree"},        // 2 nodes x 8 NICs per leaf
    {"dgx-a100-40g", 4, 8, 2, 4, 1, 8, 2 + 16, "fat_tree"},
    {"hgx-h200", 4, 8, 2, 8, 1, 8, 2 + 16, "fat_tree"},
    {"meta-grand-teton-h100-roce", 2, 8, 2, 8, 1, 8, 1, "fat_tree"},  // one 384-node pod: one leaf
    {"grand-teton-h100-96g", 2, 8, 2, 8, 1, 8, 1, "fat_tree"},
    {"a2-highgpu-8g", 2, 8, 1, 4, 1, 1, 1, "single_switch"},
    {"a2-megagpu-16g", 2, 16, 1, 8, 1, 1, 1, "single_switch"},
    {"summit", 4, 6, 2, 0, 0, 2, 1, "fat_tree"},  // 9 nodes per leaf: one leaf
    {"pcie-8gpu", 1, 8, 2, 4, 0, 2, 1, "single_switch"},
    {"dgx-1v", 4, 8, 2, 4, 0, 4, 2 + 8, "fat_tree"},
};

// Test names and failure messages show the preset's name.
void PrintTo(const PresetShape& shape, std::ostream* out) {
  *out << shape.name;
}

std::string preset_path(const std::string& name) {
  return std::string(WALLFACER_SOURCE_DIR) + "/topologies/" + name + ".yaml";
}

class PresetTest : public ::testing::TestWithParam<PresetShape> {};

TEST_P(PresetTest, HasTheDescribedShape) {
  const PresetShape& shape = GetParam();
  const Topology topo = Topology::load(shape.name);
  EXPECT_EQ(topo.name(), shape.name);
  EXPECT_EQ(topo.num_nodes(), shape.nodes);
  EXPECT_EQ(topo.gpus_per_node(), shape.gpus_per_node);
  EXPECT_EQ(topo.num_gpus(), shape.nodes * shape.gpus_per_node);
  EXPECT_EQ(topo.fabric().type, shape.fabric);
  std::vector<std::map<DeviceKind, int>> per_node(shape.nodes);
  int net_switches = 0;
  for (const Device& d : topo.devices()) {
    if (d.node < 0) {
      EXPECT_EQ(d.kind, DeviceKind::NetSwitch) << d.name;
      ++net_switches;
    } else {
      ASSERT_LT(d.node, shape.nodes);
      ++per_node[d.node][d.kind];
    }
  }
  EXPECT_EQ(net_switches, shape.net_switches);
  for (int n = 0; n < shape.nodes; ++n) {
    EXPECT_EQ(per_node[n][DeviceKind::Gpu], shape.gpus_per_node) << "node " << n;
    EXPECT_EQ(per_node[n][DeviceKind::Cpu], shape.cpus) << "node " << n;
    EXPECT_EQ(per_node[n][DeviceKind::PcieSwitch], shape.pcie_switches) << "node " << n;
    EXPECT_EQ(per_node[n][DeviceKind::NvSwitch], shape.nvswitches) << "node " << n;
    EXPECT_EQ(per_node[n][DeviceKind::Nic], shape.nics) << "node " << n;
  }
  // The file on disk and the embedded copy are the same topology.
  const std::string path = preset_path(shape.name);
  EXPECT_EQ(Topology::load(path).content_hash(), topo.content_hash());
}

TEST_P(PresetTest, GpusAreNumberedNodeMajorAndNamed) {
  const Topology topo = Topology::load(GetParam().name);
  for (int g = 0; g < topo.num_gpus(); ++g) {
    const int node = g / topo.gpus_per_node(), local = g % topo.gpus_per_node();
    EXPECT_EQ(topo.node_of_gpu(g), node);
    EXPECT_EQ(topo.local_gpu(g), local);
    const Device& d = topo.devices()[topo.gpu_device(g)];
    EXPECT_EQ(d.kind, DeviceKind::Gpu);
    EXPECT_EQ(d.name, "n" + std::to_string(node) + "/gpu" + std::to_string(local));
    EXPECT_EQ(topo.device_id(d.name), topo.gpu_device(g));
  }
  EXPECT_EQ(topo.device_id("no-such-device"), -1);
}

TEST_P(PresetTest, EveryPairHasAWellFormedRoute) {
  const Topology topo = Topology::load(GetParam().name);
  for (int a = 0; a < topo.num_gpus(); ++a) {
    for (int b = 0; b < topo.num_gpus(); ++b) {
      const Route& r = topo.route(a, b);
      testing::expect_well_formed(topo, r);
      if (a == b) {
        EXPECT_TRUE(std::isinf(r.bottleneck_GBps));
        EXPECT_EQ(r.latency_us, 0);
        continue;
      }
      EXPECT_GT(r.bottleneck_GBps, 0);
      EXPECT_GT(r.latency_us, 0);
      // Routes never relay through a GPU.
      for (size_t i = 1; i + 1 < r.devices.size(); ++i)
        EXPECT_NE(topo.devices()[r.devices[i]].kind, DeviceKind::Gpu);
    }
  }
}

TEST_P(PresetTest, EveryGpuHasANicOnItsOwnNode) {
  const Topology topo = Topology::load(GetParam().name);
  for (int g = 0; g < topo.num_gpus(); ++g) {
    const int nic = topo.nic_of_gpu(g);
    ASSERT_GE(nic, 0);
    EXPECT_EQ(topo.devices()[nic].kind, DeviceKind::Nic);
    EXPECT_EQ(topo.devices()[nic].node, topo.node_of_gpu(g));
  }
}

// Every mapping holding a number with a unit carries a `source`, and every source names keys of
// the top-level `sources` list.
void check_sources(const YAML::Node& node, const std::set<std::string>& keys, const std::string& path) {
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i)
      check_sources(node[i], keys, path + "[" + std::to_string(i) + "]");
    return;
  }
  if (!node.IsMap()) return;
  bool has_number = false;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    for (const char* unit : {"_GBps", "_Gbps", "_us", "_tflops", "_GiB"})
      has_number = has_number || key.find(unit) != std::string::npos;
    if (key != "sources") check_sources(kv.second, keys, path + "." + key);
  }
  if (!has_number) return;
  ASSERT_TRUE(node["source"].IsDefined()) << path << " has numbers without a source";
  std::stringstream tokens(node["source"].Scalar());
  for (std::string token; std::getline(tokens, token, ',');) {
    token.erase(0, token.find_first_not_of(' '));
    token.erase(token.find_last_not_of(' ') + 1);
    EXPECT_TRUE(keys.count(token)) << path << ": source '" << token << "' is not in 'sources'";
  }
}

TEST_P(PresetTest, EveryNumberCitesASource) {
  std::ifstream in(preset_path(GetParam().name));
  std::stringstream text;
  text << in.rdbuf();
  const YAML::Node root = YAML::Load(text.str());
  std::set<std::string> keys;
  for (const auto& kv : root["sources"])
    keys.insert(kv.first.Scalar());
  EXPECT_FALSE(keys.empty());
  check_sources(root, keys, GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Presets, PresetTest, ::testing::ValuesIn(kShapes), [](const auto& info) {
  std::string name = info.param.name;
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
});

TEST(Presets, ListHoldsEveryShippedFileAndTheExplicitExample) {
  std::set<std::string> names;
  for (const std::string& name : Topology::preset_names())
    names.insert(name);
  for (const PresetShape& shape : kShapes)
    EXPECT_TRUE(names.count(shape.name)) << shape.name;
  EXPECT_TRUE(names.count("lab-mixed"));
}

TEST(Presets, ExplicitExampleHasItsListedDevices) {
  const Topology topo = Topology::load("lab-mixed");
  EXPECT_EQ(topo.fabric().type, "explicit");
  EXPECT_EQ(topo.num_nodes(), 2);
  EXPECT_EQ(topo.num_gpus(), 6);
  EXPECT_EQ(topo.gpus_per_node(), 4);
  EXPECT_EQ(topo.devices().size(), 15u);
  EXPECT_EQ(topo.links().size(), 18u);
  EXPECT_EQ(topo.node_of_gpu(4), 1);
  EXPECT_EQ(topo.local_gpu(5), 1);
  EXPECT_EQ(topo.devices()[topo.gpu_device(4)].name, "n1/gpu0");
  EXPECT_THROW(Topology::load("lab-mixed", 3), InputError);
}

TEST(Presets, DgxH100LinkClassesCountedByHand) {
  const Topology topo = Topology::load("dgx-h100");
  // Per node: 8 GPU-NVSwitch ports; 1 socket pair; 8 switch uplinks + 8 GPU + 8 NIC PCIe links.
  // Fabric: 64 NIC cables, and 8 leaves x 32 spines.
  std::map<LinkKind, int> count;
  std::map<LinkKind, std::set<double>> bandwidths;
  for (const Link& l : topo.links()) {
    ++count[l.kind];
    bandwidths[l.kind].insert(l.bandwidth_GBps);
  }
  EXPECT_EQ(count[LinkKind::NvLink], 64);
  EXPECT_EQ(count[LinkKind::CpuBus], 8);
  EXPECT_EQ(count[LinkKind::Pcie], 8 * 24);
  EXPECT_EQ(count[LinkKind::Network], 64 + 8 * 32);
  EXPECT_EQ(bandwidths[LinkKind::NvLink], std::set<double>{450});
  EXPECT_EQ(bandwidths[LinkKind::Pcie], std::set<double>{63});
  // NIC cables at 400 Gb/s; each leaf's 32 x 50 GB/s of downlinks spread over 32 spines.
  EXPECT_EQ(bandwidths[LinkKind::Network], std::set<double>{50});

  const TopologySummary summary = summarize(topo);
  int total = 0;
  for (const LinkClass& c : summary.link_classes)
    total += c.count;
  EXPECT_EQ(total, static_cast<int>(topo.links().size()));
}

TEST(NodesOverride, ScalesTheClusterAndChangesTheHash) {
  const Topology base = Topology::load("dgx-h100");
  const Topology same = Topology::load("dgx-h100", 8);
  const Topology big = Topology::load("dgx-h100", 64);
  const Topology one = Topology::load("dgx-h100", 1);
  EXPECT_EQ(same.content_hash(), base.content_hash());
  EXPECT_EQ(big.num_nodes(), 64);
  EXPECT_EQ(big.num_gpus(), 512);
  EXPECT_EQ(one.num_gpus(), 8);
  EXPECT_NE(big.content_hash(), base.content_hash());
  EXPECT_NE(one.content_hash(), base.content_hash());
  // 64 nodes at 32 per leaf: 2 leaves per rail, 16 leaves.
  int leaves = 0;
  for (const Device& d : big.devices())
    leaves += d.name.rfind("leaf", 0) == 0;
  EXPECT_EQ(leaves, 16);
}

TEST(NodesOverride, PcieBoxJoinsNodesThroughItsSwitch) {
  const Topology topo = Topology::load("pcie-8gpu", 3);
  EXPECT_EQ(topo.num_gpus(), 24);
  const Route& r = topo.route(0, 8);
  testing::expect_well_formed(topo, r);
  EXPECT_DOUBLE_EQ(r.bottleneck_GBps, 25.0);  // HDR 200 Gb/s
}

constexpr const char* kTiny = R"(name: tiny
gpu: {model: X, peak_bf16_tflops: 100, peak_fp16_tflops: 100, memory_GiB: 16, hbm_GBps: 1000}
nodes: 2
node:
  gpus: 2
  pcie: {bandwidth_GBps: 16, latency_us: 0.5, switches: [{gpus: [0, 1], nics: [0]}]}
  nics: {count: 1, rate_Gbps: 100}
network: {type: single_switch, link_latency_us: 1}
)";

TEST(ContentHash, IgnoresCommentsKeyOrderAndLayout) {
  const std::string reordered = R"(# the same cluster, written differently
network:
  link_latency_us: 1.0
  type: single_switch
node:
  nics: {rate_Gbps: 100, count: 1}   # one NIC
  pcie:
    switches:
      - nics: [0]
        gpus: [0, 1]
    latency_us: 0.5
    bandwidth_GBps: 16
  gpus: 2
nodes: 2
gpu: {hbm_GBps: 1000, memory_GiB: 16, peak_fp16_tflops: 100, peak_bf16_tflops: 100, model: X, source: "a citation"}
sources: {x: "another citation"}
description: comments and citations do not count
name: tiny
)";
  const Topology a = Topology::parse(kTiny, "a.yaml");
  const Topology b = Topology::parse(reordered, "b.yaml");
  EXPECT_EQ(a.content_hash(), b.content_hash());
  ASSERT_EQ(a.content_hash().size(), 16u);
  EXPECT_EQ(a.content_hash().find_first_not_of("0123456789abcdef"), std::string::npos);

  std::string faster = kTiny;
  faster.replace(faster.find("rate_Gbps: 100"), 14, "rate_Gbps: 200");
  EXPECT_NE(Topology::parse(faster, "c.yaml").content_hash(), a.content_hash());
  std::string slower_switch = kTiny;
  slower_switch.replace(slower_switch.find("link_latency_us: 1"), 18, "link_latency_us: 2");
  EXPECT_NE(Topology::parse(slower_switch, "d.yaml").content_hash(), a.content_hash());
  EXPECT_NE(Topology::parse(kTiny, "e.yaml", 3).content_hash(), a.content_hash());
}

}  // namespace
}  // namespace wallfacer
