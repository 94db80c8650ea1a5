// The launcher targets: an Open MPI rank file with a wrapper that sets each rank's GPU, and
// Slurm's arbitrary distribution (a host file in rank order) with --gpu-bind=map_gpu, so that
// rank r runs on the node and GPU the plan chose. Host names are placeholders node0, node1, ...
// for the plan's topology nodes. Where the plan has one ring, its order is printed for NCCL, with
// an NCCL_GRAPH_FILE per node that sets it (nccl_graph.cpp).
#include <fmt/format.h>

#include <map>

#include "export_impl.hpp"

namespace wallfacer::detail {
namespace {

std::string local_gpus_in_rank_order(const Plan& plan) {
  std::vector<int> gpus;
  for (const RankSlot& slot : plan.ranks)
    gpus.push_back(slot.local_gpu);
  return fmt::format("{}", fmt::join(gpus, " "));
}

// NCCL chooses its own ring order; a plan whose attention is one ring states it, and the graph
// files that make NCCL follow it.
std::string ring_order_note(const Plan& plan) {
  const std::vector<std::vector<int>> rings = groups_of(plan, GroupKind::Ring);
  if (rings.size() != 1) return "";
  std::vector<std::string> hops;
  for (int r : rings.front())
    hops.push_back(fmt::format("{} (node{} GPU {})", r, plan.ranks[r].node, plan.ranks[r].local_gpu));
  return fmt::format("# NCCL ring order of the plan's one ring: {}\n", fmt::join(hops, " -> ")) +
         nccl_ring_graphs(plan);
}

}  // namespace

std::string write_mpirun(const Plan& plan) {
  std::string out = fmt::format(
      "# Open MPI rank file for the plan: {}.\n"
      "# mpirun -np {} --rankfile THIS_FILE wallfacer-gpu.sh PROGRAM ARGS   (replace node<N> by host names)\n"
      "# wallfacer-gpu.sh sets the rank's GPU, local index per rank in rank order:\n"
      "#   #!/bin/sh\n"
      "#   GPUS=\"{}\"\n"
      "#   export CUDA_VISIBLE_DEVICES=$(echo $GPUS | cut -d' ' -f$((OMPI_COMM_WORLD_RANK + 1)))\n"
      "#   exec \"$@\"\n",
      describe(plan), plan.num_ranks(), local_gpus_in_rank_order(plan));
  out += ring_order_note(plan);
  for (const RankSlot& slot : plan.ranks)
    out += fmt::format("rank {}=node{} slot={}\n", slot.rank, slot.node, slot.local_gpu);
  return out;
}

std::string write_slurm(const Plan& plan) {
  // map_gpu lists GPUs by local task id, which under the arbitrary distribution is the order of
  // a node's ranks; one list serves when every node takes its GPUs in the same order.
  std::map<int, std::vector<int>> gpus_of_node;
  for (const RankSlot& slot : plan.ranks)
    gpus_of_node[slot.node].push_back(slot.local_gpu);
  const std::vector<int>& first = gpus_of_node.begin()->second;
  bool same = true;
  for (const auto& [node, gpus] : gpus_of_node)
    same = same && gpus == first;
  std::string out = fmt::format("# Slurm launch of the plan: {}.\n", describe(plan));
  out += ring_order_note(plan);
  out +=
      "# Save the host list below as plan.hosts (one line per rank, in rank order; replace node<N> by host names).\n";
  out += "export SLURM_HOSTFILE=plan.hosts\n";
  if (same) {
    out += fmt::format("srun --ntasks={} --distribution=arbitrary --gpu-bind=map_gpu:{} PROGRAM ARGS\n",
                       plan.num_ranks(), fmt::join(first, ","));
  } else {
    out += fmt::format(
        "# nodes take their GPUs in different orders, which one map_gpu list cannot say: set the GPU per rank\n"
        "srun --ntasks={} --distribution=arbitrary --gpu-bind=none sh -c 'GPUS=\"{}\"; export "
        "CUDA_VISIBLE_DEVICES=$(echo $GPUS | cut -d\" \" -f$((SLURM_PROCID + 1))); exec PROGRAM ARGS'\n",
        plan.num_ranks(), local_gpus_in_rank_order(plan));
  }
  out += "# plan.hosts:\n";
  for (const RankSlot& slot : plan.ranks)
    out += fmt::format("#HOST node{}\n", slot.node);
  return out;
}

}  // namespace wallfacer::detail
