// The framework targets. Megatron-LM and TransformerEngine build their context-parallel groups
// from sizes in a fixed rank order, so a plan is expressible when every group it uses is one of
// those (megatron_groups); DeepSpeed-Ulysses, USP (yunchang) and ring-flash-attn take process
// groups from the caller, so their export builds the plan's own groups in a Python snippet and
// the check is about the attention the library runs.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "export_impl.hpp"

namespace wallfacer::detail {
namespace {

std::string list_text(const std::vector<std::vector<int>>& groups) {
  std::vector<std::string> parts;
  for (const auto& g : groups)
    parts.push_back(fmt::format("[{}]", fmt::join(g, ", ")));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

bool rotation_of(const std::vector<int>& ring, const std::vector<int>& reference) {
  if (ring.size() != reference.size()) return false;
  const auto at = std::find(reference.begin(), reference.end(), ring.front());
  if (at == reference.end()) return false;
  std::vector<int> rotated(at, reference.end());
  rotated.insert(rotated.end(), reference.begin(), at);
  return rotated == ring;
}

// Without sequence parallelism every strategy computes its rank's attention alone, and any
// framework runs that with a sequence group of one rank, whatever the plan's strategy is named.
bool local_attention(const Plan& plan) {
  return plan.params.sequence_parallel <= 1;
}

const char* megatron_comm_type(const Plan& plan) {
  switch (plan.strategy) {
    case StrategyKind::AllGather:
      return "all_gather";
    case StrategyKind::Ulysses:
      return "a2a";
    case StrategyKind::Usp:
      return "a2a+p2p";
    default:
      return "p2p";
  }
}

std::string python_groups_prelude(const Plan& plan) {
  return fmt::format(
      "# Process groups of the plan: {}.\n"
      "# Run on every rank after torch.distributed.init_process_group(\"nccl\"); the ranks must be\n"
      "# started on the plan's GPUs (see the placement note below).\n"
      "import torch.distributed as dist\n\n\n"
      "def my_group(groups):\n"
      "    \"\"\"Creates every group (all ranks must, in the same order) and returns this rank's.\"\"\"\n"
      "    mine = None\n"
      "    for ranks in groups:\n"
      "        group = dist.new_group(ranks)\n"
      "        if dist.get_rank() in ranks:\n"
      "            mine = group\n"
      "    return mine\n\n\n",
      describe(plan));
}

std::string placement_comment(const Plan& plan) {
  return "\n" + launch_note(plan);
}

// Why Megatron-LM cannot run the plan's strategy, or "" (attention alone, S = 1, it runs with a
// context-parallel size of 1).
std::string megatron_strategy_refusal(const Plan& plan) {
  if (local_attention(plan)) return "";
  switch (plan.strategy) {
    case StrategyKind::WallFacer:
      if (team_size(plan.params) == 1)
        return "WallFacer with C = 1 is one ring whose backward passes the queries and their dQ while dK,dV stay "
               "(pass-Q); Megatron-LM's p2p context parallelism passes K,V and dK,dV around the ring";
      return "Megatron-LM's context parallelism runs one ring per group (p2p), an all-gather, an all-to-all or "
             "a2a+p2p; WallFacer's teams of C GPUs with C^2 concurrent sub-rings have no cp_comm_type";
    case StrategyKind::DoubleRing:
      return "Megatron-LM has no double ring: its a2a+p2p hierarchy is Ulysses x ring, not LoongTrain's inner and "
             "outer rings of windows";
    case StrategyKind::Lss:
      return "Megatron-LM has no LSS Transformer attention";
    case StrategyKind::Ring:
      if (plan.workload.causal)
        return "Megatron-LM always splits a causal sequence into 2 x CP chunks balanced as zigzag; the plan's ring "
               "on contiguous chunks is not what it runs";
      return "";
    default:
      return "";
  }
}

}  // namespace

ExportCheck check_megatron(const Plan& plan) {
  if (std::string why = megatron_strategy_refusal(plan); !why.empty()) return {false, std::move(why)};
  const int tp = plan.params.tensor_parallel, cp = plan.params.sequence_parallel, dp = plan.params.data_parallel;
  const int a2a = plan.strategy == StrategyKind::Usp ? ulysses_degree(plan.params) : 0;
  const std::vector<std::vector<int>> reference = megatron_groups(tp, cp, dp, a2a);
  std::set<std::vector<int>> as_sets;
  for (auto g : reference) {
    std::sort(g.begin(), g.end());
    as_sets.insert(g);
  }
  for (const CommGroup& group : plan.groups) {
    if (group.kind == GroupKind::Ring) {
      if (std::none_of(reference.begin(), reference.end(),
                       [&](const std::vector<int>& r) { return rotation_of(group.ranks, r); }))
        return {false, fmt::format("the plan's ring {} [{}] is not a ring Megatron-LM builds in its rank order "
                                   "tp-cp-dp (its rings follow CP rank order{})",
                                   group.name, fmt::join(group.ranks, ", "),
                                   a2a > 0 ? "; a2a+p2p puts the a2a groups on consecutive CP ranks: head-first" : "")};
      continue;
    }
    std::vector<int> sorted = group.ranks;
    std::sort(sorted.begin(), sorted.end());
    if (!as_sets.count(sorted))
      return {false, fmt::format("the plan's {} group {} [{}] is not a group Megatron-LM builds in its rank order "
                                 "tp-cp-dp",
                                 to_string(group.kind), group.name, fmt::join(group.ranks, ", "))};
  }
  return {true, ""};
}

std::string write_megatron(const Plan& plan) {
  const StrategyParams& p = plan.params;
  std::string out = fmt::format(
      "# Megatron-LM settings for the plan: {}.\n"
      "# Rank order tp-cp-dp (Megatron-Core's default): rank = (dp * CP + cp) * TP + tp.\n"
      "--tensor-model-parallel-size {}\n--context-parallel-size {}\n--cp-comm-type {}\n",
      describe(plan), p.tensor_parallel, p.sequence_parallel, megatron_comm_type(plan));
  if (plan.strategy == StrategyKind::Usp)
    out += fmt::format("--hierarchical-context-parallel-sizes {} {}\n", ulysses_degree(p),
                       p.sequence_parallel / ulysses_degree(p));
  out += "--pipeline-model-parallel-size 1\n";
  out += fmt::format("# data-parallel size: {} (world size {} / (TP {} x CP {})), which Megatron-LM derives\n",
                     p.data_parallel, plan.num_ranks(), p.tensor_parallel, p.sequence_parallel);
  return out + launch_note(plan);
}

std::string write_transformer_engine(const Plan& plan) {
  const StrategyParams& p = plan.params;
  const bool usp = plan.strategy == StrategyKind::Usp;
  const std::vector<std::vector<int>> groups =
      megatron_groups(p.tensor_parallel, p.sequence_parallel, p.data_parallel, 0);
  const std::vector<std::vector<int>> cp_groups(groups.begin(), groups.begin() + p.data_parallel * p.tensor_parallel);
  std::string out = python_groups_prelude(plan);
  out += fmt::format("CP_COMM_TYPE = \"{}\"\nCP_GROUPS = {}\n", megatron_comm_type(plan), list_text(cp_groups));
  if (usp) {
    const int u = ulysses_degree(p), r = p.sequence_parallel / u;
    std::vector<std::vector<int>> a2a, p2p;
    for (const std::vector<int>& cp : cp_groups) {
      for (int b = 0; b < r; ++b)
        a2a.emplace_back(cp.begin() + b * u, cp.begin() + (b + 1) * u);
      for (int j = 0; j < u; ++j) {
        std::vector<int> ring;
        for (int b = 0; b < r; ++b)
          ring.push_back(cp[b * u + j]);
        p2p.push_back(ring);
      }
    }
    out += fmt::format("A2A_GROUPS = {}\nP2P_GROUPS = {}\n", list_text(a2a), list_text(p2p));
  }
  out += "\ncp_group = my_group(CP_GROUPS)\ncp_global_ranks = next(g for g in CP_GROUPS if dist.get_rank() in g)\n";
  if (usp) out += "cp_group = [my_group(A2A_GROUPS), my_group(P2P_GROUPS)]  # a2a+p2p takes [a2a group, p2p group]\n";
  out +=
      "# on each transformer_engine.pytorch.DotProductAttention / TransformerLayer:\n"
      "# attention.set_context_parallel_group(cp_group, cp_global_ranks, torch.cuda.Stream(), "
      "cp_comm_type=CP_COMM_TYPE)\n";
  return out + placement_comment(plan);
}

ExportCheck check_deepspeed(const Plan& plan) {
  if (plan.strategy != StrategyKind::Ulysses && !local_attention(plan))
    return {false, fmt::format("DeepSpeed-Ulysses runs Ulysses alone (an all-to-all over heads); the plan runs {}",
                               to_string(plan.strategy))};
  return {true, ""};
}

std::string write_deepspeed(const Plan& plan) {
  std::string out = python_groups_prelude(plan);
  out += fmt::format("SEQUENCE_PARALLEL_SIZE = {}\nULYSSES_GROUPS = {}\n\n", plan.params.sequence_parallel,
                     list_text(groups_or_singletons(plan, GroupKind::AllToAll)));
  out +=
      "from deepspeed.sequence.layer import DistributedAttention\n\n"
      "sp_group = my_group(ULYSSES_GROUPS)\n"
      "# attention = DistributedAttention(local_attention, sp_group)  # wraps the per-rank attention\n";
  return out + placement_comment(plan);
}

ExportCheck check_usp(const Plan& plan) {
  if (local_attention(plan)) return {true, ""};
  switch (plan.strategy) {
    case StrategyKind::Usp:
    case StrategyKind::Ulysses:
    case StrategyKind::Ring:
    case StrategyKind::Zigzag:
      return {true, ""};
    default:
      return {false, fmt::format("yunchang's LongContextAttention runs Ulysses x ring (basic or zigzag); the plan "
                                 "runs {}",
                                 to_string(plan.strategy))};
  }
}

std::string write_usp(const Plan& plan) {
  const StrategyParams& p = plan.params;
  const int u = plan.strategy == StrategyKind::Usp       ? ulysses_degree(p)
                : plan.strategy == StrategyKind::Ulysses ? p.sequence_parallel
                                                         : 1;
  // One rank alone is a group too: yunchang needs both groups on every rank.
  const std::vector<std::vector<int>> ulysses = groups_or_singletons(plan, GroupKind::AllToAll);
  const std::vector<std::vector<int>> rings = groups_or_singletons(plan, GroupKind::Ring);
  const bool zigzag =
      plan.strategy == StrategyKind::Zigzag || (plan.strategy == StrategyKind::Usp && plan.workload.causal);
  // yunchang's use_ulysses_low: Ulysses groups on consecutive sequence-parallel ranks.
  bool ulysses_low = true;
  for (const std::vector<int>& group : ulysses)
    for (size_t i = 1; i < group.size(); ++i)
      ulysses_low = ulysses_low && group[i] - group[i - 1] == p.tensor_parallel;
  std::string out = python_groups_prelude(plan);
  out += fmt::format(
      "ULYSSES_DEGREE = {}\nRING_DEGREE = {}\nUSE_ULYSSES_LOW = {}  # Ulysses groups on consecutive sequence-parallel "
      "ranks\n"
      "RING_IMPL_TYPE = \"{}\"\nULYSSES_GROUPS = {}\nRING_GROUPS = {}\n\n",
      u, p.sequence_parallel / u, ulysses_low ? "True" : "False", zigzag ? "zigzag" : "basic", list_text(ulysses),
      list_text(rings));
  out +=
      "from yunchang import LongContextAttention\nfrom yunchang.globals import PROCESS_GROUP\n\n"
      "# What yunchang.set_seq_parallel_pg(ULYSSES_DEGREE, RING_DEGREE, rank, world_size, USE_ULYSSES_LOW) sets,\n"
      "# with the plan's own groups (they also cover tensor and data parallel ranks):\n"
      "PROCESS_GROUP.ULYSSES_PG = my_group(ULYSSES_GROUPS)\nPROCESS_GROUP.RING_PG = my_group(RING_GROUPS)\n"
      "attention = LongContextAttention(ring_impl_type=RING_IMPL_TYPE)\n";
  return out + placement_comment(plan);
}

ExportCheck check_ring_flash_attn(const Plan& plan) {
  if (local_attention(plan)) return {true, ""};
  switch (plan.strategy) {
    case StrategyKind::Ring:
    case StrategyKind::Zigzag:
    case StrategyKind::AllGather:
      return {true, ""};
    default:
      return {false, fmt::format("ring-flash-attn runs one ring (plain or zigzag) or the llama3 all-gather; the plan "
                                 "runs {}",
                                 to_string(plan.strategy))};
  }
}

std::string write_ring_flash_attn(const Plan& plan) {
  const bool gather = plan.strategy == StrategyKind::AllGather;
  const char* function = gather                                  ? "llama3_flash_attn_varlen_func"
                         : plan.strategy == StrategyKind::Zigzag ? "zigzag_ring_flash_attn_func"
                                                                 : "ring_flash_attn_func";
  std::string out = python_groups_prelude(plan);
  out += fmt::format("VARIANT = \"{}\"\nRING_GROUPS = {}\n\n",
                     gather ? "llama3" : (plan.strategy == StrategyKind::Zigzag ? "zigzag" : "ring"),
                     list_text(groups_or_singletons(plan, gather ? GroupKind::Sequence : GroupKind::Ring)));
  out += fmt::format("from ring_flash_attn import {}\n\ngroup = my_group(RING_GROUPS)\n", function);
  if (plan.strategy == StrategyKind::Zigzag)
    out += "# zigzag: rank i of a ring holds sequence chunks i and 2 * len(ring) - 1 - i\n";
  out +=
      fmt::format("# out = {}(q, k, v, causal={}, group=group{})\n", function, plan.workload.causal ? "True" : "False",
                  gather ? ", ... cu_seqlens from llama3_flash_attn_prepare_cu_seqlens" : "");
  return out + placement_comment(plan);
}

}  // namespace wallfacer::detail
