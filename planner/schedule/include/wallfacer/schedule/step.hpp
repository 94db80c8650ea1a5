// The whole training step as a schedule (docs/step.md): around the strategy's attention program,
// every layer's projections and MLP GEMMs, its memory-bound ops (norms, rotary, activations,
// residual adds), the embedding, LM head and loss, recomputation by checkpointing mode, the
// bucketed gradient synchronisation of the ZeRO stage overlapped with the backward, and the
// optimizer step. Same IR, same four streams, read by the cost model and the simulator.
//
// Layers are identical, so a rank's step is built once as a template of seven sections and
// unrolled on demand into a flat program of any number of layers. One micro-batch's forward is
// prologue, F(0) .. F(n-1), head; its backward is gradient input, B(n-1) .. B(0), tail; the
// epilogue runs once at the end. With pipeline parallelism a rank holds its stage's layers and
// runs the micro-batches' forwards and backwards in 1F1B order (docs/step.md "Pipeline
// parallelism"), with virtual stages as v chunks in interleaved 1F1B order. A dependency of a
// layer op on another layer op is on the same layer's instance; on any other section, on the
// instance of the same micro-batch and chunk, except from the epilogue, which sees the instance
// that ran last. Each unrolled layer of each micro-batch has
// its own copy of the layer's buffers, so a layer's backward reads what its own forward left.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer {

// Op index bounds of the template's sections:
//   [0, prologue_end)                 a micro-batch's input: the embedding, or the previous stage's activations
//   [prologue_end, forward_end)       one layer's forward
//   [forward_end, head_end)           the head (final norm, LM head, loss and their backward), or the
//                                     send of the activations to the next stage
//   [head_end, gradient_in_end)       stages before the last: the output gradient from the next stage
//   [gradient_in_end, backward_end)   one layer's backward
//   [backward_end, tail_end)          the embedding's backward, or the send of the input gradient back
//   [tail_end, ops)                   epilogue: the optimizer and what follows it, once per step
//
// With virtual stages (interleaved 1F1B) the boundary stages' chunks differ: on the first stage
// only chunk 0 embeds and back-propagates into the embedding, the later chunks receive from and
// send back to the last stage; on the last stage only chunk v - 1 runs the head, the earlier ones
// send to and receive from the first stage. Such a section ends with its variant, [*_variant,
// section end), which the chunks after the rank's first (prologue, tail) or before its last (head,
// gradient input) run instead of the section's main ops; *_variant is the section's end when it
// has none.
struct StepSections {
  uint32_t prologue_end = 0, forward_end = 0, head_end = 0, gradient_in_end = 0, backward_end = 0, tail_end = 0;
  uint32_t prologue_variant = 0, head_variant = 0, gradient_in_variant = 0, tail_variant = 0;
};

struct StepTemplate {
  RankProgram program;  // the template's ops, buffers, collectives and bindings
  StepSections sections;
  int layers = 1;                      // the rank's layer count (its stage's; what unroll(0) produces)
  int first_layer = 0;                 // the model layer of the stage's first (for buffer names)
  int microbatches = 1;                // M: forwards and backwards per step
  int warmup = 0;                      // 1F1B: chunk forwards before the first backward
  int chunks = 1;                      // v, virtual stages per rank: the layers run as v chunks
  int stage = 0, stages = 1;           // the rank's pipeline stage and the stage count
  bool sync_every_microbatch = false;  // ZeRO 2/3 reduce-scatter every micro-batch; 0/1 the last only
  std::vector<bool> per_layer_buffer;  // by buffer: copied once per unrolled layer and micro-batch
  // (op, template op) pairs, by op: a layer op that also waits for that op of the layer the same
  // micro-batch and chunk ran just before (ZeRO 3 gathers a layer's weights once the layer before
  // starts, a prefetch of one layer); the first layer of a chunk has none.
  std::vector<std::pair<uint32_t, uint32_t>> previous_layer_deps;
  int64_t tokens = 0;  // rows the rank's non-attention ops work on (tokens x micro-batch)
};

// Whether op `i` of the template sits in a layer section, or in the once-per-step epilogue.
bool in_layer_section(const StepSections& sections, uint32_t op);
bool in_epilogue(const StepSections& sections, uint32_t op);

// The flat program of `layers` layers (1..template.layers; 0 = all of them). `origin`, when
// given, receives the template op each flat op copies (by flat op): the copies differ from it
// only in their buffers and dependencies.
RankProgram unroll(const StepTemplate& step, int layers = 0, std::vector<uint32_t>* origin = nullptr);

// The same program without its ops copied: by flat op, the template op it copies and its
// dependencies (flat op indices), as unroll() gives them. What timing a step needs, at a fraction
// of the memory (a copy differs from its template op only in its buffers and dependencies).
struct FlatStep {
  std::vector<uint32_t> origin;     // by flat op: its template op
  std::vector<uint32_t> dep_begin;  // by flat op, and one past the last: its slice of `deps`
  std::vector<int32_t> deps;
  size_t size() const { return origin.size(); }
};
FlatStep unroll_flat(const StepTemplate& step, int layers = 0);
// Whether unroll_flat gives `a` and `b` the same FlatStep: the same sections, pipeline position,
// micro-batches and dependencies (ranks of one strategy mostly differ only in peers and sizes, so
// a step's many ranks share a few unrolled orders).
bool same_unrolled_order(const StepTemplate& a, const StepTemplate& b);

// Builds the step templates of a plan (validates it like ScheduleBuilder).
class StepBuilder {
 public:
  explicit StepBuilder(const Plan& plan);
  ~StepBuilder();
  StepBuilder(StepBuilder&&) noexcept;

  int num_ranks() const;
  ScheduleDims dims() const;
  std::vector<FlowSet> flow_sets() const;
  StepTemplate build_template(int rank, TokenSetPool& pool) const;
  // The same from the rank's attention program of one micro-batch, already built into `pool` by a
  // ScheduleBuilder of a plan equal to this one but for running one micro-batch (and one virtual
  // stage): a caller that holds it need not build it again.
  StepTemplate build_template(RankProgram attention, TokenSetPool& pool) const;
  // The rank's attention program of one micro-batch, as build_template(rank) splices it. A
  // template built from a ComputeOnly program holds the step's compute ops, for compute alone.
  RankProgram build_attention(int rank, TokenSetPool& pool, BuildMode mode = BuildMode::Full) const;
  // ScheduleBuilder::renames and rename for those attention programs (either build mode).
  bool renames_attention(int a, int b) const;
  RankProgram rename_attention(int rank, RankProgram sibling) const;
  // Unrolled programs of the given ranks (all when empty) with `layers` of the model's layers (0 =
  // all; with pipeline parallelism a multiple of the stages, each stage running its share).
  Schedule build(const std::vector<int>& ranks = {}, int layers = 0) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The schedule a plan's scope asks for: StepBuilder(plan).build() or ScheduleBuilder(plan).build().
Schedule build_scope_schedule(const Plan& plan, int layers = 0);

// Model FLOPs of one training step, whole cluster (docs/step.md "FLOPs"): 6 x tokens x the weights
// of the matrix products (layers' projections and MLP, LM head; not the embedding lookup) plus the
// attention FLOPs of every layer, forward and backward (docs/algorithms.md §1.3). Recomputation is
// not counted (model FLOPs, not hardware FLOPs).
double step_model_flops(const Workload& workload);
// Attention FLOPs of one layer, forward + backward, whole batch.
double layer_attention_flops(const Workload& workload);

}  // namespace wallfacer
