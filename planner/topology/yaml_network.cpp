// The compact form's `network:` block: the switches between nodes. Three shapes are built from a
// handful of numbers: one switch for everything, a two-level fat tree whose leaves take whole
// nodes, and a rail-optimised tree where NIC k of every node sits on rail k's leaves and spines
// join the rails. Leaves take contiguous node ranges; each leaf has one aggregated link to each
// spine, carrying the leaf's downlink capacity divided by the oversubscription, shared evenly.
#include <fmt/format.h>

#include <cmath>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/yaml_util.hpp>
#include "topology_impl.hpp"

namespace wallfacer::detail {
namespace {

constexpr int64_t kMaxFabricLinks = 1 << 22;

struct TreeShape {
  int nodes_per_leaf = 1;
  double oversubscription = 1.0;
  int spines = 0;
  double link_latency_us = 0;
  double uplink_latency_us = 0;
  double uplink_GBps = 0;  // per leaf-spine link
  std::string routing = "ecmp";
};

std::vector<std::vector<int>> nics_by_node(const TopologyModel& model) {
  std::vector<std::vector<int>> out(model.nodes.size());
  for (size_t n = 0; n < model.nodes.size(); ++n)
    for (int id : model.nodes[n].devices)
      if (model.devices[id].kind == DeviceKind::Nic) out[n].push_back(id);
  return out;
}

int ceil_div(int64_t a, int64_t b) {
  return static_cast<int>((a + b - 1) / b);
}

// `ports_per_node`: leaf ports one node takes (all its NICs in a fat tree, one per rail).
TreeShape read_tree(const std::string& source, const YAML::Node& net, const std::string& type, int ports_per_node,
                    double nic_GBps) {
  yaml::check_keys(source, net,
                   {"type", "nodes_per_leaf", "leaf_radix", "oversubscription", "spines", "link_latency_us",
                    "uplink_latency_us", "routing", "source"},
                   "'network'");
  yaml::require_keys(source, net, {"link_latency_us"}, "'network'");
  TreeShape tree;
  if (net["oversubscription"].IsDefined())
    tree.oversubscription = read_number_at_least(source, net, "oversubscription", 1.0);
  const bool has_nodes_per_leaf = net["nodes_per_leaf"].IsDefined();
  const bool has_radix = net["leaf_radix"].IsDefined();
  if (has_nodes_per_leaf && has_radix) yaml::fail(source, net, "give 'nodes_per_leaf' or 'leaf_radix', not both");
  if (!has_nodes_per_leaf && !has_radix)
    yaml::fail(source, net, fmt::format("network type '{}' needs 'nodes_per_leaf' or 'leaf_radix'", type));
  if (has_nodes_per_leaf) {
    tree.nodes_per_leaf = read_int_in(source, net, "nodes_per_leaf", 1, kMaxSwitchCount);
  } else {
    const int64_t radix = read_int_in(source, net, "leaf_radix", 2, kMaxSwitchCount);
    const double s = tree.oversubscription;
    const int64_t down = static_cast<int64_t>(std::floor(static_cast<double>(radix) * s / (1.0 + s)));
    tree.nodes_per_leaf = static_cast<int>(down / ports_per_node);
    if (tree.nodes_per_leaf < 1)
      yaml::fail(source, net["leaf_radix"],
                 fmt::format("leaf_radix {} at oversubscription {} gives {} down port(s), fewer than the {} one "
                             "node needs",
                             radix, s, down, ports_per_node));
  }
  const int64_t down_ports = static_cast<int64_t>(tree.nodes_per_leaf) * ports_per_node;
  tree.spines = net["spines"].IsDefined()
                    ? read_int_in(source, net, "spines", 1, kMaxSwitchCount)
                    : static_cast<int>(std::ceil(static_cast<double>(down_ports) / tree.oversubscription));
  tree.link_latency_us = yaml::get_positive(source, net, "link_latency_us");
  tree.uplink_latency_us = yaml::get_positive(source, net, "uplink_latency_us", tree.link_latency_us);
  tree.uplink_GBps = static_cast<double>(down_ports) * nic_GBps / tree.oversubscription / tree.spines;
  if (net["routing"].IsDefined()) {
    tree.routing = yaml::get_string(source, net, "routing");
    if (tree.routing != "ecmp" && tree.routing != "d-mod-k")
      yaml::fail(source, net["routing"], fmt::format("unknown routing '{}' (expected ecmp or d-mod-k)", tree.routing));
  }
  read_source_field(source, net);
  return tree;
}

void check_size(const std::string& source, const YAML::Node& net, int64_t leaves, int64_t spines) {
  if (leaves * spines > kMaxFabricLinks)
    yaml::fail(source, net,
               fmt::format("the network would need {} leaves x {} spines = {} links (limit {}); raise "
                           "'nodes_per_leaf' or set fewer 'spines'",
                           leaves, spines, leaves * spines, kMaxFabricLinks));
}

std::vector<int> add_spines(int count, int line, TopologyModel& model) {
  std::vector<int> spines;
  for (int j = 0; j < count; ++j)
    spines.push_back(model.add_device(fmt::format("spine{}", j), DeviceKind::NetSwitch, -1, j, line));
  return spines;
}

void join_leaves_to_spines(const std::vector<int>& leaves, const std::vector<int>& spines, const TreeShape& tree,
                           int line, TopologyModel& model) {
  for (int leaf : leaves)
    for (int spine : spines)
      model.add_link(leaf, spine, LinkKind::Network, tree.uplink_GBps, tree.uplink_latency_us, true, line);
}

void add_single_switch(const std::string& source, const YAML::Node& net, const NetworkShape& shape,
                       TopologyModel& model) {
  yaml::check_keys(source, net, {"type", "link_latency_us", "source"}, "'network'");
  read_source_field(source, net);
  const double latency = yaml::get_positive(source, net, "link_latency_us");
  const int line = yaml::line_of(net);
  const int hub = model.add_device("switch0", DeviceKind::NetSwitch, -1, 0, line);
  for (const auto& nics : nics_by_node(model))
    for (int nic : nics)
      model.add_link(nic, hub, LinkKind::Network, shape.nic_GBps, latency, true, line);
}

void add_fat_tree(const std::string& source, const YAML::Node& net, const NetworkShape& shape, TopologyModel& model) {
  const TreeShape tree = read_tree(source, net, "fat_tree", shape.nics_per_node, shape.nic_GBps);
  const int num_leaves = ceil_div(shape.nodes, tree.nodes_per_leaf);
  const int num_spines = num_leaves > 1 ? tree.spines : 0;
  check_size(source, net, num_leaves, num_spines);
  const int line = yaml::line_of(net);
  std::vector<int> leaves;
  for (int l = 0; l < num_leaves; ++l)
    leaves.push_back(model.add_device(fmt::format("leaf{}", l), DeviceKind::NetSwitch, -1, l, line));
  const std::vector<int> spines = add_spines(num_spines, line, model);
  const auto nics = nics_by_node(model);
  for (int n = 0; n < shape.nodes; ++n)
    for (int nic : nics[n])
      model.add_link(nic, leaves[n / tree.nodes_per_leaf], LinkKind::Network, shape.nic_GBps, tree.link_latency_us,
                     true, line);
  join_leaves_to_spines(leaves, spines, tree, line, model);
  model.fabric.oversubscription = tree.oversubscription;
  model.fabric.routing = tree.routing;
}

void add_rail_optimized(const std::string& source, const YAML::Node& net, const NetworkShape& shape,
                        TopologyModel& model) {
  const TreeShape tree = read_tree(source, net, "rail_optimized", 1, shape.nic_GBps);
  const int rails = shape.nics_per_node;
  const int leaves_per_rail = ceil_div(shape.nodes, tree.nodes_per_leaf);
  const int64_t num_leaves = static_cast<int64_t>(leaves_per_rail) * rails;
  const int num_spines = num_leaves > 1 ? tree.spines : 0;
  check_size(source, net, num_leaves, num_spines);
  const int line = yaml::line_of(net);
  std::vector<int> leaves;  // rail-major
  for (int r = 0; r < rails; ++r)
    for (int l = 0; l < leaves_per_rail; ++l)
      leaves.push_back(model.add_device(fmt::format("leaf{}.rail{}", l, r), DeviceKind::NetSwitch, -1,
                                        r * leaves_per_rail + l, line));
  const std::vector<int> spines = add_spines(num_spines, line, model);
  const auto nics = nics_by_node(model);
  for (int n = 0; n < shape.nodes; ++n)
    for (int r = 0; r < rails; ++r)
      model.add_link(nics[n][r], leaves[r * leaves_per_rail + n / tree.nodes_per_leaf], LinkKind::Network,
                     shape.nic_GBps, tree.link_latency_us, true, line);
  join_leaves_to_spines(leaves, spines, tree, line, model);
  model.fabric.oversubscription = tree.oversubscription;
  model.fabric.routing = tree.routing;
}

}  // namespace

void add_compact_network(const std::string& source, const YAML::Node& root, const NetworkShape& shape,
                         TopologyModel& model) {
  const YAML::Node net = root["network"];
  std::string type = "none";
  if (net.IsDefined()) {
    yaml::expect_map(source, net, "'network'");
    type = yaml::get_string(source, net, "type");
  }
  model.fabric = FabricInfo{type, 1.0, "ecmp"};
  if (type == "none") {
    if (net.IsDefined()) yaml::check_keys(source, net, {"type", "source"}, "'network'");
    if (shape.nodes > 1 && shape.nodes_from_flag)
      throw InputError(
          source, yaml::line_of(net),
          fmt::format("--nodes {} needs a network to join the nodes, but this topology has none", shape.nodes));
    if (shape.nodes > 1)
      throw InputError(source, shape.nodes_line, fmt::format("{} nodes need a 'network' to join them", shape.nodes));
    return;
  }
  if (type != "single_switch" && type != "fat_tree" && type != "rail_optimized")
    yaml::fail(
        source, net["type"],
        fmt::format("unknown network type '{}' (expected single_switch, fat_tree, rail_optimized or none)", type));
  if (shape.nics_per_node == 0)
    yaml::fail(source, net, fmt::format("network type '{}' needs NICs: add 'nics' to the node", type));
  if (type == "single_switch") add_single_switch(source, net, shape, model);
  if (type == "fat_tree") add_fat_tree(source, net, shape, model);
  if (type == "rail_optimized") add_rail_optimized(source, net, shape, model);
}

}  // namespace wallfacer::detail
