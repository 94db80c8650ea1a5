// Pipeline stages of a plan (pipeline_parallel.hpp).
#include "pipeline_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::detail {

Feasibility pipeline_feasibility(const StrategyParams& params, const Workload& w, int ranks) {
  auto no = [](std::string why) { return Feasibility{false, std::move(why)}; };
  const int Pp = params.pipeline_parallel, M = w.microbatches;
  if (Pp < 1) return no(fmt::format("pipeline parallel degree {} must be at least 1", Pp));
  if (M < 1) return no(fmt::format("{} micro-batches: must be at least 1", M));
  if (ranks % Pp != 0) return no(fmt::format("{} ranks not divisible by pipeline parallel degree {}", ranks, Pp));
  if (w.layers % Pp != 0)
    return no(fmt::format("layers ({}) not divisible by pipeline parallel degree {}", w.layers, Pp));
  const int64_t D = params.data_parallel;
  if (w.batch % (D * M) != 0)
    return no(fmt::format("batch ({}) not divisible by data parallel degree {} x {} micro-batches", w.batch, D, M));
  return interleave_feasibility(params, w);
}

// Megatron-LM's interleaved schedule asserts that the micro-batches divide into groups of Pp
// (its README, "the number of microbatches ... should be divisible by the PIPELINE_MP_SIZE"):
// the schedule walks Pp micro-batches through one chunk after the other.
Feasibility interleave_feasibility(const StrategyParams& params, const Workload& w) {
  auto no = [](std::string why) { return Feasibility{false, std::move(why)}; };
  const int Pp = params.pipeline_parallel, v = params.virtual_stages, M = w.microbatches;
  if (v < 1) return no(fmt::format("{} virtual stages: must be at least 1", v));
  if (v == 1) return {};
  if (Pp < 2)
    return no(fmt::format("{} virtual stages need pipeline parallelism (pipeline parallel degree {})", v, Pp));
  if (w.layers % (Pp * v) != 0)
    return no(fmt::format("layers ({}) not divisible by {} pipeline stages x {} virtual stages", w.layers, Pp, v));
  if (M % Pp != 0)
    return no(
        fmt::format("{} micro-batches not divisible by the {} pipeline stages (interleaved 1F1B with {} virtual "
                    "stages runs them in groups of {})",
                    M, Pp, v, Pp));
  return {};
}

Feasibility interleave_strategy_feasibility(StrategyKind strategy, const StrategyParams& params) {
  if (params.virtual_stages <= 1 || params.sequence_parallel <= 1) return {};
  switch (strategy) {
    case StrategyKind::Ulysses:
    case StrategyKind::AllGather:
    case StrategyKind::Lss:
      return {};
    default:
      return {false, fmt::format("{} virtual stages with {} (S = {}): its point-to-point messages share the send and "
                                 "receive streams with the stage messages, which interleaved 1F1B orders so that "
                                 "they can wait on each other; use --vpp 1 or a collective strategy",
                                 params.virtual_stages, to_string(strategy), params.sequence_parallel)};
  }
}

StrategyParams stage_params(const StrategyParams& params) {
  StrategyParams s = params;
  s.pipeline_parallel = 1;
  s.virtual_stages = 1;
  return s;
}

Workload micro_workload(const Workload& w) {
  Workload m = w;
  m.batch = w.batch / std::max(1, w.microbatches);
  m.microbatches = 1;
  return m;
}

std::vector<CommGroup> lift_stage_groups(const std::vector<CommGroup>& stage_groups, int Pp, int W) {
  if (Pp == 1) return stage_groups;
  std::vector<CommGroup> out;
  out.reserve(stage_groups.size() * size_t(Pp) + size_t(W));
  for (int p = 0; p < Pp; ++p)
    for (const CommGroup& g : stage_groups) {
      CommGroup lifted = g;
      lifted.name = fmt::format("p{}.{}", p, g.name);
      for (int& r : lifted.ranks)
        r += p * W;
      out.push_back(std::move(lifted));
    }
  for (int r = 0; r < W; ++r) {
    CommGroup pp{fmt::format("pp{}", r), GroupKind::Pipeline, {}};
    for (int p = 0; p < Pp; ++p)
      pp.ranks.push_back(p * W + r);
    out.push_back(std::move(pp));
  }
  return out;
}

std::vector<int> lift_stage_positions(const std::vector<int>& stage_positions, int Pp) {
  if (Pp == 1) return stage_positions;
  const int W = int(stage_positions.size());
  std::vector<int> out;
  out.reserve(size_t(W) * size_t(Pp));
  for (int p = 0; p < Pp; ++p)
    for (int position : stage_positions)
      out.push_back(p * W + position);
  return out;
}

Plan stage_plan(const Plan& plan, int p) {
  const int Pp = plan.params.pipeline_parallel, W = plan.num_ranks() / Pp;
  Plan s = plan;
  s.params = stage_params(plan.params);
  s.ranks.assign(plan.ranks.begin() + int64_t(p) * W, plan.ranks.begin() + int64_t(p + 1) * W);
  for (RankSlot& slot : s.ranks)
    slot.rank -= p * W;
  s.groups.clear();
  const std::string prefix = fmt::format("p{}.", p);
  for (const CommGroup& g : plan.groups) {
    if (g.name.rfind(prefix, 0) != 0) continue;
    CommGroup local = g;
    local.name = g.name.substr(prefix.size());
    for (int& r : local.ranks) {
      if (r / W != p) throw InputError(fmt::format("group '{}': rank {} is not in pipeline stage {}", g.name, r, p));
      r -= p * W;
    }
    s.groups.push_back(std::move(local));
  }
  return s;
}

void lift_stage_program(RankProgram& program, int p, int W, int stage_groups) {
  program.rank += p * W;
  for (Op& op : program.ops)
    if (op.peer >= 0) op.peer += p * W;
  for (CollectiveSpec& spec : program.collectives)
    spec.group += p * stage_groups;
}

FlowSet lift_stage_flow_set(const FlowSet& stage_set, int Pp, int W) {
  if (Pp == 1) return stage_set;
  FlowSet out{stage_set.name, {}};
  out.flows.reserve(stage_set.flows.size() * size_t(Pp));
  for (int p = 0; p < Pp; ++p)
    for (const auto& [src, dst] : stage_set.flows)
      out.flows.emplace_back(src + p * W, dst + p * W);
  return out;
}

int PipelinePosition::warmup() const {
  if (chunks == 1) return std::min(stages - stage - 1, microbatches);
  // Megatron-LM's forward_backward_pipelining_with_interleaving: 2 (Pp - p - 1) + (v - 1) Pp chunk
  // forwards before the first backward, at most all of them.
  return std::min(2 * (stages - stage - 1) + (chunks - 1) * stages, chunks * microbatches);
}

PipelineSlot PipelinePosition::forward_slot(int k) const {
  if (chunks == 1) return {k, 0};
  // Pp micro-batches through chunk 0, the same Pp through chunk 1, ..., then the next Pp.
  const int group = k / (stages * chunks), within = k % (stages * chunks);
  return {group * stages + within % stages, within / stages};
}

PipelineSlot PipelinePosition::backward_slot(int k) const {
  PipelineSlot slot = forward_slot(k);
  slot.chunk = chunks - 1 - slot.chunk;  // the backward walks the chunks from the last
  return slot;
}

int PipelinePosition::model_chunk(int chunk) const {
  return chunk * stages + stage;
}

PipelinePosition pipeline_position(const Plan& plan, int rank) {
  PipelinePosition at;
  at.stages = std::max(1, plan.params.pipeline_parallel);
  at.chunks = std::max(1, plan.params.virtual_stages);
  at.stage_ranks = plan.num_ranks() / at.stages;
  at.stage = rank / at.stage_ranks;
  at.layers = plan.workload.layers / at.stages;
  at.first_layer = at.stage * at.layers;
  at.microbatches = std::max(1, plan.workload.microbatches);
  return at;
}

}  // namespace wallfacer::detail
