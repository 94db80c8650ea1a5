// The cluster model: GPUs, CPUs, PCIe switches, NVSwitches, NICs and network switches joined by
// links with a bandwidth per direction and a latency. Loaded from YAML (topologies/*.yaml, see
// docs/formats/topology.md) into a Boost.Graph that stays inside topology.cpp, so Boost's
// templates never reach other components' headers. Routing answers the path between two GPUs,
// its bottleneck bandwidth and latency, and which physical links two paths share.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace wallfacer {

enum class DeviceKind { Gpu, Cpu, PcieSwitch, NvSwitch, Nic, NetSwitch };
enum class LinkKind { NvLink, Pcie, CpuBus, Network };

const char* to_string(DeviceKind kind);
const char* to_string(LinkKind kind);

struct GpuModel {
  std::string name;             // e.g. "H100-SXM5-80GB"
  double peak_bf16_tflops = 0;  // dense; 0 when the GPU has no bf16 (V100)
  double peak_fp16_tflops = 0;  // dense
  double peak_fp8_tflops = 0;   // dense; 0 when not given (no fp8 tensor cores, or unknown)
  // Dense fp32 (FMA units, not tensor cores); 0 when not given: fp32 workloads then use the fp16
  // peak, as before this field existed. A CPU core's FMA width x clock.
  double peak_fp32_tflops = 0;
  double memory_GiB = 0;
  double hbm_GBps = 0;
  std::string source;  // where the numbers come from
};

struct Device {
  std::string name;  // unique, e.g. "n3/gpu5", "n3/nic5", "leaf2", "spine0"
  DeviceKind kind = DeviceKind::Gpu;
  int node = -1;         // node index, -1 for fabric devices outside any node
  int local_index = -1;  // index among devices of the same kind inside the node
};

// A physical link. Full-duplex links carry bandwidth_GBps in each direction at once; a
// half-duplex link shares it between directions.
struct Link {
  int a = -1, b = -1;  // device ids
  LinkKind kind = LinkKind::NvLink;
  double bandwidth_GBps = 0;  // per direction, GB/s = 1e9 bytes/s
  double latency_us = 0;
  bool full_duplex = true;
};

// One traversal of a link. Two hops contend when they use the same resource: the same link in
// the same direction when full duplex, the same link in any direction when half duplex.
struct Hop {
  int link = -1;
  bool forward = true;  // true when traversed from Link::a to Link::b
  bool operator==(const Hop&) const = default;
};
// Integer id of the contended resource of a hop (see Topology::resource_of).
using ResourceId = int64_t;

struct Route {
  int src_gpu = -1, dst_gpu = -1;
  std::vector<int> devices;    // device ids from source GPU to destination GPU
  std::vector<Hop> hops;       // devices.size() - 1 hops
  double bottleneck_GBps = 0;  // min link bandwidth along the route; +inf for src == dst
  double latency_us = 0;       // sum of link latencies
};

// The network between nodes, as described in the file (for display and the simulator).
struct FabricInfo {
  std::string type;  // "single_switch", "fat_tree", "rail_optimized", "none", "explicit"
  double oversubscription = 1.0;
  // How a flow picks among equal-cost spines: "ecmp" (a hash of the GPU pair, as Ethernet ECMP)
  // or "d-mod-k" (the destination's port on its leaf modulo the choices, as InfiniBand's
  // fat-tree routing in OpenSM).
  std::string routing = "ecmp";
};

class Topology {
 public:
  Topology();
  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  // Parses YAML text. `source` names the file in error messages. `nodes_override` scales the
  // node count of a compact-form file (an InputError for explicit files). Throws InputError
  // with "FILE:LINE: error: ..." for every invalid input.
  static Topology parse(const std::string& yaml_text, const std::string& source,
                        std::optional<int> nodes_override = std::nullopt);
  // Loads a file path, or an embedded preset name such as "dgx-h100" (see preset_names()).
  static Topology load(const std::string& path_or_preset, std::optional<int> nodes_override = std::nullopt);
  static std::vector<std::string> preset_names();

  const std::string& name() const;
  const std::string& description() const;
  const GpuModel& gpu() const;
  const FabricInfo& fabric() const;
  // What the file left out and the loader assumed, one sentence each (empty for a complete file):
  // a node without a `pcie` section gets an assumed PCIe layout (docs/formats/topology.md).
  const std::vector<std::string>& assumptions() const;
  int num_nodes() const;
  int gpus_per_node() const;  // max over nodes
  int num_gpus() const;

  const std::vector<Device>& devices() const;
  const std::vector<Link>& links() const;
  // Device id of global GPU index g (GPUs are numbered node-major: node 0's GPUs first).
  int gpu_device(int gpu) const;
  int node_of_gpu(int gpu) const;
  int local_gpu(int gpu) const;
  // The NIC this GPU sends inter-node traffic through (nearest by PCIe); -1 when none.
  int nic_of_gpu(int gpu) const;
  // Device id by name ("n3/gpu5", "leaf0.rail3"); -1 when there is none.
  int device_id(const std::string& name) const;

  // Shortest route by latency then hop count; between equal-cost fabric paths the fabric's
  // routing picks one (FabricInfo::routing). Cached; may be called from several threads at once.
  const Route& route(int src_gpu, int dst_gpu) const;
  // Contended resource of a hop: link*2 + direction for full duplex, link*2 for half duplex.
  ResourceId resource_of(const Hop& hop) const;
  double resource_bandwidth_GBps(ResourceId id) const;
  // Resources two routes both use.
  std::vector<ResourceId> shared_resources(const Route& a, const Route& b) const;

  // Aggregate bandwidth across the worst cut that splits the nodes in two equal halves,
  // GB/s per direction (for one node: across the worst halving of its GPUs, over the node's
  // own links). Exact over all halvings when there are at most 128, else the contiguous one.
  double bisection_bandwidth_GBps() const;

  // 64-bit FNV-1a (16 hex digits) of the canonical description (independent of comments, key order and whitespace;
  // changes with the node count). Plans record it.
  const std::string& content_hash() const;
  // The source name (a file path or a preset's name) and the text it was parsed from.
  const std::string& source() const;
  const std::string& source_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- figures for `wallfacer topo show` and the GUI ----------------------------------------------

// Links grouped by kind and bandwidth.
struct LinkClass {
  LinkKind kind = LinkKind::NvLink;
  double bandwidth_GBps = 0;
  double latency_us = 0;  // of the first link of the class
  int count = 0;
};
// A GPU pair's route figures.
struct PairFigure {
  int src_gpu = -1, dst_gpu = -1;
  double bandwidth_GBps = 0;  // route bottleneck
  double latency_us = 0;
};
struct TopologySummary {
  std::vector<std::pair<DeviceKind, int>> device_counts;  // kinds present, in enum order
  std::vector<LinkClass> link_classes;                    // by kind, then bandwidth
  // Best (highest bandwidth, then lowest latency) and worst GPU pairs inside one node and across
  // nodes; absent when there is no such pair. Pairs inside node 0 (inside every node for an
  // explicit-form file, whose nodes may differ); across nodes, all node pairs up to 16 nodes,
  // else the pairs between nodes 0, 1, K/2 and K-1.
  std::optional<PairFigure> intra_best, intra_worst, inter_best, inter_worst;
  double bisection_GBps = 0;
};
TopologySummary summarize(const Topology& topology);

// A block of the topology's file that holds numbers with units (bandwidths, latencies, peaks,
// memory) but no `source`, neither its own nor one of a block around it.
struct UnsourcedBlock {
  std::string path;  // "node.nics", "network"
  int line = 0;      // 1-based, in the file
};
std::vector<UnsourcedBlock> unsourced_blocks(const Topology& topology);

}  // namespace wallfacer
