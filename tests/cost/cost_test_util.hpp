// Small topologies and workloads for the cost-model tests, written inline so each test states the
// bandwidths and latencies its closed form uses.
#pragma once

#include <fmt/format.h>

#include <string>

#include <wallfacer/plan/workload.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::testing {

// `nodes` nodes of `gpus` GPUs joined by one NVSwitch (bandwidth per GPU per direction, latency
// per hop), one 100 Gb/s NIC per node behind a PCIe switch, one network switch. A huge compute
// peak and HBM bandwidth make compute negligible when asked.
inline Topology switch_nodes(int nodes, int gpus, double nvswitch_GBps = 450, bool fast_compute = false) {
  const double peak = fast_compute ? 1e12 : 989.4;
  const double hbm = fast_compute ? 1e12 : 3350;
  std::string gpu_list;
  for (int g = 0; g < gpus; ++g)
    gpu_list += fmt::format("{}{}", g ? ", " : "", g);
  const std::string text = fmt::format(R"(name: test-switch
description: test nodes on an NVSwitch
gpu: {{model: TestGPU, peak_bf16_tflops: {0}, peak_fp16_tflops: {0}, memory_GiB: 80, hbm_GBps: {1}, source: test}}
nodes: {2}
node:
  gpus: {3}
  cpus: {{count: 1, model: test, link: {{bandwidth_GBps: 10, latency_us: 0.5, source: test}}}}
  gpu_fabric: {{type: nvswitch, bandwidth_GBps: {4}, latency_us: 0.3, source: test}}
  pcie:
    bandwidth_GBps: 32
    latency_us: 0.5
    source: test
    switches:
      - {{cpu: 0, gpus: [{5}], nics: [0]}}
  nics: {{count: 1, rate_Gbps: 100, source: test}}
network:
  type: single_switch
  link_latency_us: 1.0
  source: test
)",
                                       peak, hbm, nodes, gpus, nvswitch_GBps, gpu_list);
  return Topology::parse(text, "test-switch.yaml");
}

// A multi-head-attention workload (kv_heads == heads) small enough to build every rank quickly.
inline Workload mha_workload(int64_t seq, int heads = 8, int head_dim = 64, bool causal = false, int batch = 1) {
  Workload w;
  w.model = "custom";
  w.layers = 4;
  w.heads = heads;
  w.kv_heads = heads;
  w.head_dim = head_dim;
  w.hidden = int64_t(heads) * head_dim;
  w.ffn = 4 * w.hidden;
  w.vocab = 1000;
  w.gated_ffn = false;
  w.seq = seq;
  w.batch = batch;
  w.dtype = DType::BF16;
  w.causal = causal;
  w.zero_stage = 1;
  return w;
}

}  // namespace wallfacer::testing
