// The SimGrid platform of a topology: every GPU a host running at its peak FLOP rate (a second
// power state at the slowed rate when compute slows down under communication), a SimGrid link
// per resource a route uses (each direction of a full-duplex link, a half-duplex link once, as
// in Topology::resource_of), or per chain of resources carrying the same routes, and one
// explicit route per GPU pair the schedule uses, made of Topology::route's hops. Switches, CPUs
// and NICs are the joints between hops and need no SimGrid object: a Full zone's routing table
// grows with the square of its members, and 4,096 GPUs plus their switches would not fit.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <wallfacer/topology/topology.hpp>
#include "simgrid_adapter.hpp"

namespace wallfacer::sim {

struct PlatformLayout {
  std::vector<int> host_of_gpu;  // engine host per topology GPU index
};

// Hosts for all GPUs (speeds per power state, FLOP/s).
PlatformLayout declare_hosts(SimEngine& engine, const Topology& topology, const std::vector<double>& gpu_speeds);

enum class LinkDetail {
  Physical,  // every link of the topology, as it is
  // Resources (link directions) that carry exactly the same routes become one SimGrid link with
  // their smallest bandwidth and summed latency. Under max-min sharing with unit weights (CM02
  // without TCP effects) the allocation and every transfer's time are unchanged: identical
  // constraints over the same flows bind together, and each route keeps its total latency. The
  // sharing system shrinks, e.g. an inter-node DGX route from 8 links to 4 (GPU-PCIe-NIC-leaf
  // chains merge), which is what makes thousands of GPUs affordable.
  MergedChains,
};

struct NetworkDeclared {
  size_t routes = 0;  // one-way GPU pairs routed
  size_t links = 0;   // SimGrid links created
};

// Links and one-way routes from each pair's first GPU to its second (duplicates skipped). Only
// links some route uses are created.
NetworkDeclared declare_network(SimEngine& engine, const Topology& topology, const PlatformLayout& layout,
                                std::vector<std::pair<int, int>> gpu_pairs, LinkDetail detail);

// "n0/gpu3->n0/nvswitch0" for one direction of a full-duplex link, "a<->b" for a shared one.
std::string resource_name(const Topology& topology, ResourceId resource);
// Number of resource ids (Topology::resource_of is below this).
size_t resource_count(const Topology& topology);

}  // namespace wallfacer::sim
