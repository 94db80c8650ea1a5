// Routing between GPUs. Inside a node: the cheapest path (latency, then hops) in the node's
// template graph, where GPUs and NICs do not relay. Between nodes: source GPU -> its NIC (inside
// the node) -> the fabric -> destination NIC -> destination GPU, with the fabric part chosen among
// equal-cost switch paths by a hash of (source, destination), like ECMP. Searches run per source
// vertex of a small graph and are cached, as are whole routes, so that routing P flows on a
// cluster of tens of thousands of GPUs costs a few microseconds per flow. The caches may be read
// and filled from several threads at once (route_cache.hpp, topology_impl.hpp).
#include <fmt/format.h>

#include <boost/graph/dijkstra_shortest_paths_no_color_map.hpp>
#include <boost/graph/filtered_graph.hpp>
#include <boost/property_map/transform_value_property_map.hpp>
#include <limits>
#include <map>

#include <wallfacer/core/errors.hpp>
#include "topology_impl.hpp"

namespace wallfacer {
namespace detail {
namespace {

struct AddCost {
  RouteCost operator()(const RouteCost& a, const RouteCost& b) const {
    return {a.first + b.first, a.second + b.second};
  }
};

// Arcs a search may use: those leaving a vertex that relays, or leaving the search's source.
struct RelayFilter {
  const ArcGraph* arcs = nullptr;
  const std::vector<char>* transit = nullptr;
  int source = -1;
  bool operator()(const ArcGraph::edge_descriptor& e) const {
    const int u = static_cast<int>(boost::source(e, *arcs));
    return u == source || (*transit)[u] != 0;
  }
};

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

int RoutingGraph::add_vertex(bool transit) {
  transit_.push_back(transit ? 1 : 0);
  return static_cast<int>(boost::add_vertex(arcs_));
}

void RoutingGraph::add_link(int u, int v, int link, int64_t latency) {
  boost::add_edge(u, v, Arc{link, true, latency}, arcs_);
  boost::add_edge(v, u, Arc{link, false, latency}, arcs_);
}

template <typename Graph>
void run_dijkstra(const Graph& graph, const ArcGraph& arcs, int source, std::vector<RouteCost>& costs) {
  const auto to_cost = [](int64_t ps) { return RouteCost{ps, 1}; };
  const auto weight = boost::make_transform_value_property_map(to_cost, boost::get(&Arc::latency, arcs));
  boost::dijkstra_shortest_paths_no_color_map(
      graph, static_cast<ArcGraph::vertex_descriptor>(source),
      boost::distance_map(boost::make_iterator_property_map(costs.begin(), boost::get(boost::vertex_index, arcs)))
          .weight_map(weight)
          .distance_compare(std::less<RouteCost>())
          .distance_combine(AddCost())
          .distance_inf(kUnreachable)
          .distance_zero(RouteCost{0, 0}));
}

std::vector<RouteCost> RoutingGraph::costs_from(int source) const {
  std::vector<RouteCost> costs(transit_.size(), kUnreachable);
  // A fabric of switches only (every compact-form network) needs no relay filter.
  if (std::all_of(transit_.begin(), transit_.end(), [](char t) { return t != 0; })) {
    run_dijkstra(arcs_, arcs_, source, costs);
  } else {
    run_dijkstra(boost::filtered_graph<ArcGraph, RelayFilter>(arcs_, RelayFilter{&arcs_, &transit_, source}), arcs_,
                 source, costs);
  }
  return costs;
}

const std::vector<RouteCost>& NodeTemplate::costs_from(int vertex) const {
  if (costs[vertex].empty()) costs[vertex] = graph.costs_from(vertex);
  return costs[vertex];
}

const std::vector<RouteCost>& Fabric::costs_from(int vertex) const {
  if (costs[vertex].empty()) costs[vertex] = graph.costs_from(vertex);
  return costs[vertex];
}

}  // namespace detail

// ---- preparing templates, the fabric and NIC assignment ----------------------------------------

void Topology::Impl::build_templates() {
  int count = 0;
  for (const auto& members : model.nodes)
    count = std::max(count, members.template_id + 1);
  templates.assign(count, {});
  std::vector<bool> built(count, false);
  std::vector<int> local_of(model.devices.size(), -1);
  for (const auto& members : model.nodes) {
    if (built[members.template_id]) continue;
    built[members.template_id] = true;
    detail::NodeTemplate& tmpl = templates[members.template_id];
    for (size_t i = 0; i < members.devices.size(); ++i) {
      const int id = members.devices[i];
      const DeviceKind kind = model.devices[id].kind;
      local_of[id] = tmpl.graph.add_vertex(kind != DeviceKind::Gpu && kind != DeviceKind::Nic);
      if (kind == DeviceKind::Gpu) tmpl.gpu_vertex.push_back(static_cast<int>(i));
      if (kind == DeviceKind::Nic) tmpl.nic_vertex.push_back(static_cast<int>(i));
    }
    for (size_t l = 0; l < members.links.size(); ++l) {
      const Link& link = model.links[members.links[l]];
      tmpl.graph.add_link(local_of[link.a], local_of[link.b], static_cast<int>(l), detail::latency_ps(link.latency_us));
    }
    tmpl.costs.resize(tmpl.graph.num_vertices());
  }
}

void Topology::Impl::build_fabric() {
  const auto& devices = model.devices;
  const size_t n = devices.size();
  // A NIC with exactly one link out of its node, to a switch, enters the fabric at that switch;
  // any other NIC with links out of its node becomes a (non-relaying) fabric vertex itself.
  std::vector<int> outside_links(n, 0), last_outside(n, -1);
  for (size_t l = 0; l < model.links.size(); ++l) {
    const Link& link = model.links[l];
    if (devices[link.a].node == devices[link.b].node && devices[link.a].node >= 0) continue;
    for (int end : {link.a, link.b}) {
      if (devices[end].node < 0) continue;
      ++outside_links[end];
      last_outside[end] = static_cast<int>(l);
    }
  }
  auto single_uplink = [&](int nic) {
    if (outside_links[nic] != 1) return false;
    const Link& link = model.links[last_outside[nic]];
    return devices[link.a == nic ? link.b : link.a].node < 0;
  };
  fabric.vertex_of_device.assign(n, -1);
  for (size_t d = 0; d < n; ++d) {
    const bool is_switch = devices[d].node < 0;
    const bool is_nic_vertex =
        devices[d].kind == DeviceKind::Nic && outside_links[d] > 0 && !single_uplink(static_cast<int>(d));
    if (!is_switch && !is_nic_vertex) continue;
    fabric.vertex_of_device[d] = fabric.graph.add_vertex(is_switch);
    fabric.device_of_vertex.push_back(static_cast<int>(d));
  }
  for (size_t l = 0; l < model.links.size(); ++l) {
    const Link& link = model.links[l];
    const int va = fabric.vertex_of_device[link.a], vb = fabric.vertex_of_device[link.b];
    const bool same_node = devices[link.a].node == devices[link.b].node && devices[link.a].node >= 0;
    if (va >= 0 && vb >= 0 && !same_node)
      fabric.graph.add_link(va, vb, static_cast<int>(l), detail::latency_ps(link.latency_us));
  }
  fabric.costs.resize(fabric.graph.num_vertices());
  nic_entry.assign(n, {});
  std::vector<int> ports(fabric.device_of_vertex.size(), 0);  // NICs entering at each vertex so far
  for (size_t d = 0; d < n; ++d) {
    if (devices[d].kind != DeviceKind::Nic) continue;
    if (single_uplink(static_cast<int>(d))) {
      const Link& link = model.links[last_outside[d]];
      const int vertex = fabric.vertex_of_device[link.a == static_cast<int>(d) ? link.b : link.a];
      nic_entry[d] = {vertex, last_outside[d], vertex >= 0 ? ports[size_t(vertex)]++ : 0};
    } else if (fabric.vertex_of_device[d] >= 0) {
      nic_entry[d] = {fabric.vertex_of_device[d], -1, 0};
    }
  }
}

void Topology::Impl::assign_nics() {
  auto first = [](int, int) { return 0; };
  for (detail::NodeTemplate& tmpl : templates) {
    const size_t gpus = tmpl.gpu_vertex.size();
    tmpl.nic_of_gpu.assign(gpus, -1);
    tmpl.gpu_to_nic.assign(gpus, {});
    // GPUs with the same set of nearest NICs take them in turn (DGX A100: two GPUs and two NICs
    // under one PCIe switch get one NIC each; GCP A2: all GPUs share the VM's single NIC).
    std::map<std::vector<int>, int> turn;
    for (size_t g = 0; g < gpus; ++g) {
      const auto& costs = tmpl.costs_from(tmpl.gpu_vertex[g]);
      std::vector<int> nearest;
      detail::RouteCost best = detail::kUnreachable;
      for (size_t k = 0; k < tmpl.nic_vertex.size(); ++k) {
        const detail::RouteCost c = costs[tmpl.nic_vertex[k]];
        if (c == detail::kUnreachable || c > best) continue;
        if (c < best) nearest.clear();
        best = c;
        nearest.push_back(static_cast<int>(k));
      }
      if (nearest.empty()) continue;
      const int nic = nearest[turn[nearest]++ % nearest.size()];
      tmpl.nic_of_gpu[g] = nic;
      tmpl.graph.trace(costs, tmpl.gpu_vertex[g], tmpl.nic_vertex[nic], first, tmpl.gpu_to_nic[g].vertices,
                       tmpl.gpu_to_nic[g].hops);
    }
  }
  gpu_nic.assign(gpu_device.size(), -1);
  for (size_t g = 0; g < gpu_device.size(); ++g) {
    const detail::NodeMembers& members = model.nodes[gpu_node[g]];
    const detail::NodeTemplate& tmpl = templates[members.template_id];
    const int nic = tmpl.nic_of_gpu[gpu_local[g]];
    if (nic >= 0) gpu_nic[g] = members.devices[tmpl.nic_vertex[nic]];
  }
}

// ---- routes ------------------------------------------------------------------------------------

void Topology::Impl::append_local(int node, int src_vertex, int dst_vertex, Route& route) const {
  const detail::NodeMembers& members = model.nodes[node];
  const detail::NodeTemplate& tmpl = templates[members.template_id];
  thread_local std::vector<int> vertices;
  thread_local std::vector<Hop> hops;
  vertices.clear();
  hops.clear();
  tmpl.graph.trace(
      tmpl.costs_from(src_vertex), src_vertex, dst_vertex, [](int, int) { return 0; }, vertices, hops);
  for (int v : vertices)
    route.devices.push_back(members.devices[v]);
  for (const Hop& h : hops)
    route.hops.push_back(Hop{members.links[h.link], h.forward});
}

void Topology::Impl::append_gpu_to_nic(int gpu, bool reverse, Route& route) const {
  const detail::NodeMembers& members = model.nodes[gpu_node[gpu]];
  const detail::LocalPath& path = templates[members.template_id].gpu_to_nic[gpu_local[gpu]];
  if (!reverse) {
    for (int v : path.vertices)
      route.devices.push_back(members.devices[v]);
    for (const Hop& h : path.hops)
      route.hops.push_back(Hop{members.links[h.link], h.forward});
    return;
  }
  // NIC -> GPU: the route already ends at the NIC.
  for (size_t i = path.vertices.size() - 1; i-- > 0;)
    route.devices.push_back(members.devices[path.vertices[i]]);
  for (size_t i = path.hops.size(); i-- > 0;)
    route.hops.push_back(Hop{members.links[path.hops[i].link], !path.hops[i].forward});
}

void Topology::Impl::append_fabric(int src_nic, int dst_nic, uint64_t ecmp_hash, Route& route) const {
  const detail::NicEntry& from = nic_entry[src_nic];
  const detail::NicEntry& to = nic_entry[dst_nic];
  if (from.uplink >= 0) route.hops.push_back(Hop{from.uplink, model.links[from.uplink].a == src_nic});
  thread_local std::vector<int> vertices;
  thread_local std::vector<Hop> hops;
  vertices.clear();
  hops.clear();
  // The trace walks back from the destination, so step 0 picks the spine a flow comes down from.
  const bool d_mod_k = model.fabric.routing == "d-mod-k";
  const auto pick = [ecmp_hash, d_mod_k, port = to.port](int count, int step) {
    if (d_mod_k && step == 0) return port % count;
    return static_cast<int>(detail::mix64(ecmp_hash + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(step + 1)) %
                            static_cast<uint64_t>(count));
  };
  fabric.graph.trace(fabric.costs_from(from.entry), from.entry, to.entry, pick, vertices, hops);
  // Without an uplink the entry vertex is the source NIC itself, already on the route.
  for (size_t i = from.uplink >= 0 ? 0 : 1; i < vertices.size(); ++i)
    route.devices.push_back(fabric.device_of_vertex[vertices[i]]);
  route.hops.insert(route.hops.end(), hops.begin(), hops.end());
  if (to.uplink >= 0) {
    route.hops.push_back(Hop{to.uplink, model.links[to.uplink].b == dst_nic});
    route.devices.push_back(dst_nic);
  }
}

Route Topology::Impl::compute_route(int src_gpu, int dst_gpu) const {
  Route route;
  route.src_gpu = src_gpu;
  route.dst_gpu = dst_gpu;
  route.devices.reserve(12);
  route.hops.reserve(11);
  if (src_gpu == dst_gpu) {
    route.devices.push_back(gpu_device[src_gpu]);
    route.bottleneck_GBps = std::numeric_limits<double>::infinity();
    return route;
  }
  const int src_node = gpu_node[src_gpu], dst_node = gpu_node[dst_gpu];
  if (src_node == dst_node) {
    const auto& tmpl = templates[model.nodes[src_node].template_id];
    append_local(src_node, tmpl.gpu_vertex[gpu_local[src_gpu]], tmpl.gpu_vertex[gpu_local[dst_gpu]], route);
  } else {
    append_gpu_to_nic(src_gpu, false, route);
    append_fabric(gpu_nic[src_gpu], gpu_nic[dst_gpu],
                  (static_cast<uint64_t>(src_gpu) << 32) | static_cast<uint32_t>(dst_gpu), route);
    append_gpu_to_nic(dst_gpu, true, route);
  }
  route.bottleneck_GBps = std::numeric_limits<double>::infinity();
  for (const Hop& hop : route.hops) {
    const Link& link = model.links[hop.link];
    route.bottleneck_GBps = std::min(route.bottleneck_GBps, link.bandwidth_GBps);
    route.latency_us += link.latency_us;
  }
  return route;
}

const Route& Topology::route(int src_gpu, int dst_gpu) const {
  WF_ASSERT(src_gpu >= 0 && src_gpu < num_gpus() && dst_gpu >= 0 && dst_gpu < num_gpus(),
            fmt::format("route({}, {}) on a topology of {} GPUs", src_gpu, dst_gpu, num_gpus()));
  const uint64_t key = (static_cast<uint64_t>(src_gpu) << 32) | static_cast<uint32_t>(dst_gpu);
  if (const Route* have = impl_->routes->find(key)) return *have;
  std::lock_guard lock(impl_->lazy_mutex);
  return impl_->routes->insert(key, [&] { return impl_->compute_route(src_gpu, dst_gpu); });
}

ResourceId Topology::resource_of(const Hop& hop) const {
  const Link& link = impl_->model.links[hop.link];
  return static_cast<ResourceId>(hop.link) * 2 + (link.full_duplex && !hop.forward ? 1 : 0);
}

double Topology::resource_bandwidth_GBps(ResourceId id) const {
  WF_ASSERT(id >= 0 && id / 2 < static_cast<ResourceId>(impl_->model.links.size()), "resource id out of range");
  return impl_->model.links[static_cast<size_t>(id / 2)].bandwidth_GBps;
}

std::vector<ResourceId> Topology::shared_resources(const Route& a, const Route& b) const {
  auto resources = [this](const Route& r) {
    std::vector<ResourceId> out;
    out.reserve(r.hops.size());
    for (const Hop& hop : r.hops)
      out.push_back(resource_of(hop));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  };
  const std::vector<ResourceId> ra = resources(a), rb = resources(b);
  std::vector<ResourceId> shared;
  std::set_intersection(ra.begin(), ra.end(), rb.begin(), rb.end(), std::back_inserter(shared));
  return shared;
}

}  // namespace wallfacer
