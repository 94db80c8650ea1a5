// NCCL's ring from the plan's one ring: an NCCL_GRAPH_FILE per node whose ring channel lists the
// node's GPUs in the order the plan's ring visits them. NCCL chains the nodes of a ring in the
// order of their first rank and runs each node's segment in its channel's GPU order, so a ring
// that visits every node's ranks in one stretch, the nodes in that order, is what such files
// can say; another is refused with the reason. The file's bandwidths and link types only guide
// NCCL's choice between algorithms: NCCL_GRAPH_DUMP_FILE on the cluster shows its own.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "export_impl.hpp"

namespace wallfacer::detail {
namespace {

struct RingSegments {
  std::vector<int> nodes;                        // in ring order, starting at NCCL's first node
  std::map<int, std::vector<int>> gpus_of_node;  // local GPUs in ring order
  std::string why_not;                           // empty when NCCL can follow the ring
};

RingSegments segments_of(const Plan& plan, const std::vector<int>& ring) {
  RingSegments out;
  // NCCL numbers nodes by their first rank in communicator (rank) order.
  std::vector<int> members = ring;
  std::sort(members.begin(), members.end());
  std::vector<int> nccl_order;
  for (int r : members)
    if (std::find(nccl_order.begin(), nccl_order.end(), plan.ranks[r].node) == nccl_order.end())
      nccl_order.push_back(plan.ranks[r].node);
  // Start the ring where a node's stretch begins, so that no stretch wraps around the end.
  const size_t n = ring.size();
  size_t start = 0;
  while (start < n && plan.ranks[ring[start]].node == plan.ranks[ring[(start + n - 1) % n]].node)
    ++start;
  if (start == n) start = 0;  // one node
  for (size_t i = 0; i < n; ++i) {
    const RankSlot& slot = plan.ranks[ring[(start + i) % n]];
    if (out.nodes.empty() || out.nodes.back() != slot.node) out.nodes.push_back(slot.node);
    out.gpus_of_node[slot.node].push_back(slot.local_gpu);
  }
  if (out.nodes.size() != nccl_order.size()) {
    out.why_not = "the ring enters a node more than once, and NCCL's ring visits each node's GPUs in one stretch";
    return out;
  }
  const auto first = std::find(out.nodes.begin(), out.nodes.end(), nccl_order.front());
  std::rotate(out.nodes.begin(), first, out.nodes.end());
  if (out.nodes != nccl_order)
    out.why_not = "the ring visits the nodes in another order than their first ranks, the order NCCL chains them in";
  return out;
}

std::string device_id(int local_gpu) {
  return local_gpu < 10 ? std::to_string(local_gpu) : fmt::format("0x{:x}", local_gpu);
}

// One node's graph file as "#NCCL_GRAPH node<N> " lines.
std::string node_graph(int node, const std::vector<int>& gpus, bool multi_node) {
  const std::string prefix = fmt::format("#NCCL_GRAPH node{} ", node);
  std::string out = prefix + "<graphs version=\"1\">\n";
  // id 0 is NCCL's ring graph, pattern 4 its ring pattern.
  out += prefix +
         "  <graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"1\" speedintra=\"12\" speedinter=\"12\" "
         "latencyinter=\"0\" typeintra=\"SYS\" typeinter=\"SYS\" samechannels=\"1\">\n";
  out += prefix + "    <channel>\n";
  if (multi_node) out += prefix + "      <net dev=\"0\"/>\n";
  for (int g : gpus)
    out += prefix + fmt::format("      <gpu dev=\"{}\"/>\n", device_id(g));
  if (multi_node) out += prefix + "      <net dev=\"0\"/>\n";
  out += prefix + "    </channel>\n";
  out += prefix + "  </graph>\n";
  out += prefix + "</graphs>\n";
  return out;
}

}  // namespace

std::string nccl_ring_graphs(const Plan& plan) {
  const std::vector<std::vector<int>> rings = groups_of(plan, GroupKind::Ring);
  if (rings.size() != 1 || rings.front().size() < 2) return "";
  const RingSegments segments = segments_of(plan, rings.front());
  if (!segments.why_not.empty()) return fmt::format("# no NCCL_GRAPH_FILE for this ring: {}\n", segments.why_not);
  std::string out =
      "# NCCL_GRAPH_FILE per node making NCCL's ring channel follow the plan's ring: on node<N>, save the lines\n"
      "# '#NCCL_GRAPH node<N> ' without that prefix (grep '^#NCCL_GRAPH node0 ' THIS_FILE | cut -d' ' -f3-)\n"
      "# and set NCCL_GRAPH_FILE to it. Speeds and link types are placeholders; compare NCCL_GRAPH_DUMP_FILE.\n";
  for (int node : segments.nodes)
    out += node_graph(node, segments.gpus_of_node.at(node), segments.nodes.size() > 1);
  return out;
}

}  // namespace wallfacer::detail
