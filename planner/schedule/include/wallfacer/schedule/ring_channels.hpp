// NCCL's channels for the ring algorithm of all-gather, reduce-scatter and all-reduce, in the one
// form the cost model and the simulator share (docs/cost-model.md "Collectives"). NCCL does not
// run one ring over a group that spans nodes: it runs several channels, rings over the same ranks
// that leave each node through different NICs, and splits every buffer among them, so the part of
// a ring collective that crosses nodes gets the bandwidth of a node's NICs together.
#pragma once

#include <cstdint>
#include <vector>

#include <wallfacer/plan/plan.hpp>

namespace wallfacer {

class Topology;

// The rings a group's ring collectives run on, all at once, each carrying 1/count() of every
// block. rings[c][i] is the member (an index into CommGroup::ranks) at position i of channel c,
// and at[c][m] the position of member m in it.
struct RingChannels {
  std::vector<std::vector<int32_t>> rings, at;
  int count() const { return int(rings.size()); }
};

// A group's channels, derived from the topology as NCCL's search builds them:
// - One channel, the ring over the members in group order (the algorithm of docs/algorithms.md
//   §10.1), when the group lies on one node or a node holds members behind one NIC only (a node
//   with a single member, or a NIC shared by all of them): channels add no bandwidth there.
// - Otherwise as many channels as the fewest distinct NICs the members of one node reach
//   (Topology::nic_of_gpu, the NIC nearest each GPU, the one NCCL's search tries first for it).
//   The ring visits the nodes in the order of their first member in the group, and inside a node
//   the node's members grouped by NIC (NICs in the order of their first member, a NIC's members
//   in group order: the group order itself where every GPU has its own NIC), as a chain that
//   enters the node at the first member of the channel's NIC (channel c: the c-th NIC) and
//   leaves it from the member before it, so every channel leaves a node through a different NIC.
//   On every other node the chain runs backwards, entering at that member and leaving from the
//   first one: each edge between nodes joins members at the same position of their nodes, the
//   same rail on a rail-optimised fabric (NCCL 2.20's alternating rings, src/graph/connect.cc:
//   odd nodes exchange the two rings of a pair "to avoid crossing rails"). With an odd node count
//   the edge that closes the ring crosses rails, as NCCL's does.
RingChannels ring_channels(const Plan& plan, int group, const Topology& topology);

}  // namespace wallfacer
