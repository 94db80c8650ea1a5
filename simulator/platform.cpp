#include "simulator/platform.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace wallfacer::sim {

PlatformLayout declare_platform(SimEngine& engine, const Topology& topology, const std::vector<double>& gpu_speeds) {
  PlatformLayout layout;
  const auto& devices = topology.devices();
  for (int gpu = 0; gpu < topology.num_gpus(); ++gpu)
    layout.host_of_gpu.push_back(engine.add_host({devices[size_t(topology.gpu_device(gpu))].name, gpu_speeds}));
  const auto& links = topology.links();
  for (size_t i = 0; i < links.size(); ++i) {
    const Link& link = links[i];
    LinkSpec spec;
    spec.name = fmt::format("link{}:{}-{}", i, devices[size_t(link.a)].name, devices[size_t(link.b)].name);
    spec.bandwidth_Bps = link.bandwidth_GBps * 1e9;
    spec.latency_s = link.latency_us * 1e-6;
    spec.split_duplex = link.full_duplex;
    engine.add_link(spec);
  }
  return layout;
}

size_t declare_routes(SimEngine& engine, const Topology& topology, const PlatformLayout& layout,
                      std::vector<std::pair<int, int>> gpu_pairs) {
  std::sort(gpu_pairs.begin(), gpu_pairs.end());
  gpu_pairs.erase(std::unique(gpu_pairs.begin(), gpu_pairs.end()), gpu_pairs.end());
  std::vector<LinkUse> uses;
  for (const auto& [src, dst] : gpu_pairs) {
    uses.clear();
    if (src != dst)
      for (const Hop& hop : topology.route(src, dst).hops)
        uses.push_back({hop.link, hop.forward});
    engine.add_route(layout.host_of_gpu[size_t(src)], layout.host_of_gpu[size_t(dst)], uses);
  }
  return gpu_pairs.size();
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
