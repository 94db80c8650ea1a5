// Internal to the export component: the plan's groups by kind, and the per-target writers
// (frameworks.cpp: Megatron-LM, TransformerEngine, DeepSpeed, USP, ring-flash-attn;
// launchers.cpp: mpirun, Slurm) and checks that export.cpp dispatches to.
#pragma once

#include <string>
#include <vector>

#include <wallfacer/export/export.hpp>

namespace wallfacer::detail {

// The rank lists of the plan's groups of `kind`, in plan order ("*.rev" duplicates left out).
std::vector<std::vector<int>> groups_of(const Plan& plan, GroupKind kind);
// The same, or every rank alone where the plan has none of that kind (a framework's sequence
// group of one rank: a plan without sequence parallelism, or Ulysses' side of a plain ring).
std::vector<std::vector<int>> groups_or_singletons(const Plan& plan, GroupKind kind);
// "usp u=2 r=2 T=4 on 16 ranks (head-first)" for headers.
std::string describe(const Plan& plan);
// How to start rank r on the plan's GPU with torchrun, as comment lines.
std::string launch_note(const Plan& plan);

ExportCheck check_megatron(const Plan& plan);
ExportCheck check_deepspeed(const Plan& plan);
ExportCheck check_usp(const Plan& plan);
ExportCheck check_ring_flash_attn(const Plan& plan);

std::string write_megatron(const Plan& plan);
std::string write_transformer_engine(const Plan& plan);
std::string write_deepspeed(const Plan& plan);
std::string write_usp(const Plan& plan);
std::string write_ring_flash_attn(const Plan& plan);
std::string write_mpirun(const Plan& plan);
// The plan's one ring as an NCCL_GRAPH_FILE per node, in "#NCCL_GRAPH node<N> " comment lines
// (nccl_graph.cpp); a comment with the reason when NCCL cannot follow it; "" without one ring.
std::string nccl_ring_graphs(const Plan& plan);
std::string write_slurm(const Plan& plan);

}  // namespace wallfacer::detail
