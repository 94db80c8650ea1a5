// Which blocks of a topology file give numbers without saying where they come from
// (unsourced_blocks in topology.hpp; docs/formats/topology.md, "Units, sources and evidence").
#include <wallfacer/core/yaml_util.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

bool holds_number_with_unit(const std::string& key) {
  for (const char* unit : {"_GBps", "_Gbps", "_us", "_tflops", "_GiB"})
    if (key.find(unit) != std::string::npos) return true;
  return false;
}

// A mapping with numbers needs a `source` of its own or of a mapping around it.
// `line`: where the block is named (its key's line; a list item's own line).
void collect(const YAML::Node& node, const std::string& path, int line, bool sourced,
             std::vector<UnsourcedBlock>& out) {
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i)
      collect(node[i], path + "[" + std::to_string(i) + "]", yaml::line_of(node[i]), sourced, out);
    return;
  }
  if (!node.IsMap()) return;
  sourced = sourced || node["source"].IsDefined();
  bool has_number = false;
  for (const auto& entry : node) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : std::string();
    if (key == "sources") continue;
    has_number = has_number || holds_number_with_unit(key);
    collect(entry.second, path.empty() ? key : path + "." + key, yaml::line_of(entry.first), sourced, out);
  }
  if (has_number && !sourced) out.push_back({path.empty() ? "(top level)" : path, line});
}

}  // namespace

std::vector<UnsourcedBlock> unsourced_blocks(const Topology& topology) {
  std::vector<UnsourcedBlock> out;
  const YAML::Node root = yaml::parse(topology.source_text(), topology.source());
  collect(root, "", yaml::line_of(root), false, out);
  return out;
}

}  // namespace wallfacer
