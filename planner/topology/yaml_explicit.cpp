// The explicit form: every device and link listed by name, for clusters the compact form cannot
// describe (mixed node types, odd cabling). Each node becomes its own routing template. Links may
// leave a node only from a NIC, as network links, so that every route between nodes runs
// GPU -> NIC -> network -> NIC -> GPU like in the compact form.
#include <fmt/format.h>

#include <unordered_map>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/yaml_util.hpp>
#include "topology_impl.hpp"

namespace wallfacer::detail {
namespace {

constexpr DeviceKind kDeviceKinds[] = {DeviceKind::Gpu,      DeviceKind::Cpu, DeviceKind::PcieSwitch,
                                       DeviceKind::NvSwitch, DeviceKind::Nic, DeviceKind::NetSwitch};
constexpr LinkKind kLinkKinds[] = {LinkKind::NvLink, LinkKind::Pcie, LinkKind::CpuBus, LinkKind::Network};

DeviceKind read_device_kind(const std::string& source, const YAML::Node& entry) {
  const std::string text = yaml::get_string(source, entry, "kind");
  for (DeviceKind kind : kDeviceKinds)
    if (text == to_string(kind)) return kind;
  yaml::fail(
      source, entry["kind"],
      fmt::format("unknown device kind '{}' (expected gpu, cpu, pcie_switch, nvswitch, nic or net_switch)", text));
}

LinkKind read_link_kind(const std::string& source, const YAML::Node& entry) {
  const std::string text = yaml::get_string(source, entry, "kind");
  for (LinkKind kind : kLinkKinds)
    if (text == to_string(kind)) return kind;
  yaml::fail(source, entry["kind"],
             fmt::format("unknown link kind '{}' (expected nvlink, pcie, cpu_bus or network)", text));
}

struct DeviceTable {
  std::unordered_map<std::string, int> by_name;
  std::map<std::pair<int, int>, int> count_by_node_kind;  // (node, kind) -> devices so far
};

void read_devices(const std::string& source, const YAML::Node& root, TopologyModel& model, DeviceTable& table) {
  const YAML::Node devices = root["devices"];
  if (!devices.IsDefined() || devices.IsNull()) yaml::fail(source, root, "missing required field 'devices'");
  yaml::expect_sequence(source, devices, "'devices'");
  for (const auto& entry : devices) {
    yaml::check_keys(source, entry, {"name", "kind", "node", "source"}, "a device");
    read_source_field(source, entry);
    std::string name = yaml::get_string(source, entry, "name");
    if (name.empty()) yaml::fail(source, entry["name"], "'name' must not be empty");
    const DeviceKind kind = read_device_kind(source, entry);
    int node = -1;
    if (kind == DeviceKind::NetSwitch) {
      if (entry["node"].IsDefined())
        yaml::fail(source, entry["node"], fmt::format("network switch '{}' must not belong to a node", name));
    } else {
      if (!entry["node"].IsDefined())
        yaml::fail(source, entry, fmt::format("device '{}' of kind {} needs a 'node'", name, to_string(kind)));
      node = read_int_in(source, entry, "node", 0, kMaxNodes - 1);
    }
    if (const auto it = table.by_name.find(name); it != table.by_name.end())
      yaml::fail(source, entry["name"],
                 fmt::format("duplicate device name '{}' (first at line {})", name, model.device_lines[it->second]));
    const int local = table.count_by_node_kind[{node, static_cast<int>(kind)}]++;
    const int id = model.add_device(name, kind, node, local, yaml::line_of(entry));
    table.by_name.emplace(std::move(name), id);
    if (node >= static_cast<int>(model.nodes.size())) model.nodes.resize(node + 1);
    if (node >= 0) model.nodes[node].devices.push_back(id);
  }
  for (size_t n = 0; n < model.nodes.size(); ++n) {
    model.nodes[n].template_id = static_cast<int>(n);
    bool has_gpu = false;
    for (int id : model.nodes[n].devices)
      has_gpu = has_gpu || model.devices[id].kind == DeviceKind::Gpu;
    if (has_gpu) continue;
    // Blame the first device of this node or, when it has none, the first of a later node.
    int line = 0;
    for (size_t d = 0; d < model.devices.size() && line == 0; ++d)
      if (model.devices[d].node >= static_cast<int>(n)) line = model.device_lines[d];
    throw InputError(
        source, line,
        fmt::format("node {} has no GPU (nodes are numbered from 0 without gaps and each holds a GPU)", n));
  }
}

int resolve_end(const std::string& source, const YAML::Node& end, const DeviceTable& table) {
  if (!end.IsScalar()) yaml::fail(source, end, "a link end must be a device name");
  const auto it = table.by_name.find(end.Scalar());
  if (it == table.by_name.end()) yaml::fail(source, end, fmt::format("link end '{}' is not a device", end.Scalar()));
  return it->second;
}

// Links between nodes and the network must run NIC <-> switch, switch <-> switch or NIC <-> NIC.
void check_crossing(const std::string& source, const YAML::Node& entry, const TopologyModel& model, int a, int b,
                    LinkKind kind) {
  const Device& da = model.devices[a];
  const Device& db = model.devices[b];
  if (da.node == db.node && da.node >= 0) return;
  auto outward = [](const Device& d) { return d.kind == DeviceKind::Nic || d.kind == DeviceKind::NetSwitch; };
  if (!outward(da) || !outward(db))
    yaml::fail(source, entry,
               fmt::format("link {} - {} leaves a node from a {}: only NICs may link outside their node", da.name,
                           db.name, to_string(outward(da) ? db.kind : da.kind)));
  if (kind != LinkKind::Network)
    yaml::fail(source, entry["kind"],
               fmt::format("link {} - {} leaves a node, so its kind must be 'network'", da.name, db.name));
}

void read_links(const std::string& source, const YAML::Node& root, TopologyModel& model, const DeviceTable& table) {
  const YAML::Node links = root["links"];
  if (!links.IsDefined() || links.IsNull()) yaml::fail(source, root, "missing required field 'links'");
  yaml::expect_sequence(source, links, "'links'");
  for (const auto& entry : links) {
    yaml::check_keys(source, entry,
                     {"ends", "kind", "bandwidth_GBps", "rate_Gbps", "latency_us", "full_duplex", "source"}, "a link");
    read_source_field(source, entry);
    const YAML::Node ends = entry["ends"];
    if (!ends.IsDefined()) yaml::fail(source, entry, "missing required field 'ends'");
    if (!ends.IsSequence() || ends.size() != 2) yaml::fail(source, ends, "'ends' must list two device names");
    const int a = resolve_end(source, ends[0], table);
    const int b = resolve_end(source, ends[1], table);
    if (a == b) yaml::fail(source, ends, fmt::format("link joins '{}' to itself", model.devices[a].name));
    const LinkKind kind = read_link_kind(source, entry);
    check_crossing(source, entry, model, a, b, kind);
    const double bandwidth = read_rate(source, entry, "link bandwidth");
    const double latency = yaml::get_positive(source, entry, "latency_us");
    const bool duplex = yaml::get_bool(source, entry, "full_duplex", true);
    const int id = model.add_link(a, b, kind, bandwidth, latency, duplex, yaml::line_of(entry));
    const int node = model.devices[a].node;
    if (node >= 0 && node == model.devices[b].node) model.nodes[node].links.push_back(id);
  }
}

}  // namespace

TopologyModel read_explicit_form(const std::string& source, const YAML::Node& root) {
  yaml::check_keys(source, root, {"name", "description", "sources", "gpu", "devices", "links"},
                   "an explicit-form topology");
  TopologyModel model;
  model.source = source;
  model.name = yaml::get_string(source, root, "name");
  if (model.name.empty()) yaml::fail(source, root["name"], "'name' must not be empty");
  model.description = yaml::get_string(source, root, "description", "");
  read_sources(source, root);
  model.gpu = read_gpu_model(source, root);
  model.gpu_line = yaml::line_of(root["gpu"]);
  model.fabric = FabricInfo{"explicit", 1.0};
  DeviceTable table;
  read_devices(source, root, model, table);
  if (model.nodes.empty()) yaml::fail(source, root["devices"], "the topology has no GPU");
  read_links(source, root, model, table);
  return model;
}

}  // namespace wallfacer::detail
