// Hand-built inputs for the simulator tests: explicit-form topology YAML with round link figures,
// plans that only place ranks, and small schedules built op by op, so every expected time can be
// derived on paper from latency, bandwidth and FLOPs.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <wallfacer/cost/calibration.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::test {

// A scratch file name unique to this test process.
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("wallfacer-sim-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The GPU block of every test topology: a model no calibration point matches, so compute runs at
// the calibration's fallback efficiency times this peak.
inline std::string test_gpu_yaml(double peak_tflops = 100, double hbm_GBps = 1000) {
  return fmt::format(
      "gpu: {{model: TestGPU, peak_bf16_tflops: {0}, peak_fp16_tflops: {0}, memory_GiB: 80, hbm_GBps: {1}}}\n",
      peak_tflops, hbm_GBps);
}

// One node whose `gpus` GPUs each hang off one NVSwitch by a full-duplex link: every GPU pair
// routes GPU -> switch -> GPU, latency 2 x latency_us, bottleneck bandwidth_GBps.
inline std::string star_topology_yaml(int gpus, double bandwidth_GBps, double latency_us, double peak_tflops = 100,
                                      double hbm_GBps = 1000) {
  std::string yaml = "name: test-star\ndescription: GPUs on one switch\n" + test_gpu_yaml(peak_tflops, hbm_GBps);
  yaml += "devices:\n  - {name: n0/nvs, kind: nvswitch, node: 0}\n";
  for (int g = 0; g < gpus; ++g)
    yaml += fmt::format("  - {{name: n0/gpu{}, kind: gpu, node: 0}}\n", g);
  yaml += "links:\n";
  for (int g = 0; g < gpus; ++g)
    yaml += fmt::format("  - {{ends: [n0/gpu{}, n0/nvs], kind: nvlink, bandwidth_GBps: {}, latency_us: {}}}\n", g,
                        bandwidth_GBps, latency_us);
  return yaml;
}

// Two nodes of two GPUs; each node's GPUs reach its single NIC through one PCIe switch, and the
// NICs meet at one network switch. GPU i of node 0 -> GPU j of node 1 crosses
// gpu-pcie, pcie-nic, nic-tor, tor-nic, nic-pcie, pcie-gpu.
struct SharedNicFigures {
  double pcie_GBps = 50, pcie_us = 0.5;
  double net_GBps = 10, net_us = 1.0;
  double route_latency_s() const { return (4 * pcie_us + 2 * net_us) * 1e-6; }
};
inline std::string shared_nic_topology_yaml(const SharedNicFigures& f = {}) {
  std::string yaml = "name: test-shared-nic\ndescription: two GPUs per NIC\n" + test_gpu_yaml();
  yaml += "devices:\n";
  for (int n = 0; n < 2; ++n) {
    yaml += fmt::format(
        "  - {{name: n{0}/gpu0, kind: gpu, node: {0}}}\n  - {{name: n{0}/gpu1, kind: gpu, node: {0}}}\n", n);
    yaml += fmt::format("  - {{name: n{0}/pcie0, kind: pcie_switch, node: {0}}}\n", n);
    yaml += fmt::format("  - {{name: n{0}/nic0, kind: nic, node: {0}}}\n", n);
  }
  yaml += "  - {name: tor, kind: net_switch}\nlinks:\n";
  for (int n = 0; n < 2; ++n) {
    for (const char* end : {"gpu0", "gpu1", "nic0"})
      yaml += fmt::format("  - {{ends: [n{0}/{1}, n{0}/pcie0], kind: pcie, bandwidth_GBps: {2}, latency_us: {3}}}\n", n,
                          end, f.pcie_GBps, f.pcie_us);
    yaml += fmt::format("  - {{ends: [n{0}/nic0, tor], kind: network, bandwidth_GBps: {1}, latency_us: {2}}}\n", n,
                        f.net_GBps, f.net_us);
  }
  return yaml;
}

// A plan that only places rank r on GPU gpus[r] (GPU r by default) and declares `groups`.
inline Plan placement_plan(const Topology& topology, int ranks, std::vector<CommGroup> groups = {},
                           std::vector<int> gpus = {}) {
  Plan plan;
  plan.topology_name = topology.name();
  plan.topology_hash = topology.content_hash();
  plan.topology_nodes = topology.num_nodes();
  plan.workload.dtype = DType::BF16;
  for (int r = 0; r < ranks; ++r) {
    int gpu = gpus.empty() ? r : gpus[size_t(r)];
    plan.ranks.push_back({r, gpu, topology.node_of_gpu(gpu), topology.local_gpu(gpu), ""});
  }
  plan.groups = std::move(groups);
  return plan;
}

// Schedule skeleton with one empty program per rank.
inline Schedule empty_schedule(int ranks) {
  Schedule schedule;
  for (int r = 0; r < ranks; ++r)
    schedule.ranks.push_back(RankProgram{});
  for (int r = 0; r < ranks; ++r)
    schedule.ranks[size_t(r)].rank = r;
  return schedule;
}

inline Op send_op(int peer, int tag, int64_t bytes, int step, Phase phase = Phase::Forward) {
  Op op;
  op.kind = OpKind::Send;
  op.stream = Stream::Send;
  op.phase = phase;
  op.peer = peer;
  op.tag = tag;
  op.bytes = bytes;
  op.step = step;
  op.fields = field_bit(Field::K) | field_bit(Field::V);
  return op;
}

inline Op recv_op(int peer, int tag, int64_t bytes, int step, Phase phase = Phase::Forward) {
  Op op = send_op(peer, tag, bytes, step, phase);
  op.kind = OpKind::Recv;
  op.stream = Stream::Recv;
  return op;
}

// An attention block of `flops` FLOPs over `tokens` x `tokens` (the shape only picks the
// calibration point; the test GPU matches none).
inline Op compute_op(Schedule& schedule, double flops, int step, Phase phase = Phase::Forward, int64_t tokens = 1024) {
  Op op;
  op.kind = phase == Phase::Forward ? OpKind::AttnFwd : OpKind::AttnBwd;
  op.stream = Stream::Compute;
  op.phase = phase;
  op.step = step;
  op.flops = flops;
  op.tok[0] = op.tok[1] = schedule.tokens.intern({{0, tokens}});
  return op;
}

// Calibration whose only rule is `efficiency` x peak for every block (the test GPU matches no
// point), with the given compute speed kept under communication.
inline Calibration flat_calibration(double efficiency, double slowdown = 1.0) {
  return Calibration::parse(fmt::format("keep_defaults: false\nfallback_efficiency: {}\n"
                                        "compute_slowdown_under_comm: {}\n",
                                        efficiency, slowdown),
                            "test-calibration.yaml");
}

// Llama-3-8B with one sequence of `seq` tokens.
inline Workload test_workload(int64_t seq, bool causal) {
  WorkloadOverrides overrides;
  overrides.seq = seq;
  overrides.batch = 1;
  overrides.causal = causal;
  return load_workload("llama-3-8b", overrides);
}

// The first feasible sequence-parallel plan of `kind` (that `pick` accepts) on `ranks` GPUs.
inline Plan plan_for(StrategyKind kind, const Workload& workload, const Topology& topology, int ranks,
                     const std::function<bool(const StrategyParams&)>& pick = {}) {
  for (const StrategyParams& params : enumerate_params(kind, workload, ranks)) {
    if (params.data_parallel != 1 || !check_feasible(kind, params, workload, ranks).ok) continue;
    if (pick && !pick(params)) continue;
    return make_plan(kind, params, workload, topology, ranks);
  }
  ADD_FAILURE() << "no feasible " << to_string(kind) << " plan on " << ranks << " ranks";
  return {};
}

}  // namespace wallfacer::test
