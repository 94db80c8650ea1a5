// Routes against hand-computed paths, bandwidths and latencies (the numbers come from the preset
// files: NVLink 0.3 us per GPU-NVSwitch link, PCIe 0.5 us per link, NIC cables 0.35 us, leaf-spine
// 0.3 us), intra-node routes against a brute-force search, ECMP spreading and determinism,
// shared resources, and bisection bandwidths worked out by hand.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/topology/topology.hpp>
#include "topology_test_util.hpp"

namespace wallfacer {
namespace {

using Names = std::vector<std::string>;
using testing::device_names;
using testing::expect_well_formed;

std::vector<LinkKind> hop_kinds(const Topology& topo, const Route& r) {
  std::vector<LinkKind> kinds;
  for (const Hop& h : r.hops)
    kinds.push_back(topo.links()[h.link].kind);
  return kinds;
}

TEST(Routing, DgxH100InsideANodeCrossesTheNvSwitch) {
  const Topology topo = Topology::load("dgx-h100");
  const Route& r = topo.route(0, 5);
  expect_well_formed(topo, r);
  EXPECT_EQ(device_names(topo, r), (Names{"n0/gpu0", "n0/nvswitch", "n0/gpu5"}));
  EXPECT_DOUBLE_EQ(r.bottleneck_GBps, 450.0);
  EXPECT_NEAR(r.latency_us, 2 * 0.3, 1e-12);
  EXPECT_EQ(&topo.route(0, 5), &r);  // cached
}

TEST(Routing, DgxH100SameRailSameLeafIsNicBound) {
  const Topology topo = Topology::load("dgx-h100");
  const Route& r = topo.route(0, 8);  // n0/gpu0 -> n1/gpu0, both on rail 0's only leaf
  expect_well_formed(topo, r);
  EXPECT_EQ(device_names(topo, r),
            (Names{"n0/gpu0", "n0/pcie0", "n0/nic0", "leaf0.rail0", "n1/nic0", "n1/pcie0", "n1/gpu0"}));
  EXPECT_EQ(hop_kinds(topo, r), (std::vector<LinkKind>{LinkKind::Pcie, LinkKind::Pcie, LinkKind::Network,
                                                       LinkKind::Network, LinkKind::Pcie, LinkKind::Pcie}));
  EXPECT_DOUBLE_EQ(r.bottleneck_GBps, 400.0 / 8);
  EXPECT_NEAR(r.latency_us, 4 * 0.5 + 2 * 0.35, 1e-12);
}

TEST(Routing, DgxH100CrossRailGoesThroughASpine) {
  const Topology topo = Topology::load("dgx-h100");
  const Route& r = topo.route(0, 9);  // n0/gpu0 (rail 0) -> n1/gpu1 (rail 1)
  expect_well_formed(topo, r);
  const Names names = device_names(topo, r);
  ASSERT_EQ(names.size(), 9u);
  EXPECT_EQ(names[3], "leaf0.rail0");
  EXPECT_EQ(names[4].rfind("spine", 0), 0u);
  EXPECT_EQ(names[5], "leaf0.rail1");
  EXPECT_EQ(names[6], "n1/nic1");
  EXPECT_DOUBLE_EQ(r.bottleneck_GBps, 50.0);
  EXPECT_NEAR(r.latency_us, 4 * 0.5 + 2 * 0.35 + 2 * 0.3, 1e-12);
}

TEST(Routing, SummitCrossSocketUsesTheXBus) {
  const Topology topo = Topology::load("summit");
  const Route& same = topo.route(0, 2);
  EXPECT_EQ(device_names(topo, same), (Names{"n0/gpu0", "n0/gpu2"}));
  EXPECT_DOUBLE_EQ(same.bottleneck_GBps, 50.0);  // 2 NVLink 2 links x 25 GB/s
  EXPECT_NEAR(same.latency_us, 0.6, 1e-12);
  const Route& cross = topo.route(0, 3);
  expect_well_formed(topo, cross);
  EXPECT_EQ(device_names(topo, cross), (Names{"n0/gpu0", "n0/cpu0", "n0/cpu1", "n0/gpu3"}));
  EXPECT_EQ(hop_kinds(topo, cross), (std::vector<LinkKind>{LinkKind::NvLink, LinkKind::CpuBus, LinkKind::NvLink}));
  EXPECT_DOUBLE_EQ(cross.bottleneck_GBps, 32.0);  // X-Bus 64 GB/s bidirectional
  EXPECT_NEAR(cross.latency_us, 0.6 + 0.5 + 0.6, 1e-12);
}

TEST(Routing, SummitGpusOfASocketShareOneEdrPort) {
  const Topology topo = Topology::load("summit");
  for (int g = 0; g < 6; ++g)
    EXPECT_EQ(topo.devices()[topo.nic_of_gpu(g)].name, g < 3 ? "n0/nic0" : "n0/nic1");
  const Route& a = topo.route(0, 6);  // n0/gpu0 -> n1/gpu0
  const Route& b = topo.route(1, 7);  // n0/gpu1 -> n1/gpu1
  expect_well_formed(topo, a);
  EXPECT_EQ(device_names(topo, a), (Names{"n0/gpu0", "n0/cpu0", "n0/nic0", "leaf0", "n1/nic0", "n1/cpu0", "n1/gpu0"}));
  EXPECT_DOUBLE_EQ(a.bottleneck_GBps, 12.5);
  // Shared: CPU->NIC PCIe, NIC->leaf, leaf->NIC, NIC->CPU; not the GPUs' own NVLinks.
  const auto shared = topo.shared_resources(a, b);
  EXPECT_EQ(shared.size(), 4u);
  const ResourceId uplink = topo.resource_of(a.hops[2]);
  EXPECT_TRUE(std::count(shared.begin(), shared.end(), uplink));
  EXPECT_DOUBLE_EQ(topo.resource_bandwidth_GBps(uplink), 12.5);
  // The other socket's GPUs use the other port: nothing shared.
  EXPECT_TRUE(topo.shared_resources(a, topo.route(3, 9)).empty());
  // Full duplex: the reverse route uses the same links the other way.
  EXPECT_TRUE(topo.shared_resources(a, topo.route(6, 0)).empty());
}

TEST(Routing, PcieBoxPaths) {
  const Topology topo = Topology::load("pcie-8gpu");
  const Route& pix = topo.route(0, 1);
  EXPECT_EQ(device_names(topo, pix), (Names{"n0/gpu0", "n0/pcie0", "n0/gpu1"}));
  EXPECT_DOUBLE_EQ(pix.bottleneck_GBps, 31.5);
  EXPECT_NEAR(pix.latency_us, 1.0, 1e-12);
  const Route& phb = topo.route(0, 2);
  EXPECT_EQ(device_names(topo, phb), (Names{"n0/gpu0", "n0/pcie0", "n0/cpu0", "n0/pcie1", "n0/gpu2"}));
  EXPECT_DOUBLE_EQ(phb.bottleneck_GBps, 31.5);
  EXPECT_NEAR(phb.latency_us, 2.0, 1e-12);
  const Route& sys = topo.route(0, 4);
  EXPECT_EQ(device_names(topo, sys), (Names{"n0/gpu0", "n0/pcie0", "n0/cpu0", "n0/cpu1", "n0/pcie2", "n0/gpu4"}));
  EXPECT_DOUBLE_EQ(sys.bottleneck_GBps, 16.0);  // AMD inter-socket
  EXPECT_NEAR(sys.latency_us, 2.5, 1e-12);
  // GPUs 2 and 3 reach NIC 0 through their socket (2.0 us) rather than NIC 1 across it (2.5 us).
  for (int g = 0; g < 8; ++g)
    EXPECT_EQ(topo.devices()[topo.nic_of_gpu(g)].name, g < 4 ? "n0/nic0" : "n0/nic1");
}

TEST(Routing, DgxOneVUsesNvlinkWhereWiredAndPcieElsewhere) {
  const Topology topo = Topology::load("dgx-1v");
  EXPECT_DOUBLE_EQ(topo.route(0, 1).bottleneck_GBps, 50.0);  // two links
  EXPECT_DOUBLE_EQ(topo.route(0, 2).bottleneck_GBps, 25.0);  // one link
  EXPECT_EQ(topo.route(0, 1).hops.size(), 1u);
  const Route& none = topo.route(0, 5);  // no NVLink between GPU 0 and GPU 5
  EXPECT_EQ(device_names(topo, none), (Names{"n0/gpu0", "n0/pcie0", "n0/cpu0", "n0/cpu1", "n0/pcie2", "n0/gpu5"}));
  EXPECT_DOUBLE_EQ(none.bottleneck_GBps, 6.0);
  EXPECT_NEAR(none.latency_us, 2.5, 1e-12);
}

TEST(Routing, NicsAreAssignedByPcieProximity) {
  const Topology a100 = Topology::load("dgx-a100");
  for (int g = 0; g < 8; ++g)
    EXPECT_EQ(a100.devices()[a100.nic_of_gpu(g)].name, "n0/nic" + std::to_string(g));
  const Topology mega = Topology::load("a2-megagpu-16g");
  std::set<ResourceId> uplinks;
  for (int g = 0; g < 16; ++g) {
    EXPECT_EQ(mega.devices()[mega.nic_of_gpu(g)].name, "n0/nic0");
    const Route& r = mega.route(g, 16 + g);
    expect_well_formed(mega, r);
    EXPECT_DOUBLE_EQ(r.bottleneck_GBps, 12.5);
    for (const Hop& h : r.hops)
      if (mega.links()[h.link].kind == LinkKind::Network && mega.devices()[r.devices[0]].node == 0) {
        uplinks.insert(mega.resource_of(h));
        break;
      }
  }
  EXPECT_EQ(uplinks.size(), 1u);  // all 16 GPUs send through the VM's one NIC
}

TEST(Routing, ExplicitClusterPrefersTheDirectCable) {
  const Topology topo = Topology::load("lab-mixed");
  const Route& bridge = topo.route(0, 1);
  EXPECT_EQ(device_names(topo, bridge), (Names{"n0/gpu0", "n0/gpu1"}));
  EXPECT_DOUBLE_EQ(bridge.bottleneck_GBps, 300.0);
  EXPECT_NEAR(topo.route(0, 2).latency_us, 2.0, 1e-12);
  const Route& direct = topo.route(2, 4);  // n0/gpu2 uses n0/nic1, which is cabled to n1/nic0
  expect_well_formed(topo, direct);
  EXPECT_EQ(device_names(topo, direct), (Names{"n0/gpu2", "n0/pcie1", "n0/nic1", "n1/nic0", "n1/pcie0", "n1/gpu0"}));
  EXPECT_NEAR(direct.latency_us, 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(direct.bottleneck_GBps, 12.5);
  const Route& via_switch = topo.route(0, 4);
  EXPECT_EQ(device_names(topo, via_switch),
            (Names{"n0/gpu0", "n0/pcie0", "n0/nic0", "tor", "n1/nic0", "n1/pcie0", "n1/gpu0"}));
  EXPECT_NEAR(via_switch.latency_us, 4.0, 1e-12);
  const Route& back = topo.route(4, 0);
  EXPECT_EQ(device_names(topo, back),
            (Names{"n1/gpu0", "n1/pcie0", "n1/nic0", "tor", "n0/nic0", "n0/pcie0", "n0/gpu0"}));
}

TEST(Routing, HalfDuplexLinksContendInBothDirections) {
  const std::string text = R"(name: duplex
gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}
devices:
  - {name: a, kind: gpu, node: 0}
  - {name: b, kind: gpu, node: 0}
  - {name: c, kind: gpu, node: 0}
  - {name: sw, kind: pcie_switch, node: 0}
links:
  - {ends: [a, sw], kind: pcie, bandwidth_GBps: 10, latency_us: 1, full_duplex: false}
  - {ends: [b, sw], kind: pcie, bandwidth_GBps: 10, latency_us: 1}
  - {ends: [c, sw], kind: pcie, bandwidth_GBps: 10, latency_us: 1}
)";
  const Topology topo = Topology::parse(text, "duplex.yaml");
  // a<->b share the half-duplex a-sw link; b<->c use only full-duplex links in opposite ways.
  EXPECT_EQ(topo.shared_resources(topo.route(0, 1), topo.route(1, 0)).size(), 1u);
  EXPECT_TRUE(topo.shared_resources(topo.route(1, 2), topo.route(2, 1)).empty());
  EXPECT_EQ(topo.shared_resources(topo.route(1, 0), topo.route(2, 0)).size(), 1u);
}

// ---- brute force: cheapest intra-node paths by exhaustive search --------------------------------

struct Best {
  double latency = INFINITY;
  int hops = 0;
};

void search(const Topology& topo, const std::vector<std::vector<std::pair<int, int>>>& adjacent, int at, int target,
            double latency, int hops, std::vector<bool>& used, Best& best) {
  if (at == target) {
    if (latency < best.latency - 1e-9 || (std::abs(latency - best.latency) <= 1e-9 && hops < best.hops))
      best = {latency, hops};
    return;
  }
  if (hops > 0 && (topo.devices()[at].kind == DeviceKind::Gpu || topo.devices()[at].kind == DeviceKind::Nic)) return;
  for (const auto& [next, link] : adjacent[at]) {
    if (used[next]) continue;
    used[next] = true;
    search(topo, adjacent, next, target, latency + topo.links()[link].latency_us, hops + 1, used, best);
    used[next] = false;
  }
}

TEST(Routing, IntraNodeRoutesMatchExhaustiveSearch) {
  for (const char* preset : {"dgx-1v", "summit", "pcie-8gpu", "dgx-a100", "lab-mixed", "a2-highgpu-8g"}) {
    const Topology topo = Topology::load(preset);
    std::vector<std::vector<std::pair<int, int>>> adjacent(topo.devices().size());
    for (size_t l = 0; l < topo.links().size(); ++l) {
      const Link& link = topo.links()[l];
      if (topo.devices()[link.a].node != topo.devices()[link.b].node) continue;
      adjacent[link.a].push_back({link.b, static_cast<int>(l)});
      adjacent[link.b].push_back({link.a, static_cast<int>(l)});
    }
    for (int a = 0; a < topo.num_gpus(); ++a) {
      for (int b = 0; b < topo.num_gpus(); ++b) {
        if (a == b || topo.node_of_gpu(a) != topo.node_of_gpu(b)) continue;
        Best best;
        std::vector<bool> used(topo.devices().size(), false);
        used[topo.gpu_device(a)] = true;
        search(topo, adjacent, topo.gpu_device(a), topo.gpu_device(b), 0.0, 0, used, best);
        const Route& r = topo.route(a, b);
        EXPECT_NEAR(r.latency_us, best.latency, 1e-9) << preset << " " << a << "->" << b;
        EXPECT_EQ(static_cast<int>(r.hops.size()), best.hops) << preset << " " << a << "->" << b;
      }
    }
  }
}

// ---- ECMP ---------------------------------------------------------------------------------------

Topology dgx_h100_routed(int nodes, const std::string& routing);

TEST(Ecmp, SpreadsOverSpinesDeterministically) {
  // 64 nodes at 32 per leaf: rail 0 has two leaves, so n0..31 -> n32..63 crosses a spine.
  const Topology topo = dgx_h100_routed(64, "ecmp");
  const Topology again = dgx_h100_routed(64, "ecmp");
  std::map<std::string, int> use;
  for (int src_node = 0; src_node < 32; ++src_node) {
    for (int dst_node = 32; dst_node < 64; ++dst_node) {
      for (int local : {0, 3}) {
        const int src = src_node * 8 + local, dst = dst_node * 8 + local;
        const Route& r = topo.route(src, dst);
        expect_well_formed(topo, r);
        const Names names = device_names(topo, r);
        ASSERT_EQ(names.size(), 9u);
        ++use[names[4]];
        EXPECT_NEAR(r.latency_us, 4 * 0.5 + 2 * 0.35 + 2 * 0.3, 1e-12);  // all spines cost the same
        EXPECT_EQ(device_names(again, again.route(src, dst)), names);
      }
    }
  }
  EXPECT_EQ(use.size(), 32u);  // 2048 flows reach every one of the 32 spines
  for (const auto& [spine, count] : use) {
    EXPECT_EQ(spine.rfind("spine", 0), 0u);
    EXPECT_LT(count, 3 * 2048 / 32) << spine;  // no spine takes three times its share
  }
}

// The dgx-h100 preset (d-mod-k) at `nodes` nodes with `routing` in its network block instead.
Topology dgx_h100_routed(int nodes, const std::string& routing) {
  std::ifstream in(std::string(WALLFACER_SOURCE_DIR) + "/topologies/dgx-h100.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const std::string preset = "  routing: d-mod-k\n";
  const size_t at = yaml.find(preset);
  EXPECT_NE(at, std::string::npos);
  yaml.replace(at, preset.size(), "  routing: " + routing + "\n");
  return Topology::parse(yaml, "dgx-h100-" + routing + ".yaml", nodes);
}

TEST(DModK, ShiftsBetweenLeavesUseEverySpineOnceWhereEcmpCollides) {
  // Rail 0 of 64 nodes has two leaves of 32; node i -> node i + 32 for every i of the first leaf
  // is a shift, the pattern of a ring. D-mod-k sends flow i down from spine (i + 32) mod 32, so
  // the 32 flows take 32 different spines, up and down; hashing the GPU pair (ECMP) puts some on
  // the same spine, where they share its links.
  const Topology d_mod_k = Topology::load("dgx-h100", 64);
  EXPECT_EQ(d_mod_k.fabric().routing, "d-mod-k");  // InfiniBand's fat-tree routing, the preset's
  const Topology ecmp = dgx_h100_routed(64, "ecmp");
  EXPECT_EQ(ecmp.fabric().routing, "ecmp");
  EXPECT_NE(d_mod_k.content_hash(), ecmp.content_hash());
  EXPECT_EQ(dgx_h100_routed(64, "d-mod-k").content_hash(), d_mod_k.content_hash());
  std::set<std::string> spines;
  std::map<std::string, int> ecmp_use;
  for (int node = 0; node < 32; ++node) {
    const Route& r = d_mod_k.route(node * 8, (node + 32) * 8);
    expect_well_formed(d_mod_k, r);
    const Names names = device_names(d_mod_k, r);
    ASSERT_EQ(names.size(), 9u);
    EXPECT_EQ(names[4], fmt::format("spine{}", node));
    spines.insert(names[4]);
    ++ecmp_use[device_names(ecmp, ecmp.route(node * 8, (node + 32) * 8))[4]];
  }
  EXPECT_EQ(spines.size(), 32u);
  EXPECT_LT(ecmp_use.size(), 32u);
  // The other way round too, and the route depends on the destination only.
  for (int node = 32; node < 64; ++node)
    EXPECT_EQ(device_names(d_mod_k, d_mod_k.route(node * 8, (node - 32) * 8))[4], fmt::format("spine{}", node - 32));
  EXPECT_EQ(device_names(d_mod_k, d_mod_k.route(5 * 8, 40 * 8))[4], "spine8");
}

TEST(DModK, UnknownRoutingIsRejected) {
  try {
    dgx_h100_routed(4, "random");
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown routing 'random' (expected ecmp or d-mod-k)"), std::string::npos)
        << e.what();
  }
}

// ---- bisection ----------------------------------------------------------------------------------

TEST(Bisection, MatchesHandComputedCuts) {
  // Half the nodes' NICs: 4 nodes x 8 x 50 GB/s.
  EXPECT_DOUBLE_EQ(Topology::load("dgx-h100").bisection_bandwidth_GBps(), 1600.0);
  // One node: socket halves, 4 NVSwitch ports of 450 GB/s plus the 10 GB/s socket link.
  EXPECT_DOUBLE_EQ(Topology::load("dgx-h100", 1).bisection_bandwidth_GBps(), 1810.0);
  // Two leaves of 2 nodes: 16 HDR NICs of 25 GB/s per side, non-blocking uplinks.
  EXPECT_DOUBLE_EQ(Topology::load("dgx-a100").bisection_bandwidth_GBps(), 400.0);
  EXPECT_DOUBLE_EQ(Topology::load("a2-highgpu-8g").bisection_bandwidth_GBps(), 12.5);
  EXPECT_DOUBLE_EQ(Topology::load("summit").bisection_bandwidth_GBps(), 2 * 2 * 12.5);
  // Socket halves joined only by the 16 GB/s inter-socket link.
  EXPECT_DOUBLE_EQ(Topology::load("pcie-8gpu").bisection_bandwidth_GBps(), 16.0);
  // Cube-mesh halves {0..3} | {4..7}: NVLinks 0-4 (2), 1-5 (1), 2-6 (2), 3-7 (1) x 25 + QPI 6.
  EXPECT_DOUBLE_EQ(Topology::load("dgx-1v", 1).bisection_bandwidth_GBps(), 6 * 25.0 + 6.0);
}

TEST(Bisection, OversubscriptionDividesTheUplinks) {
  const std::string base = R"(name: tree
gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}
nodes: 4
node:
  gpus: 2
  pcie: {bandwidth_GBps: 16, latency_us: 0.5, switches: [{gpus: [0, 1], nics: [0]}]}
  nics: {count: 1, rate_Gbps: 100}
network: {type: fat_tree, nodes_per_leaf: 2, link_latency_us: 1, oversubscription: OVER}
)";
  auto with = [&](const std::string& over) {
    std::string text = base;
    text.replace(text.find("OVER"), 4, over);
    return Topology::parse(text, "tree.yaml");
  };
  EXPECT_DOUBLE_EQ(with("1").bisection_bandwidth_GBps(), 25.0);  // 2 NICs of 12.5 GB/s per side
  const Topology over = with("2");
  EXPECT_DOUBLE_EQ(over.bisection_bandwidth_GBps(), 12.5);
  EXPECT_DOUBLE_EQ(over.fabric().oversubscription, 2.0);
  // Same-leaf traffic still runs at the NIC rate.
  EXPECT_DOUBLE_EQ(over.route(0, 2).bottleneck_GBps, 12.5);
  EXPECT_EQ(over.route(0, 2).hops.size(), 6u);  // GPU, switch, NIC, leaf, NIC, switch, GPU
}

TEST(Bisection, LeafRadixSetsNodesPerLeaf) {
  const std::string text = R"(name: radix
gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}
nodes: 8
node:
  gpus: 1
  pcie: {bandwidth_GBps: 16, latency_us: 0.5, switches: [{gpus: [0], nics: [0, 1]}]}
  nics: {count: 2, bandwidth_GBps: 10}
network: {type: fat_tree, leaf_radix: 8, link_latency_us: 1}
)";
  // Radix 8 at oversubscription 1: 4 down ports = 2 nodes of 2 NICs per leaf; 4 leaves, 4 spines.
  const Topology topo = Topology::parse(text, "radix.yaml");
  int leaves = 0, spines = 0;
  for (const Device& d : topo.devices()) {
    leaves += d.name.rfind("leaf", 0) == 0;
    spines += d.name.rfind("spine", 0) == 0;
  }
  EXPECT_EQ(leaves, 4);
  EXPECT_EQ(spines, 4);
  EXPECT_EQ(topo.route(0, 1).hops.size(), 6u);  // same leaf
  EXPECT_EQ(topo.route(0, 2).hops.size(), 8u);  // through a spine
  // 4 nodes per side; each node's only GPU reaches its two 10 GB/s NICs through one 16 GB/s
  // PCIe link, which is the bottleneck (the leaf uplinks match the downlinks).
  EXPECT_DOUBLE_EQ(topo.bisection_bandwidth_GBps(), 4 * 16.0);
}

TEST(Bisection, OneGpuHasNoHalves) {
  const std::string text = R"(name: one
gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}
node: {gpus: 1, pcie: {bandwidth_GBps: 16, latency_us: 0.5, root_ports: [{gpus: [0]}]}}
)";
  EXPECT_EQ(Topology::parse(text, "one.yaml").bisection_bandwidth_GBps(), 0.0);
}

// docs/formats/topology.md works two routes and a bisection out by hand; hold the doc to them.
TEST(Documentation, WorkedExampleHoldsItsClaims) {
  std::ifstream in(std::string(WALLFACER_SOURCE_DIR) + "/docs/formats/topology.md");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string doc = buffer.str();
  const size_t section = doc.find("## Worked example");
  ASSERT_NE(section, std::string::npos);
  const size_t begin = doc.find("```yaml\n", section);
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc.find("```", begin + 8);
  const Topology topo = Topology::parse(doc.substr(begin + 8, end - begin - 8), "topology.md");
  EXPECT_EQ(topo.num_gpus(), 8);

  const Route& inside = topo.route(0, 3);
  EXPECT_EQ(device_names(topo, inside), (Names{"n0/gpu0", "n0/nvswitch", "n0/gpu3"}));
  EXPECT_DOUBLE_EQ(inside.bottleneck_GBps, 300.0);
  EXPECT_NEAR(inside.latency_us, 0.6, 1e-12);

  const Route& across = topo.route(1, 6);
  EXPECT_EQ(device_names(topo, across),
            (Names{"n0/gpu1", "n0/pcie0", "n0/nic0", "switch0", "n1/nic1", "n1/pcie1", "n1/gpu2"}));
  EXPECT_DOUBLE_EQ(across.bottleneck_GBps, 25.0);
  EXPECT_NEAR(across.latency_us, 2.7, 1e-12);
  EXPECT_EQ(topo.shared_resources(across, topo.route(0, 4)).size(), 2u);
  EXPECT_DOUBLE_EQ(topo.bisection_bandwidth_GBps(), 50.0);
  EXPECT_EQ(Topology::parse(doc.substr(begin + 8, end - begin - 8), "topology.md", 4).num_gpus(), 16);
}

}  // namespace
}  // namespace wallfacer
