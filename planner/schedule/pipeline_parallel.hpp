// Pipeline parallelism around the tensor-lifted strategy (docs/step.md "Pipeline parallelism"):
// Pp stages, each a copy of the T * S * D ranks that run the strategy (and its tensor slices) on
// the stage's layers, and the pipeline groups that join the Pp ranks of one stage position.
// Global rank g = p * W + r for stage rank r of stage p, W = ranks / Pp. Private to the schedule
// stage: strategy.cpp lifts groups, placements and programs with it; step.cpp asks it where a
// rank sits in the pipeline.
#pragma once

#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer::detail {

// The rules pipeline parallelism and micro-batches add: Pp >= 1 divides the ranks and the
// layers; the data-parallel degree times the micro-batches M divides the batch.
Feasibility pipeline_feasibility(const StrategyParams& params, const Workload& workload, int ranks);
// The rules virtual stages add (docs/step.md "Interleaved 1F1B"): v >= 1; v > 1 needs Pp >= 2,
// Pp * v dividing the layers and Pp dividing the micro-batches.
Feasibility interleave_feasibility(const StrategyParams& params, const Workload& workload);
// Interleaved 1F1B with a strategy whose attention sends point-to-point messages (ring, zigzag,
// USP, double ring, WallFacer with S > 1) is refused: those messages share the send and receive
// streams with the stage messages, and under the interleaved order the two wait on each other
// (the checker finds the cycle once micro-batches exceed Pp; docs/step.md "Interleaved 1F1B").
Feasibility interleave_strategy_feasibility(StrategyKind strategy, const StrategyParams& params);
// What one stage's strategy sees: params with Pp = 1, v = 1 (the workload is unchanged).
StrategyParams stage_params(const StrategyParams& params);
// One micro-batch: batch / M sequences, M = 1.
Workload micro_workload(const Workload& workload);
// The global group list: every stage's groups (names prefixed "p<p>.", ranks lifted), stage after
// stage, then the pipeline groups "pp<r>" of ranks r, W + r, .., (Pp - 1) W + r.
std::vector<CommGroup> lift_stage_groups(const std::vector<CommGroup>& stage_groups, int stages, int stage_ranks);
// Placement of global rank g: stage p's ranks take the p-th block of W GPUs of the order.
std::vector<int> lift_stage_positions(const std::vector<int>& stage_positions, int stages);
// The plan of stage p (W ranks, the stage's GPUs and groups) of a pipeline-parallel plan.
Plan stage_plan(const Plan& plan, int stage);
// Moves stage p's program (built from stage_plan(plan, p)) into the global plan: rank ids, peers
// and group indices.
void lift_stage_program(RankProgram& program, int stage, int stage_ranks, int stage_groups);
// A stage flow set with every stage's flows (they run at the same time).
FlowSet lift_stage_flow_set(const FlowSet& stage_set, int stages, int stage_ranks);

// One chunk of one micro-batch: what the k-th forward (backward) of a rank runs.
struct PipelineSlot {
  int micro = 0;
  int chunk = 0;  // the rank's chunk, 0..v-1
};

// Where a rank sits in the pipeline. With v virtual stages (chunks) the rank's `layers` split into
// v chunks of layers / v; its chunk k is the model's chunk k * Pp + stage, of layers
// [(k Pp + stage) layers / v, (k Pp + stage + 1) layers / v).
struct PipelinePosition {
  int stage = 0, stages = 1;
  int chunks = 1;       // v
  int stage_ranks = 1;  // W
  int layers = 1;       // layers per stage (all its chunks)
  int first_layer = 0;  // the stage's first layer of the model (v = 1)
  int microbatches = 1;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  // Chunk forwards before the first backward: min(Pp - p - 1, M) under 1F1B; under interleaved
  // 1F1B min(2 (Pp - p - 1) + (v - 1) Pp, v M).
  int warmup() const;
  // The micro-batch and chunk of the rank's k-th forward and k-th backward (0 <= k < v M).
  PipelineSlot forward_slot(int k) const;
  PipelineSlot backward_slot(int k) const;
  // The model chunk (0..Pp v - 1) of the rank's chunk.
  int model_chunk(int chunk) const;
};
PipelinePosition pipeline_position(const Plan& plan, int rank);

}  // namespace wallfacer::detail
