// Topologies from what users already have: NCCL's topology XML (NCCL_TOPO_FILE or
// NCCL_TOPO_DUMP_FILE) and the matrix `nvidia-smi topo -m` prints. Each describes one node; the
// importer stamps it out `nodes` times on a network preset or a network of the user's, and writes
// a compact-form topology file (docs/formats/topology.md) whose sources say which numbers came
// from the input and which were assumed (docs/topology-import.md).
#pragma once

#include <string>
#include <vector>

namespace wallfacer {

struct ImportOptions {
  std::string name;     // topology name; empty: derived from the input's file name
  int nodes = 1;        // copies of the node
  std::string network;  // a network preset (network_preset_names) or a YAML file holding a
                        // `network:` mapping; empty: none for one node, one switch for more
  std::string gpu;      // a topology preset whose `gpu` block to use; empty: from the input
  double nic_Gbps = 0;  // NIC rate when the input has none (0: the network preset's)
};

struct ImportResult {
  std::string yaml;                      // a compact-form topology file
  std::vector<std::string> assumptions;  // what the input did not say, one sentence each
};

// Throws InputError naming the file, the line, the element or attribute, what was expected and
// what was found.
ImportResult import_nccl_topology_xml(const std::string& xml_text, const std::string& source,
                                      const ImportOptions& options);
ImportResult import_nvidia_smi_topology(const std::string& text, const std::string& source,
                                        const ImportOptions& options);

// Network presets for ImportOptions::network: "ib-ndr", "ib-hdr", "roce", "single-switch", ...
std::vector<std::string> network_preset_names();

}  // namespace wallfacer
