// Export targets by name, the dispatch to each target's check and writer, the groups Megatron-LM
// builds (the reference the Megatron and TransformerEngine checks compare a plan with), and the
// notes every framework export shares.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include <wallfacer/core/errors.hpp>
#include "export_impl.hpp"

namespace wallfacer {

namespace {
constexpr std::pair<ExportTarget, const char*> kNames[] = {{ExportTarget::Megatron, "megatron"},
                                                           {ExportTarget::TransformerEngine, "transformer-engine"},
                                                           {ExportTarget::DeepSpeed, "deepspeed"},
                                                           {ExportTarget::Usp, "usp"},
                                                           {ExportTarget::RingFlashAttn, "ring-flash-attn"},
                                                           {ExportTarget::Mpirun, "mpirun"},
                                                           {ExportTarget::Slurm, "slurm"}};
}  // namespace

const char* to_string(ExportTarget target) {
  for (const auto& [t, name] : kNames)
    if (t == target) return name;
  return "?";
}

ExportTarget parse_export_target(const std::string& name) {
  for (const auto& [t, n] : kNames)
    if (name == n) return t;
  std::vector<std::string> names;
  for (const auto& [t, n] : kNames)
    names.emplace_back(n);
  throw InputError("--to", 0, fmt::format("expected one of {}, got '{}'", fmt::join(names, ", "), name));
}

const std::vector<ExportTarget>& all_export_targets() {
  static const std::vector<ExportTarget> targets = [] {
    std::vector<ExportTarget> out;
    for (const auto& [t, n] : kNames)
      out.push_back(t);
    return out;
  }();
  return targets;
}

ExportCheck check_export(const Plan& plan, ExportTarget target) {
  switch (target) {
    case ExportTarget::Megatron:
    case ExportTarget::TransformerEngine:
      return detail::check_megatron(plan);
    case ExportTarget::DeepSpeed:
      return detail::check_deepspeed(plan);
    case ExportTarget::Usp:
      return detail::check_usp(plan);
    case ExportTarget::RingFlashAttn:
      return detail::check_ring_flash_attn(plan);
    case ExportTarget::Mpirun:
    case ExportTarget::Slurm:
      return {true, ""};  // launchers place ranks; any plan's mapping can be written
  }
  return {false, "unknown target"};
}

std::string export_plan(const Plan& plan, ExportTarget target) {
  const ExportCheck check = check_export(plan, target);
  if (!check.expressible)
    throw InputError(
        fmt::format("{} cannot express this plan ({}): {}", to_string(target), detail::describe(plan), check.reason));
  switch (target) {
    case ExportTarget::Megatron:
      return detail::write_megatron(plan);
    case ExportTarget::TransformerEngine:
      return detail::write_transformer_engine(plan);
    case ExportTarget::DeepSpeed:
      return detail::write_deepspeed(plan);
    case ExportTarget::Usp:
      return detail::write_usp(plan);
    case ExportTarget::RingFlashAttn:
      return detail::write_ring_flash_attn(plan);
    case ExportTarget::Mpirun:
      return detail::write_mpirun(plan);
    case ExportTarget::Slurm:
      return detail::write_slurm(plan);
  }
  return "";
}

std::vector<std::vector<int>> megatron_groups(int tp, int cp, int dp, int a2a_size) {
  std::vector<std::vector<int>> out;
  auto rank = [&](int d, int c, int t) { return (d * cp + c) * tp + t; };
  for (int d = 0; d < dp; ++d)
    for (int t = 0; t < tp; ++t) {
      std::vector<int> group;
      for (int c = 0; c < cp; ++c)
        group.push_back(rank(d, c, t));
      out.push_back(group);
      if (a2a_size > 0 && cp % a2a_size == 0) {
        for (int b = 0; b < cp / a2a_size; ++b)
          out.emplace_back(group.begin() + b * a2a_size, group.begin() + (b + 1) * a2a_size);
        for (int j = 0; j < a2a_size; ++j) {
          std::vector<int> p2p;
          for (int b = 0; b < cp / a2a_size; ++b)
            p2p.push_back(group[b * a2a_size + j]);
          out.push_back(p2p);
        }
      }
    }
  for (int d = 0; d < dp; ++d)
    for (int c = 0; c < cp; ++c) {
      std::vector<int> group;
      for (int t = 0; t < tp; ++t)
        group.push_back(rank(d, c, t));
      out.push_back(group);
    }
  for (int c = 0; c < cp; ++c)
    for (int t = 0; t < tp; ++t) {
      std::vector<int> group;
      for (int d = 0; d < dp; ++d)
        group.push_back(rank(d, c, t));
      out.push_back(group);
    }
  for (int t = 0; t < tp; ++t) {  // data parallel with context parallel
    std::vector<int> group;
    for (int d = 0; d < dp; ++d)
      for (int c = 0; c < cp; ++c)
        group.push_back(rank(d, c, t));
    out.push_back(group);
  }
  return out;
}

}  // namespace wallfacer

namespace wallfacer::detail {

std::vector<std::vector<int>> groups_of(const Plan& plan, GroupKind kind) {
  std::vector<std::vector<int>> out;
  for (const CommGroup& group : plan.groups) {
    if (group.kind != kind) continue;
    if (group.name.size() > 4 && group.name.compare(group.name.size() - 4, 4, ".rev") == 0) continue;
    out.push_back(group.ranks);
  }
  return out;
}

std::vector<std::vector<int>> groups_or_singletons(const Plan& plan, GroupKind kind) {
  std::vector<std::vector<int>> out = groups_of(plan, kind);
  if (out.empty())
    for (const RankSlot& slot : plan.ranks)
      out.push_back({slot.rank});
  return out;
}

std::string describe(const Plan& plan) {
  std::string params;
  const StrategyParams& p = plan.params;
  switch (plan.strategy) {
    case StrategyKind::Usp:
      params = fmt::format("u={} r={}", ulysses_degree(p), p.sequence_parallel / ulysses_degree(p));
      break;
    case StrategyKind::DoubleRing:
      params = fmt::format("u={} w={}", ulysses_degree(p), window_size(p));
      break;
    case StrategyKind::WallFacer:
      params = fmt::format("C={}", team_size(p));
      break;
    default:
      params = fmt::format("S={}", p.sequence_parallel);
  }
  if (p.data_parallel > 1) params += fmt::format(" D={}", p.data_parallel);
  if (p.tensor_parallel > 1) params += fmt::format(" T={}", p.tensor_parallel);
  return fmt::format("{} {} on {} ranks ({})", to_string(plan.strategy), params, plan.num_ranks(),
                     to_string(placement_of(p)));
}

std::string launch_note(const Plan& plan) {
  // torchrun numbers ranks node by node (rank = node * local_world + local_rank) and the usual
  // training script takes GPU LOCAL_RANK; a per-node CUDA_VISIBLE_DEVICES permutation covers
  // plans whose ranks follow that node order.
  const int nodes = plan.topology_nodes > 0 ? plan.topology_nodes : 1;
  std::map<int, std::vector<int>> gpus_of_node;
  bool node_major = true;
  for (const RankSlot& slot : plan.ranks) {
    gpus_of_node[slot.node].push_back(slot.local_gpu);
    node_major = node_major && (slot.rank == 0 || slot.node >= plan.ranks[slot.rank - 1].node);
  }
  const std::vector<int>& first = gpus_of_node.begin()->second;
  bool same = node_major;
  for (const auto& [node, gpus] : gpus_of_node)
    same = same && gpus == first;
  std::string out = "# Placement: rank r runs on the plan's GPU (ranks: in the plan file).\n";
  if (same) {
    out += fmt::format(
        "# torchrun --nnodes {} --nproc-per-node {} with CUDA_VISIBLE_DEVICES={} on every node puts "
        "them there.\n",
        std::min<int>(nodes, static_cast<int>(gpus_of_node.size())), first.size(), fmt::join(first, ","));
  } else {
    out +=
        "# The plan's ranks do not follow torchrun's node-major order: start them with `wallfacer export --to "
        "mpirun` or `--to slurm`.\n";
  }
  return out;
}

}  // namespace wallfacer::detail
