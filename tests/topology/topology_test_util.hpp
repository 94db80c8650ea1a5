// Helpers shared by the topology tests: device lookup by name and a structural check that a
// route is a connected walk from its source GPU to its destination GPU.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <wallfacer/topology/topology.hpp>

namespace wallfacer::testing {

inline std::vector<std::string> device_names(const Topology& topo, const Route& route) {
  std::vector<std::string> names;
  for (int id : route.devices)
    names.push_back(topo.devices()[id].name);
  return names;
}

// Every hop joins devices[i] to devices[i+1] in its stated direction; the walk starts and ends
// at the route's GPUs.
inline void expect_well_formed(const Topology& topo, const Route& route) {
  ASSERT_EQ(route.hops.size() + 1, route.devices.size());
  EXPECT_EQ(route.devices.front(), topo.gpu_device(route.src_gpu));
  EXPECT_EQ(route.devices.back(), topo.gpu_device(route.dst_gpu));
  for (size_t i = 0; i < route.hops.size(); ++i) {
    const Link& link = topo.links()[route.hops[i].link];
    const int from = route.hops[i].forward ? link.a : link.b;
    const int to = route.hops[i].forward ? link.b : link.a;
    EXPECT_EQ(from, route.devices[i]) << "hop " << i;
    EXPECT_EQ(to, route.devices[i + 1]) << "hop " << i;
  }
}

}  // namespace wallfacer::testing
