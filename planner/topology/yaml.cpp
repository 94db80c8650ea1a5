// Reading topology files: the parts both forms share (gpu, sources, rates, index lists) and the
// compact form's node description, which is stamped out once per node. The network between
// nodes is in yaml_network.cpp, the explicit form in yaml_explicit.cpp.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <tuple>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/yaml_util.hpp>
#include "topology_impl.hpp"

namespace wallfacer::detail {

// ---- shared readers ----------------------------------------------------------------------------

YAML::Node read_section(const std::string& source, const YAML::Node& parent, const std::string& key,
                        std::initializer_list<std::string_view> allowed) {
  const YAML::Node node = parent[key];
  if (!node.IsDefined() || node.IsNull()) yaml::fail(source, parent, fmt::format("missing required field '{}'", key));
  yaml::check_keys(source, node, allowed, fmt::format("'{}'", key));
  return node;
}

int read_int_in(const std::string& source, const YAML::Node& parent, const std::string& key, int64_t minimum,
                int64_t maximum) {
  const int64_t value = yaml::get_int(source, parent, key);
  if (value < minimum)
    yaml::fail(source, parent[key], fmt::format("'{}' must be at least {}, got {}", key, minimum, value));
  if (value > maximum)
    yaml::fail(source, parent[key], fmt::format("'{}' must be at most {}, got {}", key, maximum, value));
  return static_cast<int>(value);
}

double read_number_at_least(const std::string& source, const YAML::Node& parent, const std::string& key,
                            double minimum) {
  const double value = yaml::get_double(source, parent, key);
  if (value < minimum)
    yaml::fail(source, parent[key], fmt::format("'{}' must be at least {}, got {}", key, minimum, value));
  return value;
}

void read_source_field(const std::string& source, const YAML::Node& parent) {
  const YAML::Node node = parent["source"];
  if (!node.IsDefined()) return;
  if (!node.IsScalar() || node.Scalar().empty()) yaml::fail(source, node, "'source' must be a citation string");
}

void read_sources(const std::string& source, const YAML::Node& root) {
  const YAML::Node sources = root["sources"];
  if (!sources.IsDefined()) return;
  if (!sources.IsMap()) yaml::fail(source, sources, "'sources' must be a mapping of short names to citations");
  for (const auto& entry : sources) {
    if (!entry.second.IsScalar() || entry.second.Scalar().empty())
      yaml::fail(source, entry.second, fmt::format("source '{}' must be a citation string", entry.first.Scalar()));
  }
}

double read_rate(const std::string& source, const YAML::Node& parent, std::string_view what) {
  const bool has_bandwidth = parent["bandwidth_GBps"].IsDefined();
  const bool has_rate = parent["rate_Gbps"].IsDefined();
  if (has_bandwidth && has_rate)
    yaml::fail(source, parent, fmt::format("give the {} as 'bandwidth_GBps' or 'rate_Gbps', not both", what));
  if (!has_bandwidth && !has_rate)
    yaml::fail(source, parent, fmt::format("missing the {}: give 'bandwidth_GBps' or 'rate_Gbps'", what));
  if (has_bandwidth) return yaml::get_positive(source, parent, "bandwidth_GBps");
  return yaml::get_positive(source, parent, "rate_Gbps") / 8.0;
}

static int checked_index(const std::string& source, const YAML::Node& node, int limit, std::string_view label) {
  int64_t value = 0;
  if (!node.IsScalar() || !YAML::convert<int64_t>::decode(node, value))
    yaml::fail(
        source, node,
        fmt::format("{} index must be an integer, got '{}'", label, node.IsScalar() ? node.Scalar() : "a non-scalar"));
  if (value < 0 || value >= limit) {
    const std::string has = limit == 0   ? fmt::format("the node has no {}s", label)
                            : limit == 1 ? fmt::format("the node has 1 {} (0)", label)
                                         : fmt::format("the node has {} {}s (0..{})", limit, label, limit - 1);
    yaml::fail(source, node, fmt::format("{} index {} is out of range: {}", label, value, has));
  }
  return static_cast<int>(value);
}

int read_index(const std::string& source, const YAML::Node& parent, const std::string& key, int limit,
               std::string_view kind_label) {
  const YAML::Node node = parent[key];
  if (!node.IsDefined()) yaml::fail(source, parent, fmt::format("missing required field '{}'", key));
  return checked_index(source, node, limit, kind_label);
}

std::vector<int> read_index_list(const std::string& source, const YAML::Node& parent, const std::string& key, int limit,
                                 std::string_view kind_label) {
  std::vector<int> out;
  const YAML::Node list = parent[key];
  if (!list.IsDefined()) return out;
  yaml::expect_sequence(source, list, fmt::format("'{}'", key));
  for (const auto& element : list)
    out.push_back(checked_index(source, element, limit, kind_label));
  return out;
}

GpuModel read_gpu_model(const std::string& source, const YAML::Node& root) {
  const YAML::Node node = read_section(source, root, "gpu",
                                       {"model", "peak_bf16_tflops", "peak_fp16_tflops", "peak_fp8_tflops",
                                        "peak_fp32_tflops", "memory_GiB", "hbm_GBps", "source"});
  // A device with an fp32 peak (a CPU core) may have no fp16 rate; a GPU always gives one.
  if (node["peak_fp32_tflops"].IsDefined())
    yaml::require_keys(source, node, {"model", "peak_bf16_tflops", "memory_GiB", "hbm_GBps"}, "'gpu'");
  else
    yaml::require_keys(source, node, {"model", "peak_bf16_tflops", "peak_fp16_tflops", "memory_GiB", "hbm_GBps"},
                       "'gpu'");
  GpuModel gpu;
  gpu.name = yaml::get_string(source, node, "model");
  if (gpu.name.empty()) yaml::fail(source, node["model"], "'model' must not be empty");
  gpu.peak_bf16_tflops = read_number_at_least(source, node, "peak_bf16_tflops", 0.0);
  if (node["peak_fp32_tflops"].IsDefined()) gpu.peak_fp32_tflops = yaml::get_positive(source, node, "peak_fp32_tflops");
  if (node["peak_fp16_tflops"].IsDefined() || gpu.peak_fp32_tflops <= 0)
    gpu.peak_fp16_tflops = yaml::get_positive(source, node, "peak_fp16_tflops");
  if (node["peak_fp8_tflops"].IsDefined()) gpu.peak_fp8_tflops = yaml::get_positive(source, node, "peak_fp8_tflops");
  gpu.memory_GiB = yaml::get_positive(source, node, "memory_GiB");
  gpu.hbm_GBps = yaml::get_positive(source, node, "hbm_GBps");
  read_source_field(source, node);
  gpu.source = yaml::get_string(source, node, "source", "");
  return gpu;
}

namespace {

// ---- the compact form's node -------------------------------------------------------------------

struct LocalRef {
  DeviceKind kind = DeviceKind::Gpu;
  int index = 0;
};
struct SpecLink {
  LocalRef a, b;
  LinkKind kind = LinkKind::Pcie;
  double bandwidth_GBps = 0;
  double latency_us = 0;
  bool full_duplex = true;
  int line = 0;
};

// One node as described under `node:`, in local indices; every node is a copy.
struct NodeSpec {
  int gpus = 0;
  int cpus = 1;
  int pcie_switches = 0;
  bool nvswitch = false;
  int nics = 0;
  double nic_GBps = 0;
  std::vector<SpecLink> links;
  std::vector<int> gpu_host_line;  // line placing each GPU under PCIe, 0 while none
  std::vector<int> nic_host_line;
  std::vector<bool> gpu_nvlink_to_cpu;
  std::vector<int> switch_cpu;           // socket above each PCIe switch
  std::vector<std::string> assumptions;  // what a minimal file left out and the reader filled in
};

void read_cpus(const std::string& source, const YAML::Node& node, NodeSpec& spec) {
  const YAML::Node cpus = node["cpus"];
  if (!cpus.IsDefined()) return;
  yaml::check_keys(source, cpus, {"count", "model", "link", "source"}, "'cpus'");
  read_source_field(source, cpus);
  spec.cpus = read_int_in(source, cpus, "count", 1, kMaxDevicesPerNode);
  if (spec.cpus > 16)
    yaml::fail(source, cpus["count"], fmt::format("'count' must be at most 16 CPU sockets, got {}", spec.cpus));
  if (spec.cpus == 1) return;
  const YAML::Node link =
      read_section(source, cpus, "link", {"bandwidth_GBps", "rate_Gbps", "latency_us", "full_duplex", "source"});
  read_source_field(source, link);
  const double bandwidth = read_rate(source, link, "inter-socket bandwidth");
  const double latency = yaml::get_positive(source, link, "latency_us");
  const bool duplex = yaml::get_bool(source, link, "full_duplex", true);
  for (int a = 0; a < spec.cpus; ++a)
    for (int b = a + 1; b < spec.cpus; ++b)
      spec.links.push_back({{DeviceKind::Cpu, a},
                            {DeviceKind::Cpu, b},
                            LinkKind::CpuBus,
                            bandwidth,
                            latency,
                            duplex,
                            yaml::line_of(link)});
}

void read_nics(const std::string& source, const YAML::Node& node, NodeSpec& spec) {
  const YAML::Node nics = node["nics"];
  if (!nics.IsDefined()) return;
  yaml::check_keys(source, nics, {"count", "rate_Gbps", "bandwidth_GBps", "source"}, "'nics'");
  read_source_field(source, nics);
  spec.nics = read_int_in(source, nics, "count", 1, kMaxDevicesPerNode);
  if (spec.nics > 64)
    yaml::fail(source, nics["count"], fmt::format("'count' must be at most 64 NICs, got {}", spec.nics));
  spec.nic_GBps = read_rate(source, nics, "NIC rate");
  spec.nic_host_line.assign(spec.nics, 0);
}

void mark_placed(const std::string& source, const YAML::Node& where, std::vector<int>& placed_line, int index,
                 std::string_view label) {
  if (placed_line[index] != 0)
    yaml::fail(source, where,
               fmt::format("{} {} is placed twice (first at line {})", label, index, placed_line[index]));
  placed_line[index] = std::max(1, yaml::line_of(where));
}

// `gpus:` and `nics:` of one PCIe switch or root port, hung below `parent`.
void read_pcie_children(const std::string& source, const YAML::Node& entry, LocalRef parent, double bandwidth,
                        double nic_bandwidth, double latency, NodeSpec& spec) {
  const YAML::Node gpus = entry["gpus"];
  const YAML::Node nics = entry["nics"];
  const std::vector<int> gpu_list = read_index_list(source, entry, "gpus", spec.gpus, "GPU");
  const std::vector<int> nic_list = read_index_list(source, entry, "nics", spec.nics, "NIC");
  for (size_t i = 0; i < gpu_list.size(); ++i) {
    mark_placed(source, gpus[i], spec.gpu_host_line, gpu_list[i], "GPU");
    spec.links.push_back(
        {{DeviceKind::Gpu, gpu_list[i]}, parent, LinkKind::Pcie, bandwidth, latency, true, yaml::line_of(gpus[i])});
  }
  for (size_t i = 0; i < nic_list.size(); ++i) {
    mark_placed(source, nics[i], spec.nic_host_line, nic_list[i], "NIC");
    spec.links.push_back(
        {{DeviceKind::Nic, nic_list[i]}, parent, LinkKind::Pcie, nic_bandwidth, latency, true, yaml::line_of(nics[i])});
  }
}

// One `switches:` entry: under CPU `cpu`, or under an earlier switch `parent` (a PCIe tree).
void read_pcie_switch(const std::string& source, const YAML::Node& entry, double bandwidth, double latency,
                      NodeSpec& spec) {
  yaml::check_keys(
      source, entry,
      {"cpu", "parent", "gpus", "nics", "bandwidth_GBps", "nic_bandwidth_GBps", "uplink_bandwidth_GBps", "source"},
      "a PCIe switch");
  read_source_field(source, entry);
  const int index = spec.pcie_switches;
  int cpu = entry["cpu"].IsDefined() ? read_index(source, entry, "cpu", spec.cpus, "CPU") : 0;
  LocalRef up{DeviceKind::Cpu, cpu};
  if (entry["parent"].IsDefined()) {
    if (index == 0) yaml::fail(source, entry["parent"], "the first PCIe switch has no earlier switch to hang from");
    const int64_t parent64 = yaml::get_int(source, entry, "parent");
    if (parent64 < 0 || parent64 >= index)
      yaml::fail(source, entry["parent"],
                 fmt::format("'parent' must name an earlier switch of the list (0..{}), got {}", index - 1, parent64));
    const int parent = static_cast<int>(parent64);
    if (entry["cpu"].IsDefined() && cpu != spec.switch_cpu[parent])
      yaml::fail(source, entry["cpu"],
                 fmt::format("'cpu' {} differs from the socket of parent switch {} (CPU {})", cpu, parent,
                             spec.switch_cpu[parent]));
    cpu = spec.switch_cpu[parent];
    up = {DeviceKind::PcieSwitch, parent};
  }
  const double own = yaml::get_positive(source, entry, "bandwidth_GBps", bandwidth);
  const double nic_own = yaml::get_positive(source, entry, "nic_bandwidth_GBps", own);
  const double uplink = yaml::get_positive(source, entry, "uplink_bandwidth_GBps", own);
  const LocalRef self{DeviceKind::PcieSwitch, spec.pcie_switches++};
  spec.switch_cpu.push_back(cpu);
  spec.links.push_back({self, up, LinkKind::Pcie, uplink, latency, true, yaml::line_of(entry)});
  read_pcie_children(source, entry, self, own, nic_own, latency, spec);
}

void read_pcie(const std::string& source, const YAML::Node& node, NodeSpec& spec) {
  const YAML::Node pcie = node["pcie"];
  if (!pcie.IsDefined()) return;
  yaml::check_keys(source, pcie, {"bandwidth_GBps", "latency_us", "switches", "root_ports", "source"}, "'pcie'");
  read_source_field(source, pcie);
  const double bandwidth = yaml::get_positive(source, pcie, "bandwidth_GBps");
  const double latency = yaml::get_positive(source, pcie, "latency_us");
  if (const YAML::Node switches = pcie["switches"]; switches.IsDefined()) {
    yaml::expect_sequence(source, switches, "'switches'");
    for (const auto& entry : switches)
      read_pcie_switch(source, entry, bandwidth, latency, spec);
  }
  if (const YAML::Node ports = pcie["root_ports"]; ports.IsDefined()) {
    yaml::expect_sequence(source, ports, "'root_ports'");
    for (const auto& entry : ports) {
      yaml::check_keys(source, entry, {"cpu", "gpus", "nics", "bandwidth_GBps", "nic_bandwidth_GBps", "source"},
                       "a PCIe root port");
      read_source_field(source, entry);
      const int cpu = entry["cpu"].IsDefined() ? read_index(source, entry, "cpu", spec.cpus, "CPU") : 0;
      const double own = yaml::get_positive(source, entry, "bandwidth_GBps", bandwidth);
      const double nic_own = yaml::get_positive(source, entry, "nic_bandwidth_GBps", own);
      read_pcie_children(source, entry, {DeviceKind::Cpu, cpu}, own, nic_own, latency, spec);
    }
  }
}

// One `links:` entry of an NVLink mesh: {gpus: [A, B], links: N} or {gpu: A, cpu: C, links: N}.
void read_nvlink_entry(const std::string& source, const YAML::Node& entry, double per_link, double latency,
                       std::map<std::tuple<int, int, int, int>, int>& seen, NodeSpec& spec) {
  yaml::check_keys(source, entry, {"gpus", "gpu", "cpu", "links", "source"}, "an NVLink entry");
  read_source_field(source, entry);
  const int count = entry["links"].IsDefined() ? read_int_in(source, entry, "links", 1, kMaxParallelLinks) : 1;
  LocalRef a, b;
  if (entry["gpus"].IsDefined() && !entry["gpu"].IsDefined() && !entry["cpu"].IsDefined()) {
    const std::vector<int> pair = read_index_list(source, entry, "gpus", spec.gpus, "GPU");
    if (pair.size() != 2)
      yaml::fail(source, entry["gpus"], fmt::format("'gpus' must list 2 GPUs, got {}", pair.size()));
    if (pair[0] == pair[1]) yaml::fail(source, entry, fmt::format("NVLink joins GPU {} to itself", pair[0]));
    a = {DeviceKind::Gpu, std::min(pair[0], pair[1])};
    b = {DeviceKind::Gpu, std::max(pair[0], pair[1])};
  } else if (entry["gpu"].IsDefined() && entry["cpu"].IsDefined() && !entry["gpus"].IsDefined()) {
    a = {DeviceKind::Gpu, read_index(source, entry, "gpu", spec.gpus, "GPU")};
    b = {DeviceKind::Cpu, read_index(source, entry, "cpu", spec.cpus, "CPU")};
    spec.gpu_nvlink_to_cpu[a.index] = true;
  } else {
    yaml::fail(source, entry, "an NVLink entry needs 'gpus: [A, B]', or 'gpu' and 'cpu'");
  }
  const auto key = std::make_tuple(static_cast<int>(a.kind), a.index, static_cast<int>(b.kind), b.index);
  const auto [it, fresh] = seen.emplace(key, yaml::line_of(entry));
  if (!fresh) {
    const std::string what = b.kind == DeviceKind::Gpu ? fmt::format("GPU {} and GPU {}", a.index, b.index)
                                                       : fmt::format("GPU {} and CPU {}", a.index, b.index);
    yaml::fail(source, entry, fmt::format("NVLink between {} is listed twice (first at line {})", what, it->second));
  }
  spec.links.push_back({a, b, LinkKind::NvLink, per_link * count, latency, true, yaml::line_of(entry)});
}

void read_gpu_fabric(const std::string& source, const YAML::Node& node, NodeSpec& spec) {
  const YAML::Node fabric = node["gpu_fabric"];
  if (!fabric.IsDefined()) return;
  yaml::expect_map(source, fabric, "'gpu_fabric'");
  const std::string type = yaml::get_string(source, fabric, "type");
  if (type == "none") {
    yaml::check_keys(source, fabric, {"type", "source"}, "'gpu_fabric'");
  } else if (type == "nvswitch") {
    yaml::check_keys(source, fabric, {"type", "bandwidth_GBps", "latency_us", "source"}, "'gpu_fabric'");
    read_source_field(source, fabric);
    const double bandwidth = yaml::get_positive(source, fabric, "bandwidth_GBps");
    const double latency = yaml::get_positive(source, fabric, "latency_us");
    spec.nvswitch = true;
    for (int g = 0; g < spec.gpus; ++g)
      spec.links.push_back({{DeviceKind::Gpu, g},
                            {DeviceKind::NvSwitch, 0},
                            LinkKind::NvLink,
                            bandwidth,
                            latency,
                            true,
                            yaml::line_of(fabric)});
  } else if (type == "nvlink_mesh") {
    yaml::check_keys(source, fabric, {"type", "link_bandwidth_GBps", "latency_us", "links", "source"}, "'gpu_fabric'");
    read_source_field(source, fabric);
    const double per_link = yaml::get_positive(source, fabric, "link_bandwidth_GBps");
    const double latency = yaml::get_positive(source, fabric, "latency_us");
    const YAML::Node links = fabric["links"];
    if (!links.IsDefined()) yaml::fail(source, fabric, "missing required field 'links'");
    yaml::expect_sequence(source, links, "'links'");
    std::map<std::tuple<int, int, int, int>, int> seen;  // (kind, index) of both ends -> line
    for (const auto& entry : links)
      read_nvlink_entry(source, entry, per_link, latency, seen, spec);
  } else {
    yaml::fail(source, fabric["type"],
               fmt::format("unknown gpu_fabric type '{}' (expected nvswitch, nvlink_mesh or none)", type));
  }
}

// PCIe generation assumed for a node without a `pcie` section, from the GPU's generation: fp8
// tensor cores came with PCIe Gen5 parts (H100), bf16 with Gen4 (A100), older GPUs sit on Gen3.
std::pair<double, const char*> assumed_pcie_rate(const GpuModel& gpu) {
  if (gpu.peak_fp8_tflops > 0) return {63.0, "Gen5 x16 (63 GB/s)"};
  if (gpu.peak_bf16_tflops > 0) return {31.5, "Gen4 x16 (31.5 GB/s)"};
  return {15.75, "Gen3 x16 (15.75 GB/s)"};
}

// The minimal form: GPUs, their NVLink fabric and NICs, no PCIe layer. Lays out the usual server
// design: NICs spread evenly, each on a PCIe switch with an equal share of the GPUs (one GPU and
// one NIC per switch on 8-GPU, 8-NIC boards), sockets taking equal runs of switches.
void assume_pcie(const GpuModel& gpu, NodeSpec& spec) {
  const auto [rate, rate_text] = assumed_pcie_rate(gpu);
  constexpr double kLatency = 0.5;  // as the presets: half of NCCL's 1.0 us PCIe hop per link
  const int groups = spec.nics > 0 && spec.gpus % spec.nics == 0 ? spec.nics : 1;
  const int gpus_per_group = spec.gpus / groups;
  const int nics_per_group = spec.nics / groups;
  for (int s = 0; s < groups; ++s) {
    const int cpu = s * spec.cpus / groups;
    const LocalRef self{DeviceKind::PcieSwitch, spec.pcie_switches++};
    spec.switch_cpu.push_back(cpu);
    spec.links.push_back({self, {DeviceKind::Cpu, cpu}, LinkKind::Pcie, rate, kLatency, true, 0});
    for (int g = s * gpus_per_group; g < (s + 1) * gpus_per_group; ++g) {
      if (spec.gpu_host_line[g] != 0 || spec.gpu_nvlink_to_cpu[g]) continue;
      spec.gpu_host_line[g] = -1;
      spec.links.push_back({{DeviceKind::Gpu, g}, self, LinkKind::Pcie, rate, kLatency, true, 0});
    }
    for (int n = s * nics_per_group; n < (s + 1) * nics_per_group; ++n) {
      spec.nic_host_line[n] = -1;
      spec.links.push_back({{DeviceKind::Nic, n}, self, LinkKind::Pcie, rate, kLatency, true, 0});
    }
  }
  spec.assumptions.push_back(fmt::format(
      "no 'pcie' section: assumed {} PCIe switch{} ({} GPU{} and {} NIC{} each) under {} CPU socket{}, every link "
      "PCIe {} with 0.5 us latency, from the GPU generation",
      groups, groups == 1 ? "" : "es", gpus_per_group, gpus_per_group == 1 ? "" : "s", nics_per_group,
      nics_per_group == 1 ? "" : "s", spec.cpus, spec.cpus == 1 ? "" : "s", rate_text));
}

NodeSpec read_node(const std::string& source, const YAML::Node& root, const GpuModel& gpu) {
  const YAML::Node node = read_section(source, root, "node", {"gpus", "cpus", "pcie", "gpu_fabric", "nics"});
  NodeSpec spec;
  spec.gpus = read_int_in(source, node, "gpus", 1, kMaxDevicesPerNode);
  if (spec.gpus > 1024)
    yaml::fail(source, node["gpus"], fmt::format("'gpus' must be at most 1024 per node, got {}", spec.gpus));
  spec.gpu_host_line.assign(spec.gpus, 0);
  spec.gpu_nvlink_to_cpu.assign(spec.gpus, false);
  read_cpus(source, node, spec);
  read_nics(source, node, spec);
  read_gpu_fabric(source, node, spec);
  read_pcie(source, node, spec);
  if (!node["pcie"].IsDefined()) assume_pcie(gpu, spec);
  for (int g = 0; g < spec.gpus; ++g) {
    if (spec.gpu_host_line[g] == 0 && !spec.gpu_nvlink_to_cpu[g])
      yaml::fail(source, node["gpus"],
                 fmt::format("GPU {} is not attached to a CPU: list it under a PCIe switch or root port, or give it "
                             "an NVLink to a CPU",
                             g));
  }
  for (int n = 0; n < spec.nics; ++n) {
    if (spec.nic_host_line[n] == 0)
      yaml::fail(source, node["nics"],
                 fmt::format("NIC {} is not placed: list it under a PCIe switch or root port", n));
  }
  return spec;
}

// Local device order inside a node: GPUs, CPUs, PCIe switches, the NVSwitch, NICs.
int local_offset(const NodeSpec& spec, DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Gpu:
      return 0;
    case DeviceKind::Cpu:
      return spec.gpus;
    case DeviceKind::PcieSwitch:
      return spec.gpus + spec.cpus;
    case DeviceKind::NvSwitch:
      return spec.gpus + spec.cpus + spec.pcie_switches;
    case DeviceKind::Nic:
      return spec.gpus + spec.cpus + spec.pcie_switches + (spec.nvswitch ? 1 : 0);
    case DeviceKind::NetSwitch:
      break;
  }
  throw std::logic_error("topology: network switch inside a node");
}

void stamp_nodes(const NodeSpec& spec, int num_nodes, int line, TopologyModel& model) {
  struct Group {
    DeviceKind kind;
    int count;
    const char* stem;
  };
  const Group groups[] = {{DeviceKind::Gpu, spec.gpus, "gpu"},
                          {DeviceKind::Cpu, spec.cpus, "cpu"},
                          {DeviceKind::PcieSwitch, spec.pcie_switches, "pcie"},
                          {DeviceKind::NvSwitch, spec.nvswitch ? 1 : 0, "nvswitch"},
                          {DeviceKind::Nic, spec.nics, "nic"}};
  model.nodes.resize(num_nodes);
  for (int n = 0; n < num_nodes; ++n) {
    NodeMembers& members = model.nodes[n];
    members.template_id = 0;
    for (const Group& group : groups) {
      for (int i = 0; i < group.count; ++i) {
        std::string name = group.kind == DeviceKind::NvSwitch ? fmt::format("n{}/{}", n, group.stem)
                                                              : fmt::format("n{}/{}{}", n, group.stem, i);
        members.devices.push_back(model.add_device(std::move(name), group.kind, n, i, line));
      }
    }
    for (const SpecLink& link : spec.links) {
      const int a = members.devices[local_offset(spec, link.a.kind) + link.a.index];
      const int b = members.devices[local_offset(spec, link.b.kind) + link.b.index];
      members.links.push_back(
          model.add_link(a, b, link.kind, link.bandwidth_GBps, link.latency_us, link.full_duplex, link.line));
    }
  }
}

}  // namespace

constexpr int64_t kMaxGpus = 1 << 20;

TopologyModel read_compact_form(const std::string& source, const YAML::Node& root, std::optional<int> nodes_override) {
  yaml::check_keys(source, root, {"name", "description", "sources", "gpu", "nodes", "node", "network"},
                   "a compact-form topology");
  TopologyModel model;
  model.source = source;
  model.name = yaml::get_string(source, root, "name");
  if (model.name.empty()) yaml::fail(source, root["name"], "'name' must not be empty");
  model.description = yaml::get_string(source, root, "description", "");
  read_sources(source, root);
  model.gpu = read_gpu_model(source, root);
  model.gpu_line = yaml::line_of(root["gpu"]);

  NetworkShape shape;
  shape.nodes_line = yaml::line_of(root["nodes"]);
  shape.nodes = root["nodes"].IsDefined() ? read_int_in(source, root, "nodes", 1, kMaxNodes) : 1;
  if (nodes_override) {
    if (*nodes_override > kMaxNodes)
      throw InputError(fmt::format("--nodes must be at most {}, got {}", kMaxNodes, *nodes_override));
    shape.nodes = *nodes_override;
    shape.nodes_from_flag = true;
  }
  const NodeSpec spec = read_node(source, root, model.gpu);
  model.assumptions = spec.assumptions;
  if (static_cast<int64_t>(spec.gpus) * shape.nodes > kMaxGpus)
    throw InputError(source, shape.nodes_line,
                     fmt::format("{} nodes of {} GPUs exceed the limit of {} GPUs", shape.nodes, spec.gpus, kMaxGpus));
  shape.nics_per_node = spec.nics;
  shape.nic_GBps = spec.nic_GBps;
  stamp_nodes(spec, shape.nodes, yaml::line_of(root["node"]), model);
  add_compact_network(source, root, shape, model);
  return model;
}

}  // namespace wallfacer::detail
