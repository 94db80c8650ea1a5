// `wallfacer topo check FILE [--nodes K]` validates a topology file or preset;
// `wallfacer topo show FILE [--nodes K] [--json]` prints what the planner sees in it: GPUs and
// nodes, link classes, best and worst GPU pairs inside and across nodes, bisection, content hash;
// `wallfacer topo import FILE [--nvidia-smi] [--nodes K] [--network NET] [-o OUT]` turns NCCL's
// topology XML or `nvidia-smi topo -m` output into a topology file (docs/topology-import.md).
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include <wallfacer/core/atomic_file.hpp>
#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/text.hpp>
#include <wallfacer/core/yaml_util.hpp>
#include <wallfacer/topology/import.hpp>
#include <wallfacer/topology/topology.hpp>
#include "commands.hpp"
#include "common.hpp"

namespace wallfacer::cli {
namespace {

struct TopoOptions {
  std::string file;
  int nodes = 0;
  CLI::Option* nodes_option = nullptr;
  bool json = false;
};

Topology load(const TopoOptions& options) {
  std::optional<int> nodes;
  if (options.nodes_option->count() > 0) nodes = options.nodes;
  return Topology::load(options.file, nodes);
}

void add_common(CLI::App& command, TopoOptions& options) {
  command
      .add_option("FILE", options.file,
                  "topology file, or a preset name: " + fmt::format("{}", fmt::join(Topology::preset_names(), ", ")))
      ->required();
  options.nodes_option = command.add_option("--nodes", options.nodes, "number of nodes (compact-form files only)")
                             ->default_str("the file's 'nodes'");
}

nlohmann::json pair_json(const std::optional<PairFigure>& figure) {
  if (!figure) return nullptr;
  return {{"src_gpu", figure->src_gpu},
          {"dst_gpu", figure->dst_gpu},
          {"bandwidth_GBps", figure->bandwidth_GBps},
          {"latency_us", figure->latency_us}};
}

nlohmann::json summary_json(const TopoOptions& options, const Topology& topo, const TopologySummary& summary) {
  nlohmann::json devices = nlohmann::json::object();
  for (const auto& [kind, count] : summary.device_counts)
    devices[to_string(kind)] = count;
  nlohmann::json classes = nlohmann::json::array();
  for (const LinkClass& c : summary.link_classes)
    classes.push_back({{"kind", to_string(c.kind)},
                       {"bandwidth_GBps", c.bandwidth_GBps},
                       {"latency_us", c.latency_us},
                       {"count", c.count}});
  const GpuModel& gpu = topo.gpu();
  return {{"file", options.file},
          {"name", topo.name()},
          {"description", topo.description()},
          {"gpus", topo.num_gpus()},
          {"nodes", topo.num_nodes()},
          {"gpus_per_node", topo.gpus_per_node()},
          {"gpu",
           {{"model", gpu.name},
            {"peak_bf16_tflops", gpu.peak_bf16_tflops},
            {"peak_fp16_tflops", gpu.peak_fp16_tflops},
            {"peak_fp32_tflops", gpu.peak_fp32_tflops},
            {"memory_GiB", gpu.memory_GiB},
            {"hbm_GBps", gpu.hbm_GBps}}},
          {"fabric", {{"type", topo.fabric().type}, {"oversubscription", topo.fabric().oversubscription}}},
          {"devices", devices},
          {"link_classes", classes},
          {"intra_node", {{"best", pair_json(summary.intra_best)}, {"worst", pair_json(summary.intra_worst)}}},
          {"inter_node", {{"best", pair_json(summary.inter_best)}, {"worst", pair_json(summary.inter_worst)}}},
          {"bisection_GBps", summary.bisection_GBps},
          {"content_hash", topo.content_hash()}};
}

std::string pair_text(const Topology& topo, const std::optional<PairFigure>& figure) {
  if (!figure) return "-";
  const auto& devices = topo.devices();
  return fmt::format("{:g} GB/s, {:g} us ({} -> {})", figure->bandwidth_GBps, figure->latency_us,
                     devices[topo.gpu_device(figure->src_gpu)].name, devices[topo.gpu_device(figure->dst_gpu)].name);
}

void print_text(const TopoOptions& options, const Topology& topo, const TopologySummary& summary) {
  const GpuModel& gpu = topo.gpu();
  fmt::print("{}: {}\n", options.file, topo.name());
  if (!topo.description().empty()) fmt::print("  {}\n", topo.description());
  fmt::print("GPUs: {} in {} (up to {} per node)\n", topo.num_gpus(), counted(topo.num_nodes(), "node"),
             topo.gpus_per_node());
  const std::string fp32 = gpu.peak_fp32_tflops > 0 ? fmt::format(", {:g} TFLOP/s fp32", gpu.peak_fp32_tflops) : "";
  fmt::print("GPU model: {}: {:g} TFLOP/s bf16, {:g} TFLOP/s fp16{} (dense), {:g} GiB, {:g} GB/s HBM\n", gpu.name,
             gpu.peak_bf16_tflops, gpu.peak_fp16_tflops, fp32, gpu.memory_GiB, gpu.hbm_GBps);
  fmt::print("fabric: {}, oversubscription {:g}\n", topo.fabric().type, topo.fabric().oversubscription);
  std::string counts;
  for (const auto& [kind, count] : summary.device_counts)
    counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", count, to_string(kind));
  fmt::print("devices: {}\n", counts);
  fmt::print("link classes:\n");
  for (const LinkClass& c : summary.link_classes)
    fmt::print("  {:<8} {:>7} x {:g} GB/s per direction, {:g} us\n", to_string(c.kind), c.count, c.bandwidth_GBps,
               c.latency_us);
  fmt::print("GPU to GPU inside a node:  best  {}\n", pair_text(topo, summary.intra_best));
  fmt::print("                           worst {}\n", pair_text(topo, summary.intra_worst));
  fmt::print("GPU to GPU across nodes:   best  {}\n", pair_text(topo, summary.inter_best));
  fmt::print("                           worst {}\n", pair_text(topo, summary.inter_worst));
  fmt::print("bisection bandwidth: {:g} GB/s per direction\n", summary.bisection_GBps);
  fmt::print("content hash: {}\n", topo.content_hash());
  for (const std::string& assumption : topo.assumptions())
    fmt::print("assumed: {}\n", assumption);
}

struct ImportFlags {
  std::string file;
  bool nvidia_smi = false;
  ImportOptions options;
  std::string out;
};

void register_import(CLI::App& topo) {
  auto flags = std::make_shared<ImportFlags>();
  CLI::App* cmd = topo.add_subcommand(
      "import", "write a topology file from NCCL's topology XML (NCCL_TOPO_DUMP_FILE) or `nvidia-smi topo -m` output");
  cmd->add_option("FILE", flags->file,
                  "NCCL topology XML, or with --nvidia-smi the saved output of `nvidia-smi topo -m`")
      ->required();
  cmd->add_flag("--nvidia-smi", flags->nvidia_smi, "FILE is `nvidia-smi topo -m` output, not NCCL XML")
      ->capture_default_str();
  cmd->add_option("--nodes", flags->options.nodes, "copies of the node in the cluster")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--network", flags->options.network,
                  fmt::format("network between nodes: a preset ({}) or a YAML file with a 'network:' mapping",
                              fmt::join(network_preset_names(), ", ")))
      ->default_str("none for 1 node, single-switch for more");
  cmd->add_option("--gpu", flags->options.gpu, "topology preset whose GPU model to use (required with --nvidia-smi)")
      ->default_str("from the XML's PCI device id or sm");
  cmd->add_option("--nic-Gbps", flags->options.nic_Gbps, "NIC rate when the input gives none")
      ->default_str("the network preset's")
      ->check(finite_at_least(0, false));
  cmd->add_option("--name", flags->options.name, "topology name")->default_str("the input's file name");
  cmd->add_option("-o,--out", flags->out, "topology file to write")->default_str("stdout");
  cmd->callback([flags] {
    const std::string text = yaml::read_file(flags->file);
    const ImportResult result = flags->nvidia_smi ? import_nvidia_smi_topology(text, flags->file, flags->options)
                                                  : import_nccl_topology_xml(text, flags->file, flags->options);
    for (const std::string& assumption : result.assumptions)
      fmt::print(stderr, "note: {}\n", assumption);
    if (flags->out.empty()) {
      std::cout << result.yaml;
    } else {
      write_file_atomically(flags->out, [&](std::ostream& out) { out << result.yaml; });
      const Topology topology = Topology::parse(result.yaml, flags->out);
      fmt::print("wrote {} ({} GPUs in {}) to {}\n", topology.name(), topology.num_gpus(),
                 counted(topology.num_nodes(), "node"), flags->out);
    }
    exit_code() = 0;
  });
}

}  // namespace

void register_topo_command(CLI::App& app) {
  CLI::App* topo = app.add_subcommand("topo", "check or describe a cluster topology (file or preset)");
  topo->require_subcommand(1);

  auto check_options = std::make_shared<TopoOptions>();
  CLI::App* check = topo->add_subcommand("check", "validate a topology; prints 'FILE: ok: N GPUs in K nodes'");
  add_common(*check, *check_options);
  check->callback([check_options] {
    const Topology topo = load(*check_options);
    fmt::print("{}: ok: {} GPUs in {}\n", check_options->file, topo.num_gpus(), counted(topo.num_nodes(), "node"));
    exit_code() = 0;
  });

  auto show_options = std::make_shared<TopoOptions>();
  CLI::App* show = topo->add_subcommand("show", "describe a topology: GPUs, links, pair bandwidths, bisection, hash");
  add_common(*show, *show_options);
  show->add_flag("--json", show_options->json, "print one JSON object instead of text (default: text)")
      ->capture_default_str();
  show->callback([show_options] {
    const Topology topo = load(*show_options);
    const TopologySummary summary = summarize(topo);
    if (show_options->json) {
      std::cout << summary_json(*show_options, topo, summary).dump(2) << "\n";
    } else {
      print_text(*show_options, topo, summary);
    }
    exit_code() = 0;
  });
  register_import(*topo);
}

}  // namespace wallfacer::cli
