// Writes an imported node as a compact-form topology file: every number with a `source` that
// says whether it came from the input ([C]) or was assumed ([I]), the node stamped out
// `--nodes` times on a network preset or the user's network section. The file is loaded once
// before it is returned, so an import never hands out a file the loader refuses.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/yaml_util.hpp>
#include "import_model.hpp"

namespace wallfacer::detail {
namespace {

struct NetworkPreset {
  const char* name;
  const char* body;  // the `network:` mapping, flow style
  double default_Gbps;
  const char* source;
};

// Latencies as in the presets (docs/formats/topology.md): 0.35 us per NIC cable, 0.3 us leaf to
// spine, 10 us per cable for TCP through a cloud VM's virtual NIC.
constexpr NetworkPreset kNetworks[] = {
    {"ib-ndr",
     "{type: rail_optimized, nodes_per_leaf: 32, oversubscription: 1, link_latency_us: 0.35, uplink_latency_us: 0.3, "
     "routing: d-mod-k, source: network}",
     400,
     "[S] NDR InfiniBand, rail-optimised: a Quantum-2 leaf has 64 x 400 Gb/s ports, 32 down and 32 up at full "
     "bisection; routed by destination (OpenSM ftree) as D-mod-k [I]; latencies as the dgx-h100 preset"},
    {"ib-hdr",
     "{type: rail_optimized, nodes_per_leaf: 20, oversubscription: 1, link_latency_us: 0.35, uplink_latency_us: 0.3, "
     "routing: d-mod-k, source: network}",
     200,
     "[S] HDR InfiniBand, rail-optimised: a Quantum leaf has 40 x 200 Gb/s ports, 20 down and 20 up; routed as "
     "D-mod-k [I]; latencies as the dgx-a100 preset"},
    {"roce",
     "{type: fat_tree, leaf_radix: 64, oversubscription: 1, link_latency_us: 0.5, uplink_latency_us: 0.5, routing: "
     "ecmp, source: network}",
     0,
     "[I] RoCE on a two-level Ethernet fat tree of 64-port leaves, non-blocking, ECMP; 0.5 us per cable and switch "
     "(Ethernet switches forward in about half a microsecond [S])"},
    {"single-switch", "{type: single_switch, link_latency_us: 0.35, source: network}", 0,
     "[I] every NIC on one non-blocking switch; 0.35 us per cable as the InfiniBand presets"},
    {"tcp", "{type: single_switch, link_latency_us: 10, source: network}", 0,
     "[I] TCP through virtual NICs on one switch: 10 us per cable, as the a2-highgpu-8g preset"},
};

const NetworkPreset* find_network(const std::string& name) {
  for (const NetworkPreset& preset : kNetworks)
    if (name == preset.name) return &preset;
  return nullptr;
}

// Short names for the `sources:` mapping; one per distinct citation, named after what it backs.
class SourceTable {
 public:
  std::string add(const std::string& stem, const std::string& citation) {
    for (const auto& [key, text] : entries_)
      if (text == citation && key.rfind(stem, 0) == 0) return key;
    const int n = ++counts_[stem];
    std::string key = n == 1 ? stem : fmt::format("{}-{}", stem, n);
    entries_.emplace_back(key, citation);
    return key;
  }
  std::string text() const {
    std::string out = "sources:\n";
    for (const auto& [key, citation] : entries_)
      out += fmt::format("  {}: {}\n", key, quoted(citation));
    return out;
  }
  static std::string quoted(const std::string& text) {
    YAML::Emitter emitter;
    emitter << YAML::DoubleQuoted << text;
    return emitter.c_str();
  }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
  std::map<std::string, int> counts_;
};

std::string number(double value) {
  return fmt::format("{:.6g}", value);
}

std::string index_list(const std::vector<int>& items) {
  return fmt::format("[{}]", fmt::join(items, ", "));
}

// The rate most links of the node have: the `pcie` section's default.
double most_common_pcie_rate(const ImportedNode& node) {
  std::map<double, int> counts;
  for (const ImportedGpu& gpu : node.gpus)
    ++counts[gpu.at.link_GBps.value];
  for (const ImportedSwitch& sw : node.switches)
    ++counts[sw.uplink_GBps.value];
  double best = 0;
  int best_count = -1;
  for (const auto& [rate, count] : counts)
    if (count > best_count) best = rate, best_count = count;
  return best > 0 ? best : 31.5;
}

std::string gpu_fabric_text(const ImportedNode& node, SourceTable& sources) {
  const ImportedNvlink& nvlink = node.nvlink;
  const std::string latency = sources.add(
      "nvlink-latency", "[C/I] NCCL tuning.cc NVLink per-hop latency 0.6 us (LL), split over GPU->NVSwitch->GPU");
  if (nvlink.kind == ImportedNvlink::Kind::NvSwitch) {
    const std::string key = sources.add("nvlink", nvlink.switch_GBps.source);
    return fmt::format("  gpu_fabric: {{type: nvswitch, bandwidth_GBps: {}, latency_us: 0.3, source: \"{}, {}\"}}\n",
                       number(nvlink.switch_GBps.value), key, latency);
  }
  if (nvlink.kind == ImportedNvlink::Kind::Mesh) {
    const std::string key = sources.add("nvlink", nvlink.link_GBps.source);
    std::string out = fmt::format(
        "  gpu_fabric:\n    type: nvlink_mesh\n    link_bandwidth_GBps: {}\n    latency_us: 0.6\n    source: \"{}, "
        "{}\"\n    links:\n",
        number(nvlink.link_GBps.value), key, latency);
    for (const ImportedNvlink::Pair& pair : nvlink.pairs) {
      if (pair.b >= 0)
        out += fmt::format("      - {{gpus: [{}, {}], links: {}}}\n", pair.a, pair.b, pair.links);
      else
        out += fmt::format("      - {{gpu: {}, cpu: {}, links: {}}}\n", pair.a, -1 - pair.b, pair.links);
    }
    return out;
  }
  return "  gpu_fabric: {type: none}\n";
}

std::string cpus_text(const ImportedNode& node, SourceTable& sources) {
  const std::string model =
      node.cpu_model.empty() ? "" : fmt::format(", model: {}", SourceTable::quoted(node.cpu_model));
  if (node.cpus == 1) return fmt::format("  cpus: {{count: 1{}}}\n", model);
  const std::string link = sources.add("cpu-link", node.cpu_link_GBps.source);
  const std::string latency = sources.add("cpu-latency", "[I] one PCIe-hop-sized estimate, as the presets");
  return fmt::format(
      "  cpus:\n    count: {}\n{}    link: {{bandwidth_GBps: {}, latency_us: 0.5, source: \"{}, {}\"}}\n", node.cpus,
      model.empty() ? "" : fmt::format("    model: {}\n", SourceTable::quoted(node.cpu_model)),
      number(node.cpu_link_GBps.value), link, latency);
}

// One PCIe switch or root port: its children's links and where the numbers come from.
std::string pcie_entry(const ImportedNode& node, int sw, int cpu, const std::vector<int>& gpus,
                       const std::vector<int>& nics, SourceTable& sources) {
  std::string out = fmt::format("      - {{cpu: {}", cpu);
  std::vector<std::string> cited;
  if (sw >= 0 && node.switches[sw].parent >= 0) out += fmt::format(", parent: {}", node.switches[sw].parent);
  if (!gpus.empty()) out += ", gpus: " + index_list(gpus);
  if (!nics.empty()) out += ", nics: " + index_list(nics);
  double gpu_rate = 0, nic_rate = 0;
  for (int g : gpus) {
    gpu_rate = gpu_rate == 0 ? node.gpus[g].at.link_GBps.value : std::min(gpu_rate, node.gpus[g].at.link_GBps.value);
    cited.push_back(sources.add("pcie", node.gpus[g].at.link_GBps.source));
  }
  for (int n : nics) {
    nic_rate = nic_rate == 0 ? node.nics[n].at.link_GBps.value : std::min(nic_rate, node.nics[n].at.link_GBps.value);
    cited.push_back(sources.add("pcie", node.nics[n].at.link_GBps.source));
  }
  if (gpu_rate > 0) out += ", bandwidth_GBps: " + number(gpu_rate);
  if (nic_rate > 0 && nic_rate != gpu_rate)
    out += fmt::format(", {}: {}", gpu_rate > 0 ? "nic_bandwidth_GBps" : "bandwidth_GBps", number(nic_rate));
  if (sw >= 0) {
    out += ", uplink_bandwidth_GBps: " + number(node.switches[sw].uplink_GBps.value);
    cited.push_back(sources.add("pcie", node.switches[sw].uplink_GBps.source));
  }
  std::sort(cited.begin(), cited.end());
  cited.erase(std::unique(cited.begin(), cited.end()), cited.end());
  if (!cited.empty()) out += fmt::format(", source: \"{}\"", fmt::join(cited, ", "));
  return out + "}\n";
}

std::string pcie_text(const ImportedNode& node, SourceTable& sources) {
  const std::string latency =
      sources.add("pcie-latency", "[C/I] NCCL tuning.cc PCI per-hop latency 1.0 us (LL), 0.5 us per link");
  std::string out = fmt::format("  pcie:\n    bandwidth_GBps: {}\n    latency_us: 0.5\n    source: {}\n",
                                number(most_common_pcie_rate(node)), latency);
  std::vector<std::vector<int>> gpus_of(node.switches.size()), nics_of(node.switches.size());
  std::vector<std::pair<int, int>> root_gpus, root_nics;  // (cpu, index)
  for (size_t g = 0; g < node.gpus.size(); ++g) {
    const PcieAttach& at = node.gpus[g].at;
    if (at.pcie_switch >= 0)
      gpus_of[at.pcie_switch].push_back(static_cast<int>(g));
    else
      root_gpus.emplace_back(at.cpu, static_cast<int>(g));
  }
  for (size_t n = 0; n < node.nics.size(); ++n) {
    const PcieAttach& at = node.nics[n].at;
    if (at.pcie_switch >= 0)
      nics_of[at.pcie_switch].push_back(static_cast<int>(n));
    else
      root_nics.emplace_back(at.cpu, static_cast<int>(n));
  }
  if (!node.switches.empty()) out += "    switches:\n";
  for (size_t s = 0; s < node.switches.size(); ++s)
    out += pcie_entry(node, static_cast<int>(s), node.switches[s].cpu, gpus_of[s], nics_of[s], sources);
  if (!root_gpus.empty() || !root_nics.empty()) out += "    root_ports:\n";
  for (const auto& [cpu, g] : root_gpus)
    out += pcie_entry(node, -1, cpu, {g}, {}, sources);
  for (const auto& [cpu, n] : root_nics)
    out += pcie_entry(node, -1, cpu, {}, {n}, sources);
  return out;
}

// The `network:` mapping and the NIC rate it implies when the input has none.
struct NetworkChoice {
  std::string body;
  double default_Gbps = 0;
};

NetworkChoice network_choice(const ImportOptions& options, SourceTable& sources, std::vector<std::string>& notes) {
  if (options.network.empty()) {
    if (options.nodes == 1) return {"{type: none}", 0};
    notes.push_back("no --network given: assumed every NIC on one non-blocking switch (single-switch)");
    const NetworkPreset* preset = find_network("single-switch");
    sources.add("network", preset->source);
    return {preset->body, 0};
  }
  if (const NetworkPreset* preset = find_network(options.network)) {
    sources.add("network", preset->source);
    return {preset->body, preset->default_Gbps};
  }
  if (!std::filesystem::exists(options.network))
    throw InputError("--network", 0,
                     fmt::format("'{}' is neither a network preset ({}) nor a file", options.network,
                                 fmt::join(network_preset_names(), ", ")));
  const std::string text = yaml::read_file(options.network);
  const YAML::Node root = yaml::parse(text, options.network);
  yaml::expect_map(options.network, root, "a network file");
  const YAML::Node network = root["network"].IsDefined() ? root["network"] : root;
  yaml::expect_map(options.network, network, "'network'");
  YAML::Emitter emitter;
  emitter << YAML::Flow << network;
  sources.add("network", fmt::format("network section of {}", options.network));
  return {emitter.c_str(), 0};
}

// NIC rates: the input's, else --nic-Gbps, else the network preset's nominal rate.
std::string nics_text(const ImportedNode& node, const std::string& source, const ImportOptions& options,
                      const NetworkChoice& network, SourceTable& sources, std::vector<std::string>& notes) {
  if (node.nics.empty()) return "";
  double rate = node.nics.front().rate_Gbps.value;
  std::string citation = node.nics.front().rate_Gbps.source;
  if (rate <= 0) {
    if (options.nic_Gbps > 0) {
      rate = options.nic_Gbps;
      citation = fmt::format("[I] {} Gb/s from --nic-Gbps; the input gives no NIC speed", number(rate));
    } else if (network.default_Gbps > 0) {
      rate = network.default_Gbps;
      citation = fmt::format("[I] {} Gb/s, the nominal rate of --network {}; the input gives no NIC speed",
                             number(rate), options.network);
    } else {
      throw InputError(source, 0,
                       fmt::format("the input gives no NIC speed ({}); pass --nic-Gbps RATE or an InfiniBand --network "
                                   "preset (ib-ndr, ib-hdr)",
                                   node.nics.front().label));
    }
    notes.push_back(fmt::format("NIC rate assumed: {}", citation.substr(4)));
  }
  return fmt::format("  nics: {{count: {}, rate_Gbps: {}, source: {}}}\n", node.nics.size(), number(rate),
                     sources.add("nic", citation));
}

}  // namespace

std::vector<std::string> network_names() {
  std::vector<std::string> names;
  for (const NetworkPreset& preset : kNetworks)
    names.emplace_back(preset.name);
  return names;
}

ImportResult write_compact_topology(const ImportedNode& node, const std::string& source, const ImportOptions& options) {
  if (options.nodes < 1 || options.nodes > 65536)
    throw InputError("--nodes", 0, fmt::format("expected 1..65536 nodes, got {}", options.nodes));
  ImportResult result;
  result.assumptions = node.assumptions;
  SourceTable sources;
  const std::string gpu_key = sources.add("gpu", node.gpu_source);
  const NetworkChoice network = network_choice(options, sources, result.assumptions);
  std::string body;
  const GpuModel& gpu = node.gpu;
  body += fmt::format("gpu:\n  model: {}\n  peak_bf16_tflops: {}\n  peak_fp16_tflops: {}\n",
                      SourceTable::quoted(gpu.name), number(gpu.peak_bf16_tflops), number(gpu.peak_fp16_tflops));
  if (gpu.peak_fp8_tflops > 0) body += fmt::format("  peak_fp8_tflops: {}\n", number(gpu.peak_fp8_tflops));
  body += fmt::format("  memory_GiB: {}\n  hbm_GBps: {}\n  source: {}\n", number(gpu.memory_GiB), number(gpu.hbm_GBps),
                      gpu_key);
  body += fmt::format("nodes: {}\nnode:\n  gpus: {}\n", options.nodes, node.gpus.size());
  body += cpus_text(node, sources);
  body += gpu_fabric_text(node, sources);
  body += pcie_text(node, sources);
  body += nics_text(node, source, options, network, sources, result.assumptions);
  body += fmt::format("network: {}\n", network.body);

  std::string name = options.name;
  if (name.empty()) name = std::filesystem::path(source).stem().string();
  if (name.empty()) name = "imported";
  std::string header = fmt::format(
      "# Imported by `wallfacer topo import` from {}.\n# Evidence tags as in docs/formats/topology.md: [C] read from "
      "the input, [S] secondary source, [I] assumed or inferred.\n",
      node.input_label);
  for (const std::string& assumption : result.assumptions)
    header += fmt::format("# assumed: {}\n", assumption);
  result.yaml = header +
                fmt::format("name: {}\ndescription: {}\n", SourceTable::quoted(name),
                            SourceTable::quoted("imported from " + node.input_label)) +
                sources.text() + body;
  try {
    (void)Topology::parse(result.yaml, source + " (imported)");
  } catch (const InputError& e) {
    throw InputError(source, 0, fmt::format("the imported topology does not load: {}", e.message()));
  }
  return result;
}

void use_preset_gpu(const std::string& preset, const std::string& why, ImportedNode& node) {
  const auto names = Topology::preset_names();
  if (std::find(names.begin(), names.end(), preset) == names.end())
    throw InputError(
        fmt::format("--gpu: error: expected a topology preset ({}), got '{}'", fmt::join(names, ", "), preset));
  const Topology topology = Topology::load(preset);
  node.gpu = topology.gpu();
  // Carry the preset's citations for its GPU numbers along.
  const YAML::Node root = YAML::Load(topology.source_text());
  std::string cited;
  std::string names_list = node.gpu.source;
  for (size_t start = 0; start < names_list.size();) {
    size_t end = names_list.find(',', start);
    if (end == std::string::npos) end = names_list.size();
    std::string key = names_list.substr(start, end - start);
    key.erase(0, key.find_first_not_of(' '));
    key.erase(key.find_last_not_of(' ') + 1);
    if (root["sources"][key].IsDefined()) cited += "; " + root["sources"][key].as<std::string>();
    start = end + 1;
  }
  node.gpu_source = fmt::format("[I] the GPU block of the {} preset ({}){}", preset, why, cited);
}

double pcie_GBps(double gts, int lanes) {
  double per_lane = 0;  // GB/s per lane per direction
  if (gts == 2.5)
    per_lane = 2.5 * 0.8 / 8;
  else if (gts == 5)
    per_lane = 5 * 0.8 / 8;
  else if (gts == 8 || gts == 16 || gts == 32)
    per_lane = gts * 128.0 / 130.0 / 8;
  else if (gts == 64)
    per_lane = 64 * 242.0 / 256.0 / 8;
  return per_lane * lanes;
}

}  // namespace wallfacer::detail

namespace wallfacer {

std::vector<std::string> network_preset_names() {
  return detail::network_names();
}

}  // namespace wallfacer
