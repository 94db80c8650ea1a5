#include "platform.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace wallfacer::sim {
namespace {

struct RouteSet {
  std::vector<std::pair<int, int>> pairs;          // sorted, distinct; src == dst is a free loopback
  std::vector<std::vector<ResourceId>> resources;  // per pair, along the route
};

RouteSet route_pairs(const Topology& topology, std::vector<std::pair<int, int>> gpu_pairs) {
  std::sort(gpu_pairs.begin(), gpu_pairs.end());
  gpu_pairs.erase(std::unique(gpu_pairs.begin(), gpu_pairs.end()), gpu_pairs.end());
  RouteSet set;
  for (const auto& pair : gpu_pairs) {
    std::vector<ResourceId> resources;
    if (pair.first != pair.second)
      for (const Hop& hop : topology.route(pair.first, pair.second).hops)
        resources.push_back(topology.resource_of(hop));
    set.pairs.push_back(pair);
    set.resources.push_back(std::move(resources));
  }
  return set;
}

LinkSpec resource_spec(const Topology& topology, ResourceId resource) {
  const Link& link = topology.links()[size_t(resource / 2)];
  return {resource_name(topology, resource), link.bandwidth_GBps * 1e9, link.latency_us * 1e-6, false};
}

// Engine links: one per chain; `of` maps every resource some route uses to its chain's link.
struct EngineLinks {
  std::unordered_map<ResourceId, int> of;
  size_t count = 0;
};

EngineLinks declare_links(SimEngine& engine, const Topology& topology, const RouteSet& set, LinkDetail detail) {
  // Routes using each resource, in route order (so equal sets compare equal as vectors).
  std::unordered_map<ResourceId, std::vector<uint32_t>> users;
  std::vector<ResourceId> order;  // first-use order, for deterministic link numbering
  for (size_t r = 0; r < set.resources.size(); ++r)
    for (ResourceId resource : set.resources[r]) {
      auto [it, inserted] = users.try_emplace(resource);
      if (inserted) order.push_back(resource);
      it->second.push_back(uint32_t(r));
    }
  // Chains in order of their first resource's first use, so links are numbered deterministically.
  std::vector<std::vector<ResourceId>> chains;
  std::map<std::vector<uint32_t>, size_t> chain_of;  // MergedChains: by route set
  for (ResourceId resource : order) {
    if (detail == LinkDetail::Physical) {
      chains.push_back({resource});
      continue;
    }
    auto [it, inserted] = chain_of.try_emplace(users[resource], chains.size());
    if (inserted) chains.emplace_back();
    chains[it->second].push_back(resource);
  }
  EngineLinks links;
  links.count = chains.size();
  for (const auto& members : chains) {
    LinkSpec spec = resource_spec(topology, members.front());
    for (size_t i = 1; i < members.size(); ++i) {
      LinkSpec next = resource_spec(topology, members[i]);
      spec.bandwidth_Bps = std::min(spec.bandwidth_Bps, next.bandwidth_Bps);
      spec.latency_s += next.latency_s;
    }
    if (members.size() > 1) spec.name += fmt::format("+{}", members.size() - 1);
    int link = engine.add_link(spec);
    for (ResourceId resource : members)
      links.of[resource] = link;
  }
  return links;
}

}  // namespace

PlatformLayout declare_hosts(SimEngine& engine, const Topology& topology, const std::vector<double>& gpu_speeds) {
  PlatformLayout layout;
  const auto& devices = topology.devices();
  for (int gpu = 0; gpu < topology.num_gpus(); ++gpu)
    layout.host_of_gpu.push_back(engine.add_host({devices[size_t(topology.gpu_device(gpu))].name, gpu_speeds}));
  return layout;
}

NetworkDeclared declare_network(SimEngine& engine, const Topology& topology, const PlatformLayout& layout,
                                std::vector<std::pair<int, int>> gpu_pairs, LinkDetail detail) {
  RouteSet set = route_pairs(topology, std::move(gpu_pairs));
  const EngineLinks links = declare_links(engine, topology, set, detail);
  std::vector<LinkUse> uses;
  for (size_t r = 0; r < set.pairs.size(); ++r) {
    uses.clear();
    for (ResourceId resource : set.resources[r]) {
      int link = links.of.at(resource);
      // A merged chain is crossed once, at its first member.
      if (std::none_of(uses.begin(), uses.end(), [&](const LinkUse& u) { return u.link == link; }))
        uses.push_back({link, true});
    }
    const auto& [src, dst] = set.pairs[r];
    engine.add_route(layout.host_of_gpu[size_t(src)], layout.host_of_gpu[size_t(dst)], uses);
  }
  return {set.pairs.size(), links.count};
}

std::string resource_name(const Topology& topology, ResourceId resource) {
  const Link& link = topology.links()[size_t(resource / 2)];
  const auto& devices = topology.devices();
  const std::string& a = devices[size_t(link.a)].name;
  const std::string& b = devices[size_t(link.b)].name;
  if (!link.full_duplex) return fmt::format("{}<->{}", a, b);
  bool forward = topology.resource_of(Hop{int(resource / 2), true}) == resource;
  return forward ? fmt::format("{}->{}", a, b) : fmt::format("{}->{}", b, a);
}

size_t resource_count(const Topology& topology) {
  return topology.links().size() * 2;
}

}  // namespace wallfacer::sim
