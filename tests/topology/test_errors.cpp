// Malformed topology files: each mutation of a small valid file must fail with exactly the
// message (and line) a user would need to fix it.
#include <gtest/gtest.h>

#include <string>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/topology/topology.hpp>

#include "common/compact_topology.hpp"

namespace wallfacer {
namespace {

using test::edit;
constexpr const char* kCompact = test::kCompactTopology;

constexpr const char* kExplicit = R"(name: ex
gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}
devices:
  - {name: g0, kind: gpu, node: 0}
  - {name: g1, kind: gpu, node: 0}
  - {name: sw, kind: pcie_switch, node: 0}
links:
  - {ends: [g0, sw], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
  - {ends: [g1, sw], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
)";

// The full what() of the InputError parsing `text` raises ("" when it parses).
std::string error_of(const std::string& text, std::optional<int> nodes = std::nullopt) {
  try {
    Topology::parse(text, "t.yaml", nodes);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TopologyErrors, BaseFilesAreValid) {
  EXPECT_EQ(error_of(kCompact), "");
  EXPECT_EQ(error_of(kExplicit), "");
}

TEST(TopologyErrors, DocumentStructure) {
  EXPECT_EQ(error_of(""), "t.yaml: error: the topology file is empty");
  EXPECT_EQ(error_of("- a\n- b\n"), "t.yaml:1: error: a topology file must be a mapping of keys to values");
  EXPECT_EQ(error_of("name: x\n"),
            "t.yaml:1: error: missing 'node' (compact form) or 'devices' and 'links' (explicit form)");
  const std::string broken = error_of(edit(kCompact, "gpus: [0, 1], nics: [0]}", "gpus: [0, 1, nics: [0]}"));
  EXPECT_EQ(broken.rfind("t.yaml:10: error: invalid YAML: ", 0), 0u) << broken;
  EXPECT_EQ(error_of(edit(kCompact, "nodes: 2", "nodez: 2")),
            "t.yaml:3: error: unknown key 'nodez' in a compact-form topology (allowed: name, description, sources, "
            "gpu, nodes, node, network)");
  EXPECT_EQ(error_of(edit(kCompact, "name: tiny\n", "name: tiny\n{nodes: 2}: 1\n")),
            "t.yaml:2: error: a key must be a plain name, not a mapping");
  EXPECT_EQ(error_of(edit(kCompact, "name: tiny\n", "")), "t.yaml:1: error: missing required field 'name'");
  EXPECT_EQ(error_of(edit(kCompact,
                          "gpu: {model: X, peak_bf16_tflops: 100, peak_fp16_tflops: 100, memory_GiB: 16, hbm_GBps: "
                          "1000}\n",
                          "")),
            "t.yaml:1: error: missing required field 'gpu'");
  // Every missing field of a section at once, so a hand-written file is put right in one go.
  EXPECT_EQ(error_of(edit(kCompact, ", peak_fp16_tflops: 100, memory_GiB: 16, hbm_GBps: 1000}", "}")),
            "t.yaml:2: error: missing required fields 'peak_fp16_tflops', 'memory_GiB', 'hbm_GBps' in 'gpu'");
  EXPECT_EQ(error_of(edit(kCompact, ", memory_GiB: 16", "")), "t.yaml:2: error: missing required field 'memory_GiB'");
  EXPECT_EQ(error_of(edit(kCompact, "rate_Gbps: 100}", "rate_Gbps: 100, speed: 5}")),
            "t.yaml:11: error: unknown key 'speed' in 'nics' (allowed: count, rate_Gbps, bandwidth_GBps, source)");
}

TEST(TopologyErrors, Counts) {
  EXPECT_EQ(error_of(edit(kCompact, "nodes: 2", "nodes: 0")), "t.yaml:3: error: 'nodes' must be at least 1, got 0");
  EXPECT_EQ(error_of(edit(kCompact, "nodes: 2", "nodes: two")),
            "t.yaml:3: error: 'nodes' must be an integer, got 'two'");
  EXPECT_EQ(error_of(edit(kCompact, "nodes: 2", "nodes: 70000")),
            "t.yaml:3: error: 'nodes' must be at most 65536, got 70000");
  EXPECT_EQ(error_of(edit(kCompact, "gpus: 2", "gpus: 0")), "t.yaml:5: error: 'gpus' must be at least 1, got 0");
  EXPECT_EQ(error_of(kCompact, 0), "error: --nodes must be at least 1, got 0");
  EXPECT_EQ(error_of(edit(kCompact, "network: {type: single_switch, link_latency_us: 1}\n", "")),
            "t.yaml:3: error: 2 nodes need a 'network' to join them");
  const std::string one_node =
      edit(edit(kCompact, "network: {type: single_switch, link_latency_us: 1}\n", ""), "nodes: 2", "nodes: 1");
  EXPECT_EQ(error_of(one_node), "");
  EXPECT_EQ(error_of(one_node, 4),
            "t.yaml: error: --nodes 4 needs a network to join the nodes, but this topology has none");
}

TEST(TopologyErrors, RatesAndLatencies) {
  EXPECT_EQ(error_of(edit(kCompact, "bandwidth_GBps: 16", "bandwidth_GBps: 0")),
            "t.yaml:7: error: 'bandwidth_GBps' must be positive, got 0");
  EXPECT_EQ(error_of(edit(kCompact, "latency_us: 0.5", "latency_us: -1")),
            "t.yaml:8: error: 'latency_us' must be positive, got -1");
  EXPECT_EQ(error_of(edit(kCompact, "rate_Gbps: 100", "rate_Gbps: fast")),
            "t.yaml:11: error: 'rate_Gbps' must be a number, got 'fast'");
  EXPECT_EQ(error_of(edit(kCompact, "rate_Gbps: 100}", "rate_Gbps: 100, bandwidth_GBps: 12.5}")),
            "t.yaml:11: error: give the NIC rate as 'bandwidth_GBps' or 'rate_Gbps', not both");
  EXPECT_EQ(error_of(edit(kCompact, "{count: 1, rate_Gbps: 100}", "{count: 1}")),
            "t.yaml:11: error: missing the NIC rate: give 'bandwidth_GBps' or 'rate_Gbps'");
  EXPECT_EQ(error_of(edit(kCompact, "link_latency_us: 1}", "link_latency_us: 0}")),
            "t.yaml:12: error: 'link_latency_us' must be positive, got 0");
}

TEST(TopologyErrors, Placement) {
  EXPECT_EQ(error_of(edit(kCompact, "gpus: [0, 1]", "gpus: [0, 2]")),
            "t.yaml:10: error: GPU index 2 is out of range: the node has 2 GPUs (0..1)");
  EXPECT_EQ(error_of(edit(kCompact, "gpus: [0, 1], nics", "gpus: [0, -1], nics")),
            "t.yaml:10: error: GPU index -1 is out of range: the node has 2 GPUs (0..1)");
  EXPECT_EQ(error_of(edit(kCompact, "      - {gpus: [0, 1], nics: [0]}\n",
                          "      - {gpus: [0, 1], nics: [0]}\n      - {gpus: [1]}\n")),
            "t.yaml:11: error: GPU 1 is placed twice (first at line 10)");
  EXPECT_EQ(error_of(edit(kCompact, "gpus: [0, 1]", "gpus: [0]")),
            "t.yaml:5: error: GPU 1 is not attached to a CPU: list it under a PCIe switch or root port, or give it "
            "an NVLink to a CPU");
  EXPECT_EQ(error_of(edit(kCompact, "count: 1", "count: 2")),
            "t.yaml:11: error: NIC 1 is not placed: list it under a PCIe switch or root port");
  EXPECT_EQ(error_of(edit(kCompact, "- {gpus: [0, 1]", "- {cpu: 1, gpus: [0, 1]")),
            "t.yaml:10: error: CPU index 1 is out of range: the node has 1 CPU (0)");
  EXPECT_EQ(error_of(edit(kCompact, "  gpus: 2\n", "  gpus: 2\n  cpus: {count: 2}\n")),
            "t.yaml:6: error: missing required field 'link'");
}

TEST(TopologyErrors, GpuFabric) {
  EXPECT_EQ(error_of(edit(kCompact, "  gpus: 2\n", "  gpus: 2\n  gpu_fabric: {type: nvlinks}\n")),
            "t.yaml:6: error: unknown gpu_fabric type 'nvlinks' (expected nvswitch, nvlink_mesh or none)");
  EXPECT_EQ(error_of(edit(kCompact, "  gpus: 2\n",
                          "  gpus: 2\n  gpu_fabric: {type: nvlink_mesh, link_bandwidth_GBps: 25, latency_us: 0.6, "
                          "links: [{gpus: [1, 1]}]}\n")),
            "t.yaml:6: error: NVLink joins GPU 1 to itself");
  const std::string mesh = R"(  gpus: 2
  gpu_fabric:
    type: nvlink_mesh
    link_bandwidth_GBps: 25
    latency_us: 0.6
    links:
      - {gpus: [0, 1]}
      - {gpus: [1, 0], links: 2}
)";
  EXPECT_EQ(error_of(edit(kCompact, "  gpus: 2\n", mesh)),
            "t.yaml:12: error: NVLink between GPU 0 and GPU 1 is listed twice (first at line 11)");
  EXPECT_EQ(error_of(edit(kCompact, "  gpus: 2\n",
                          "  gpus: 2\n  gpu_fabric: {type: nvswitch, bandwidth_GBps: 450, latency_us: 0.3, "
                          "links: []}\n")),
            "t.yaml:6: error: unknown key 'links' in 'gpu_fabric' (allowed: type, bandwidth_GBps, latency_us, source)");
}

TEST(TopologyErrors, Network) {
  const std::string network = "network: {type: single_switch, link_latency_us: 1}";
  EXPECT_EQ(error_of(edit(kCompact, network, "network: {type: torus}")),
            "t.yaml:12: error: unknown network type 'torus' (expected single_switch, fat_tree, rail_optimized or "
            "none)");
  EXPECT_EQ(error_of(edit(kCompact, network,
                          "network: {type: fat_tree, nodes_per_leaf: 1, oversubscription: 0.5, link_latency_us: 1}")),
            "t.yaml:12: error: 'oversubscription' must be at least 1, got 0.5");
  EXPECT_EQ(error_of(edit(kCompact, network, "network: {type: fat_tree, link_latency_us: 1}")),
            "t.yaml:12: error: network type 'fat_tree' needs 'nodes_per_leaf' or 'leaf_radix'");
  EXPECT_EQ(error_of(edit(kCompact, network,
                          "network: {type: fat_tree, nodes_per_leaf: 1, leaf_radix: 8, link_latency_us: 1}")),
            "t.yaml:12: error: give 'nodes_per_leaf' or 'leaf_radix', not both");
  const std::string two_nics = edit(edit(kCompact, "count: 1", "count: 2"), "nics: [0]", "nics: [0, 1]");
  EXPECT_EQ(error_of(edit(two_nics, network, "network: {type: fat_tree, leaf_radix: 2, link_latency_us: 1}")),
            "t.yaml:12: error: leaf_radix 2 at oversubscription 1 gives 1 down port(s), fewer than the 2 one node "
            "needs");
  const std::string no_nics = edit(edit(kCompact, "  nics: {count: 1, rate_Gbps: 100}\n", ""), ", nics: [0]", "");
  EXPECT_EQ(error_of(no_nics), "t.yaml:11: error: network type 'single_switch' needs NICs: add 'nics' to the node");
}

TEST(TopologyErrors, ExplicitForm) {
  EXPECT_EQ(error_of(edit(kExplicit, "{name: g1,", "{name: g0,")),
            "t.yaml:5: error: duplicate device name 'g0' (first at line 4)");
  EXPECT_EQ(error_of(edit(kExplicit, "ends: [g1, sw]", "ends: [g1, zz]")),
            "t.yaml:9: error: link end 'zz' is not a device");
  EXPECT_EQ(error_of(edit(kExplicit, "ends: [g1, sw]", "ends: [g1, g1]")),
            "t.yaml:9: error: link joins 'g1' to itself");
  EXPECT_EQ(error_of(edit(kExplicit, "kind: pcie_switch", "kind: tpu")),
            "t.yaml:6: error: unknown device kind 'tpu' (expected gpu, cpu, pcie_switch, nvswitch, nic or net_switch)");
  EXPECT_EQ(error_of(edit(kExplicit, "kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}\n", "kind: pcie}\n")),
            "t.yaml:8: error: missing the link bandwidth: give 'bandwidth_GBps' or 'rate_Gbps'");
  EXPECT_EQ(error_of(edit(kExplicit, "  - {ends: [g1, sw], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}\n", "")),
            "t.yaml:5: error: GPUs g0 and g1 cannot reach each other");
  EXPECT_EQ(error_of(edit(kExplicit, "{name: g1, kind: gpu, node: 0}", "{name: g1, kind: gpu, node: 2}")),
            "t.yaml:5: error: node 1 has no GPU (nodes are numbered from 0 without gaps and each holds a GPU)");
  EXPECT_EQ(
      error_of(edit(kExplicit, "{name: sw, kind: pcie_switch, node: 0}", "{name: sw, kind: net_switch, node: 0}")),
      "t.yaml:6: error: network switch 'sw' must not belong to a node");
  EXPECT_EQ(error_of(edit(kExplicit, "{name: sw, kind: pcie_switch, node: 0}", "{name: sw, kind: pcie_switch}")),
            "t.yaml:6: error: device 'sw' of kind pcie_switch needs a 'node'");
  EXPECT_EQ(error_of(kExplicit, 4),
            "t.yaml:3: error: --nodes cannot resize an explicit-form topology, which lists every device");
  EXPECT_EQ(error_of(edit(kExplicit, "name: ex\n", "name: ex\nnodes: 2\n")),
            "t.yaml:2: error: unknown key 'nodes' in an explicit-form topology (allowed: name, description, sources, "
            "gpu, devices, links)");
  const std::string no_links(kExplicit, std::string(kExplicit).find("links:"));
  EXPECT_EQ(error_of(no_links), "t.yaml:1: error: missing required field 'links'");
}

TEST(TopologyErrors, ExplicitReachability) {
  // GPUs do not relay: g0 - g1 - g2 by NVLink leaves g0 and g2 without a route inside the node.
  const std::string chain = R"(name: chain
gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}
devices:
  - {name: g0, kind: gpu, node: 0}
  - {name: g1, kind: gpu, node: 0}
  - {name: g2, kind: gpu, node: 0}
links:
  - {ends: [g0, g1], kind: nvlink, bandwidth_GBps: 25, latency_us: 0.6}
  - {ends: [g1, g2], kind: nvlink, bandwidth_GBps: 25, latency_us: 0.6}
)";
  EXPECT_EQ(error_of(chain),
            "t.yaml:6: error: GPUs g0 and g2 cannot reach each other inside node 0 (routes do not pass through other "
            "GPUs or NICs)");
  // Only NICs may link out of a node, and only as network links.
  const std::string cross = R"(name: cross
gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}
devices:
  - {name: g0, kind: gpu, node: 0}
  - {name: h0, kind: gpu, node: 1}
  - {name: a, kind: nic, node: 0}
  - {name: b, kind: nic, node: 1}
links:
  - {ends: [g0, h0], kind: nvlink, bandwidth_GBps: 25, latency_us: 0.6}
)";
  EXPECT_EQ(error_of(cross),
            "t.yaml:9: error: link g0 - h0 leaves a node from a gpu: only NICs may link outside their node");
  EXPECT_EQ(error_of(edit(cross, "{ends: [g0, h0], kind: nvlink", "{ends: [a, b], kind: pcie")),
            "t.yaml:9: error: link a - b leaves a node, so its kind must be 'network'");
}

TEST(TopologyErrors, ExplicitNetworkReachability) {
  // g0's nearest NIC (a, on its own switch) has no cable; the node's other NIC (b) does.
  const std::string unwired = R"(name: unwired
gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}
devices:
  - {name: g0, kind: gpu, node: 0}
  - {name: sw, kind: pcie_switch, node: 0}
  - {name: cpu, kind: cpu, node: 0}
  - {name: a, kind: nic, node: 0}
  - {name: b, kind: nic, node: 0}
  - {name: h0, kind: gpu, node: 1}
  - {name: c, kind: nic, node: 1}
  - {name: tor, kind: net_switch}
links:
  - {ends: [g0, sw], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
  - {ends: [a, sw], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
  - {ends: [sw, cpu], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
  - {ends: [b, cpu], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
  - {ends: [h0, c], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
  - {ends: [b, tor], kind: network, rate_Gbps: 100, latency_us: 1}
  - {ends: [c, tor], kind: network, rate_Gbps: 100, latency_us: 1}
)";
  EXPECT_EQ(error_of(unwired), "t.yaml:7: error: NIC a (serving g0) has no network link");
  // Two switches joined only through a third node's NIC: connected, but NICs do not relay.
  const std::string relay = R"(name: relay
gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}
devices:
  - {name: g0, kind: gpu, node: 0}
  - {name: a, kind: nic, node: 0}
  - {name: h0, kind: gpu, node: 1}
  - {name: c, kind: nic, node: 1}
  - {name: k0, kind: gpu, node: 2}
  - {name: d, kind: nic, node: 2}
  - {name: tor1, kind: net_switch}
  - {name: tor2, kind: net_switch}
links:
  - {ends: [g0, a], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
  - {ends: [h0, c], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
  - {ends: [k0, d], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
  - {ends: [a, tor1], kind: network, rate_Gbps: 100, latency_us: 1}
  - {ends: [c, tor2], kind: network, rate_Gbps: 100, latency_us: 1}
  - {ends: [d, tor1], kind: network, rate_Gbps: 100, latency_us: 1}
  - {ends: [d, tor2], kind: network, rate_Gbps: 100, latency_us: 1}
)";
  EXPECT_EQ(error_of(relay), "t.yaml:7: error: NICs a and c are not joined by the network");
  // Cabling the switches together fixes it, and k0 routes through its own two-cable NIC.
  const std::string fixed = relay + "  - {ends: [tor1, tor2], kind: network, rate_Gbps: 400, latency_us: 1}\n";
  EXPECT_EQ(error_of(fixed), "");
  const Topology topo = Topology::parse(fixed, "t.yaml");
  EXPECT_NEAR(topo.route(0, 1).latency_us, 0.5 + 1 + 1 + 1 + 0.5, 1e-12);  // a - tor1 - tor2 - c
  EXPECT_NEAR(topo.route(2, 1).latency_us, 0.5 + 1 + 1 + 0.5, 1e-12);      // d - tor2 - c
}

TEST(TopologyErrors, MissingFileOrPreset) {
  try {
    Topology::load("no-such-topology.yaml");
    FAIL() << "loaded a file that does not exist";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("no-such-topology.yaml: error: no such file, and no preset of that name (presets: ", 0), 0u)
        << what;
    EXPECT_NE(what.find("dgx-h100"), std::string::npos);
  }
}

}  // namespace
}  // namespace wallfacer
