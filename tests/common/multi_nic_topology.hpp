// Nodes of GPUs on one NVSwitch with several NICs each, every NIC under its own PCIe switch with
// gpus / nics of the GPUs, the NICs on one network switch: the figures a test's closed form for
// ring channels (one per NIC) is written with.
#pragma once

#include <fmt/format.h>

#include <string>

#include <wallfacer/topology/topology.hpp>

namespace wallfacer::test {

struct MultiNicFigures {
  int nodes = 2, gpus = 8, nics = 8;
  double nvswitch_GBps = 450, nvswitch_us = 0.3;
  double pcie_GBps = 64, pcie_us = 0.5;
  double nic_Gbps = 200, network_us = 1.0;
  double nic_GBps() const { return nic_Gbps / 8; }
  // GPU -> PCIe switch -> NIC -> network switch and back down on the other node.
  double route_between_nodes_s() const { return (4 * pcie_us + 2 * network_us) * 1e-6; }
  double route_inside_node_s() const { return 2 * nvswitch_us * 1e-6; }
};

inline Topology multi_nic_topology(const MultiNicFigures& f) {
  std::string switches;
  const int per_nic = f.gpus / f.nics;
  for (int k = 0; k < f.nics; ++k) {
    std::string gpus;
    for (int g = k * per_nic; g < (k + 1) * per_nic; ++g)
      gpus += fmt::format("{}{}", g > k * per_nic ? ", " : "", g);
    switches += fmt::format("      - {{cpu: 0, gpus: [{}], nics: [{}]}}\n", gpus, k);
  }
  const std::string text = fmt::format(R"(name: test-multi-nic
description: test nodes with several NICs
gpu: {{model: TestGPU, peak_bf16_tflops: 1000, peak_fp16_tflops: 1000, memory_GiB: 80, hbm_GBps: 3000, source: test}}
nodes: {}
node:
  gpus: {}
  cpus: {{count: 1, model: test, link: {{bandwidth_GBps: 10, latency_us: 0.5, source: test}}}}
  gpu_fabric: {{type: nvswitch, bandwidth_GBps: {}, latency_us: {}, source: test}}
  pcie:
    bandwidth_GBps: {}
    latency_us: {}
    source: test
    switches:
{}  nics: {{count: {}, rate_Gbps: {}, source: test}}
network:
  type: single_switch
  link_latency_us: {}
  source: test
)",
                                       f.nodes, f.gpus, f.nvswitch_GBps, f.nvswitch_us, f.pcie_GBps, f.pcie_us,
                                       switches, f.nics, f.nic_Gbps, f.network_us);
  return Topology::parse(text, "test-multi-nic.yaml");
}

}  // namespace wallfacer::test
