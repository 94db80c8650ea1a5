// Topology: loading (presets or files), the device graph, reachability checks, accessors and the
// content hash. Reading the two file forms lives in yaml*.cpp, routing in
// routing.cpp, the bisection in bisection.cpp.
#include <wallfacer/topology/topology.hpp>

#include <fmt/format.h>

#include <boost/graph/connected_components.hpp>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/core/yaml_util.hpp>
#include "topology_impl.hpp"

namespace wallfacer {

// Generated from topologies/*.yaml by cmake/EmbedFiles.cmake.
extern const std::map<std::string, std::string>& embedded_topologies();

const char* to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Gpu:
      return "gpu";
    case DeviceKind::Cpu:
      return "cpu";
    case DeviceKind::PcieSwitch:
      return "pcie_switch";
    case DeviceKind::NvSwitch:
      return "nvswitch";
    case DeviceKind::Nic:
      return "nic";
    case DeviceKind::NetSwitch:
      return "net_switch";
  }
  return "?";
}

const char* to_string(LinkKind kind) {
  switch (kind) {
    case LinkKind::NvLink:
      return "nvlink";
    case LinkKind::Pcie:
      return "pcie";
    case LinkKind::CpuBus:
      return "cpu_bus";
    case LinkKind::Network:
      return "network";
  }
  return "?";
}

namespace detail {

int64_t latency_ps(double latency_us) {
  return std::llround(latency_us * 1e6);
}

int TopologyModel::add_device(std::string device_name, DeviceKind kind, int node, int local_index, int line) {
  devices.push_back(Device{std::move(device_name), kind, node, local_index});
  device_lines.push_back(line);
  return static_cast<int>(devices.size()) - 1;
}

int TopologyModel::add_link(int a, int b, LinkKind kind, double bandwidth_GBps, double latency_us, bool full_duplex,
                            int line) {
  links.push_back(Link{a, b, kind, bandwidth_GBps, latency_us, full_duplex});
  link_lines.push_back(line);
  return static_cast<int>(links.size()) - 1;
}

namespace {

// 64-bit FNV-1a over the canonical text, fed piece by piece.
class Fnv1a {
 public:
  void add(std::string_view text) {
    for (unsigned char c : text) {
      hash_ ^= c;
      hash_ *= 0x100000001b3ULL;
    }
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace
}  // namespace detail

namespace {

// Line of `key` itself in a mapping (a block sequence's own mark is its first entry).
int key_line(const YAML::Node& map, const std::string& key) {
  for (const auto& kv : map)
    if (kv.first.Scalar() == key) return yaml::line_of(kv.first);
  return 0;
}

}  // namespace

// ---- construction and loading ------------------------------------------------------------------

Topology::Topology() : impl_(std::make_unique<Impl>()) {}
Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

Topology Topology::parse(const std::string& yaml_text, const std::string& source, std::optional<int> nodes_override) {
  if (const int requested = nodes_override.value_or(1); requested < 1)
    throw InputError(fmt::format("--nodes must be at least 1, got {}", requested));
  const YAML::Node root = yaml::parse(yaml_text, source);
  if (!root.IsDefined() || root.IsNull()) throw InputError(source, 0, "the topology file is empty");
  yaml::expect_map(source, root, "a topology file");
  const bool explicit_form = root["devices"].IsDefined() || root["links"].IsDefined();
  if (!explicit_form && !root["node"].IsDefined())
    yaml::fail(source, root, "missing 'node' (compact form) or 'devices' and 'links' (explicit form)");
  if (explicit_form && nodes_override)
    throw InputError(source, key_line(root, "devices"),
                     "--nodes cannot resize an explicit-form topology, which lists every device");
  detail::TopologyModel model = explicit_form ? detail::read_explicit_form(source, root)
                                              : detail::read_compact_form(source, root, nodes_override);
  Topology topology;
  topology.impl_->source_text = yaml_text;
  topology.impl_->build(std::move(model));
  // Once per file and assumption: a search's suggestions load the file again at other node counts.
  static std::mutex warned_mutex;
  static std::set<std::string> warned;
  for (const std::string& assumption : topology.assumptions()) {
    const std::lock_guard lock(warned_mutex);
    if (warned.insert(source + '\n' + assumption).second) WF_LOG_WARN("topology", "{}: {}", source, assumption);
  }
  WF_LOG_DEBUG("topology", "{}: {} GPUs in {} nodes, {} devices, {} links, hash {}", source, topology.num_gpus(),
               topology.num_nodes(), topology.devices().size(), topology.links().size(), topology.content_hash());
  return topology;
}

std::vector<std::string> Topology::preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : embedded_topologies())
    names.push_back(name);
  return names;
}

Topology Topology::load(const std::string& path_or_preset, std::optional<int> nodes_override) {
  const auto& presets = embedded_topologies();
  if (const auto it = presets.find(path_or_preset); it != presets.end())
    return parse(it->second, path_or_preset, nodes_override);
  std::error_code ec;
  if (!std::filesystem::exists(path_or_preset, ec))
    throw InputError(
        path_or_preset, 0,
        fmt::format("no such file, and no preset of that name (presets: {})", fmt::join(preset_names(), ", ")));
  return parse(yaml::read_file(path_or_preset), path_or_preset, nodes_override);
}

// ---- building and checking the graph -----------------------------------------------------------

void Topology::Impl::build(detail::TopologyModel m) {
  model = std::move(m);
  for (size_t n = 0; n < model.nodes.size(); ++n) {
    int local = 0;
    for (int id : model.nodes[n].devices) {
      if (model.devices[id].kind != DeviceKind::Gpu) continue;
      gpu_device.push_back(id);
      gpu_node.push_back(static_cast<int>(n));
      gpu_local.push_back(local++);
    }
    gpus_per_node = std::max(gpus_per_node, local);
  }
  // A bucket per pair of GPUs, up to a million (1,024 GPUs, 8 MiB): a search at 512 GPUs asks
  // for most pairs (the all-to-alls of every Ulysses degree and placement), and with 64 buckets
  // per GPU its lookups walked chains of several routes, a cache miss each: 11 % of the search's
  // CPU time, 6 % with a bucket per pair.
  routes = std::make_unique<detail::RouteCache>(
      std::clamp<size_t>(gpu_device.size() * gpu_device.size(), 1024, size_t(1) << 20));
  graph = detail::DeviceGraph(model.devices.size());
  for (size_t l = 0; l < model.links.size(); ++l)
    boost::add_edge(model.links[l].a, model.links[l].b, detail::EdgeLink{static_cast<int>(l)}, graph);
  build_templates();
  build_fabric();
  assign_nics();
  check_reachability();
  hash = compute_hash();
}

void Topology::Impl::check_reachability() const {
  check_components();
  check_node_routes();
  if (model.nodes.size() > 1) check_nic_entries();
}

void Topology::Impl::check_components() const {
  std::vector<int> component(boost::num_vertices(graph));
  boost::connected_components(graph, component.data());
  for (int id : gpu_device) {
    if (component[id] != component[gpu_device[0]])
      throw InputError(model.source, model.device_lines[id],
                       fmt::format("GPUs {} and {} cannot reach each other", model.devices[gpu_device[0]].name,
                                   model.devices[id].name));
  }
}

// Inside a node routes do not relay through GPUs or NICs, so being connected is not enough;
// every template is searched once from each of its GPUs.
void Topology::Impl::check_node_routes() const {
  std::vector<bool> checked(templates.size(), false);
  for (size_t n = 0; n < model.nodes.size(); ++n) {
    const detail::NodeMembers& members = model.nodes[n];
    if (checked[members.template_id]) continue;
    checked[members.template_id] = true;
    const detail::NodeTemplate& tmpl = templates[members.template_id];
    for (size_t a = 0; a < tmpl.gpu_vertex.size(); ++a) {
      const auto& costs = tmpl.costs_from(tmpl.gpu_vertex[a]);
      for (size_t b = a + 1; b < tmpl.gpu_vertex.size(); ++b) {
        if (costs[tmpl.gpu_vertex[b]] != detail::kUnreachable) continue;
        const int da = members.devices[tmpl.gpu_vertex[a]];
        const int db = members.devices[tmpl.gpu_vertex[b]];
        throw InputError(model.source, model.device_lines[db],
                         fmt::format("GPUs {} and {} cannot reach each other inside node {} (routes do not pass "
                                     "through other GPUs or NICs)",
                                     model.devices[da].name, model.devices[db].name, n));
      }
    }
  }
}

// Between nodes every GPU needs a NIC with a network link, and the NICs' fabric entries must
// reach one another.
void Topology::Impl::check_nic_entries() const {
  const auto& devices = model.devices;
  std::vector<int> entries, entry_nic;
  std::vector<char> seen(fabric.graph.num_vertices(), 0);
  for (size_t g = 0; g < gpu_device.size(); ++g) {
    const int gpu = gpu_device[g];
    if (gpu_nic[g] < 0)
      throw InputError(model.source, model.device_lines[gpu],
                       fmt::format("GPU {} has no NIC, so it cannot reach other nodes", devices[gpu].name));
    const detail::NicEntry& entry = nic_entry[gpu_nic[g]];
    if (entry.entry < 0)
      throw InputError(
          model.source, model.device_lines[gpu_nic[g]],
          fmt::format("NIC {} (serving {}) has no network link", devices[gpu_nic[g]].name, devices[gpu].name));
    if (seen[entry.entry]) continue;
    seen[entry.entry] = 1;
    entries.push_back(entry.entry);
    entry_nic.push_back(gpu_nic[g]);
  }
  // Switches relay, so one search from one switch entry covers every pair of switch entries; a
  // NIC that is its own entry (explicit form) does not relay and gets its own search.
  bool searched_from_switch = false;
  for (size_t i = 0; i < entries.size(); ++i) {
    const bool nic_is_entry = fabric.device_of_vertex[entries[i]] == entry_nic[i];
    if (!nic_is_entry) {
      if (searched_from_switch) continue;
      searched_from_switch = true;
    }
    const auto& costs = fabric.costs_from(entries[i]);
    for (size_t j = 0; j < entries.size(); ++j) {
      if (costs[entries[j]] != detail::kUnreachable) continue;
      throw InputError(model.source, model.device_lines[entry_nic[j]],
                       fmt::format("NICs {} and {} are not joined by the network", devices[entry_nic[i]].name,
                                   devices[entry_nic[j]].name));
    }
  }
}

std::string Topology::Impl::compute_hash() const {
  // The hash covers what routes and costs depend on: the GPU model's numbers, the fabric, every
  // device and link. Names, descriptions, sources and comments do not change it.
  detail::Fnv1a fnv;
  const GpuModel& g = model.gpu;
  fnv.add(fmt::format("wallfacer-topology/1\ngpu|{}|{}|{}|{}|{}\nfabric|{}|{}\nnodes|{}\n", g.name, g.peak_bf16_tflops,
                      g.peak_fp16_tflops, g.memory_GiB, g.hbm_GBps, model.fabric.type, model.fabric.oversubscription,
                      model.nodes.size()));
  // Added only when given, so that topologies without it keep their hashes.
  if (g.peak_fp8_tflops > 0) fnv.add(fmt::format("fp8|{}\n", g.peak_fp8_tflops));
  if (g.peak_fp32_tflops > 0) fnv.add(fmt::format("fp32|{}\n", g.peak_fp32_tflops));
  // Added only when it is not the default, so that ECMP topologies keep their hashes.
  if (model.fabric.routing != "ecmp") fnv.add(fmt::format("routing|{}\n", model.fabric.routing));
  fmt::memory_buffer line;
  for (const Device& d : model.devices) {
    line.clear();
    fmt::format_to(std::back_inserter(line), "d|{}|{}|{}\n", d.name, to_string(d.kind), d.node);
    fnv.add(std::string_view(line.data(), line.size()));
  }
  for (const Link& l : model.links) {
    line.clear();
    fmt::format_to(std::back_inserter(line), "l|{}|{}|{}|{}|{}|{}\n", l.a, l.b, to_string(l.kind), l.bandwidth_GBps,
                   l.latency_us, l.full_duplex ? 1 : 0);
    fnv.add(std::string_view(line.data(), line.size()));
  }
  return fmt::format("{:016x}", fnv.value());
}

// ---- accessors ---------------------------------------------------------------------------------

const std::string& Topology::name() const {
  return impl_->model.name;
}
const std::string& Topology::description() const {
  return impl_->model.description;
}
const GpuModel& Topology::gpu() const {
  return impl_->model.gpu;
}
const FabricInfo& Topology::fabric() const {
  return impl_->model.fabric;
}
const std::vector<std::string>& Topology::assumptions() const {
  return impl_->model.assumptions;
}
int Topology::num_nodes() const {
  return static_cast<int>(impl_->model.nodes.size());
}
int Topology::gpus_per_node() const {
  return impl_->gpus_per_node;
}
int Topology::num_gpus() const {
  return static_cast<int>(impl_->gpu_device.size());
}
const std::vector<Device>& Topology::devices() const {
  return impl_->model.devices;
}
const std::vector<Link>& Topology::links() const {
  return impl_->model.links;
}
const std::string& Topology::content_hash() const {
  return impl_->hash;
}
const std::string& Topology::source() const {
  return impl_->model.source;
}
const std::string& Topology::source_text() const {
  return impl_->source_text;
}

int Topology::gpu_device(int gpu) const {
  WF_ASSERT(gpu >= 0 && gpu < num_gpus(), fmt::format("GPU index {} out of range", gpu));
  return impl_->gpu_device[gpu];
}
int Topology::node_of_gpu(int gpu) const {
  WF_ASSERT(gpu >= 0 && gpu < num_gpus(), fmt::format("GPU index {} out of range", gpu));
  return impl_->gpu_node[gpu];
}
int Topology::local_gpu(int gpu) const {
  WF_ASSERT(gpu >= 0 && gpu < num_gpus(), fmt::format("GPU index {} out of range", gpu));
  return impl_->gpu_local[gpu];
}
int Topology::nic_of_gpu(int gpu) const {
  WF_ASSERT(gpu >= 0 && gpu < num_gpus(), fmt::format("GPU index {} out of range", gpu));
  return impl_->gpu_nic[gpu];
}

int Topology::device_id(const std::string& device_name) const {
  std::lock_guard lock(impl_->lazy_mutex);
  auto& index = impl_->device_by_name;
  if (index.empty())
    for (size_t i = 0; i < impl_->model.devices.size(); ++i)
      index.emplace(impl_->model.devices[i].name, static_cast<int>(i));
  const auto it = index.find(device_name);
  return it == index.end() ? -1 : it->second;
}

double Topology::bisection_bandwidth_GBps() const {
  std::lock_guard lock(impl_->lazy_mutex);
  if (!impl_->bisection) impl_->bisection = impl_->compute_bisection();
  return *impl_->bisection;
}

}  // namespace wallfacer
