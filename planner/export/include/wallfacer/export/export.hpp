// A plan as what a user sets in the framework or launcher they already run: Megatron-LM and
// TransformerEngine context parallelism (size, cp_comm_type, hierarchical sizes, rank order),
// DeepSpeed-Ulysses and USP (yunchang) process groups as a runnable Python snippet,
// ring-flash-attn's ring group and variant, an mpirun rank file and Slurm options that put each
// rank on the GPU the plan chose (docs/export.md). A plan a target cannot express is refused
// with the reason, and nearest_expressible_plan finds the best plan that it can express.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/search/search.hpp>

namespace wallfacer {

class Topology;
class CostModel;

enum class ExportTarget { Megatron, TransformerEngine, DeepSpeed, Usp, RingFlashAttn, Mpirun, Slurm };
const char* to_string(ExportTarget target);            // "megatron", "transformer-engine", ...
ExportTarget parse_export_target(const std::string&);  // throws InputError listing the targets
const std::vector<ExportTarget>& all_export_targets();

struct ExportCheck {
  bool expressible = false;
  std::string reason;  // why not, in a sentence; empty when expressible
};
ExportCheck check_export(const Plan& plan, ExportTarget target);

// The settings as text (flags, a Python snippet, a rank file...), commented. Throws InputError
// with check_export's reason when the target cannot express the plan.
std::string export_plan(const Plan& plan, ExportTarget target);

// The groups Megatron-LM builds for TP x CP x DP in its default order tp-cp-dp (rank =
// (dp * CP + cp) * TP + tp), with a2a+p2p's hierarchy when `a2a_size` > 0: context-parallel
// groups in CP-rank order, then the hierarchical a2a groups (blocks of a2a_size CP ranks) and p2p
// groups (strided), tensor groups, data groups and the data-with-context groups.
std::vector<std::vector<int>> megatron_groups(int tp, int cp, int dp, int a2a_size);

// The best plan of the same workload, scope, GPU count and tensor degree on `topology` that
// `target` can express, with its search candidate; nullopt when none is feasible.
std::optional<Candidate> nearest_expressible_plan(const Plan& plan, ExportTarget target, const Topology& topology,
                                                  const CostModel& model);

}  // namespace wallfacer
