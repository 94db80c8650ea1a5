// Internal to the topology importers: the one-node description both readers (import_nccl.cpp
// for NCCL's XML, import_smi.cpp for `nvidia-smi topo -m`) fill in, and the writer
// (import_emit.cpp) that turns it into a compact-form topology file with a source per number.
#pragma once

#include <string>
#include <vector>

#include <wallfacer/topology/import.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::detail {

// A number and where it came from: "[C] FILE line 12: link_speed 16.0 GT/s, link_width 16" or
// "[I] assumed ...". Sources become the file's `sources:` entries.
struct Sourced {
  double value = 0;
  std::string source;
};

// Where a GPU or NIC hangs in the PCIe tree: below switch `pcie_switch`, or on a root port of
// CPU `cpu` when pcie_switch is -1.
struct PcieAttach {
  int cpu = 0;
  int pcie_switch = -1;
  Sourced link_GBps;  // the device's own link to its parent
};

struct ImportedSwitch {
  int cpu = 0;
  int parent = -1;  // -1: on the CPU
  Sourced uplink_GBps;
  std::string label;  // "busid 0000:02:00.0" or "switch of GPU0, NIC0"
};

struct ImportedGpu {
  PcieAttach at;
  std::string label;
};

struct ImportedNic {
  PcieAttach at;
  std::string label;
  Sourced rate_Gbps;
};

// GPU-to-GPU links: none, every GPU on an NVSwitch fabric, or point-to-point NVLinks.
struct ImportedNvlink {
  enum class Kind { None, NvSwitch, Mesh } kind = Kind::None;
  Sourced switch_GBps;  // per GPU, NvSwitch
  Sourced link_GBps;    // per link, Mesh
  struct Pair {
    int a = 0, b = 0;  // GPU indices; b = -1 - cpu for an NVLink to a CPU
    int links = 1;
  };
  std::vector<Pair> pairs;
};

struct ImportedNode {
  std::string input_label;  // e.g. "NCCL topology XML azure-ndv4-topo.xml"
  GpuModel gpu;
  std::string gpu_source;  // citation of the GPU's numbers
  int cpus = 1;
  std::string cpu_model;
  Sourced cpu_link_GBps;  // between sockets
  std::vector<ImportedSwitch> switches;
  std::vector<ImportedGpu> gpus;
  std::vector<ImportedNic> nics;
  ImportedNvlink nvlink;
  std::vector<std::string> assumptions;
};

// The `gpu` block of topology preset `preset` (its numbers and their citations).
void use_preset_gpu(const std::string& preset, const std::string& why, ImportedNode& node);
// PCIe rate per direction in GB/s of `lanes` lanes at `gts` GT/s (the line code of the
// generation: 8b/10b up to 5 GT/s, 128b/130b after, FLIT at 64 GT/s); 0 for an unknown speed.
double pcie_GBps(double gts, int lanes);

std::vector<std::string> network_names();

// The compact-form file for `node` on `options` (nodes, network, name); checks it loads.
ImportResult write_compact_topology(const ImportedNode& node, const std::string& source, const ImportOptions& options);

}  // namespace wallfacer::detail
