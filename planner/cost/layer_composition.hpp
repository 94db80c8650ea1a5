// Internal to the cost model: a sampled column's whole step timed from a few of its layers.
//
// A lone column (one program of a sample, timed on its own with symmetric message ends, one
// micro-batch, no pipeline) runs the prologue, L identical forward layers, the head, L identical
// backward layers, the tail and the epilogue. Its timeline is the least solution of "an op starts
// when its predecessors have ended (and its message's other end is posted), and lasts its
// duration": a max-plus linear system in which every layer repeats the one before it. An op of a
// layer waits only for ops of its own layer, of the layer run just before it, and of sections that
// run once (and, in the backward, for the same layer's forward, which ends earlier from one
// backward layer to the next). Such a system settles into a regime: each op of a layer ends a
// steady amount (its rate; rates differ by op, a sync stream that falls behind has its own) after
// its copy in the layer before. The regime holds for good once no op waits for an op of the
// regime with a higher rate than its own and some op of its own rate that ends when it starts is
// what it waits for last: the next layer then repeats it, for everything else it waits for falls
// behind. LayerComposer times the step with K and with K + 1 layers, finds the regimes in the
// first run, checks that adding a layer moves every op outside them (the head, the backward layers
// before the regime, the tail) at least as much as anything it waits for (so that what it waits for
// last stays last however many layers are added) and that composing K + 1 layers gives the second
// run, and writes the L-layer step's op ends from the K-layer one's. The figures equal those of
// timing all L layers up to rounding (each end is a sum of durations added in another order).
//
// A pipeline column of one micro-batch (its stages' programs, timed together with the stage
// messages met by their real other ends) is the same system with a forward and a backward run per
// stage: a later stage's prologue waits for the stage before it, so adding a layer moves its
// forward too. Such a forward is read like a backward: the moves of its first layers are observed
// in the longer run until its regime starts, and moved layers must keep the op each one waits for
// last. Every stage gets a layer at once; the stages must have as many layers each.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <wallfacer/schedule/step.hpp>
#include "timeline.hpp"

namespace wallfacer::detail {

struct ComposedColumn {
  RankTiming timing;
  std::vector<double> ends;  // by op of the full unrolled order
};

// The runs of a few layers a lone column is composed from, prepared once for a step template
// (the unrolled orders of K and K + 1 layers, their timelines and what each op waits for, made
// when first needed) and composed for any op durations: the placements of one plan time the same
// column with different durations. K is `timed_layers`, then twice that where the layers allow,
// when the first runs have not reached the regimes. Several threads may compose at once (the
// runs are made under a lock). A lone column's composer serves one program, a pipeline column's
// each of its stages.
class LayerComposer {
 public:
  // None when `step` has several micro-batches, chunks or stages, fewer than timed_layers + 2
  // layers, or message ends that pair across sections, or when `full` (its unrolled order of
  // every layer, when at hand) is not laid out as one micro-batch's sections.
  static std::unique_ptr<LayerComposer> prepare(const StepTemplate& step, const FlatStep* full, int timed_layers);
  // A sample's pipeline column of one micro-batch, its stages' templates in `column` (one
  // template: its lone column, as prepare(step, nullptr, timed_layers)). None when a template has
  // several micro-batches or chunks, the layer counts differ or are fewer than timed_layers + 2, a
  // layer section holds a stage message, or other messages pair across sections.
  static std::unique_ptr<LayerComposer> prepare(const std::vector<const StepTemplate*>& column, int timed_layers);
  ~LayerComposer();
  LayerComposer(const LayerComposer&) = delete;
  LayerComposer& operator=(const LayerComposer&) = delete;

  // The column's timing (on the full unrolled order) with each op lasting `once[its template op]`; `bounds`
  // (lone_bounds of that column) gives its compute as a run of every layer sums it. None when a
  // run calls a meeting off or the runs have not reached the regimes above: the column is then
  // timed whole.
  std::optional<ComposedColumn> compose(const std::vector<double>& once, const LoneBounds& bounds);
  // Every program's timing (compute summed as a run of every layer sums it) and ends, in the
  // column's order, with op i of program p lasting (*once[p])[its template op]; none as above.
  std::optional<std::vector<ComposedColumn>> compose(const std::vector<const std::vector<double>*>& once);
  // lone_bounds of the column without its every layer unrolled: the same sums in the same order.
  std::optional<LoneBounds> bounds(const std::vector<double>& once);
  // How many copies of each template op the full unrolled order holds.
  std::vector<uint32_t> copies(size_t program = 0) const;
  // The unrolled order of every layer of the column's program `program`, unrolled the first time
  // (several threads may ask at once): each column the composer serves unrolls alike.
  std::shared_ptr<const FlatStep> full_order(size_t program = 0) const;
  // The unrolled order of the fewest layers timed (once bounds or compose ran): programs of the
  // same unrolled order time alike (times_alike) on it as they do on every layer.
  std::shared_ptr<const FlatStep> few_layers() const;
  // Whether this composer, prepared for its own column, composes `column` (as many programs) as
  // one prepared for it would, for any durations: each program has the unrolled order of the one
  // in its place (same_unrolled_order) and ops alike in all that the runs and the composition read
  // of them (stream, phase and kind; a message's tag; a stage message's other end in the same place
  // of the column; collectives on groups in the same pattern, for the folding). A sample's columns
  // mostly unroll alike and differ in their durations alone: they share one composer's runs.
  bool serves(const std::vector<const StepTemplate*>& column) const;

  struct Impl;

 private:
  explicit LayerComposer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A column composed at full speed (`composed`, each op lasting `once[its template op]`) composed
// again with its compute slowed by communication, `kept` (below 1) of its speed: each program's
// compute ops lengthened by template op (detail::lengthened) on `full`, its unrolled order of
// every layer, from the full-speed ends, as TimelineShape::run lengthens a column timed whole.
// The lengthened durations go to `slowed` (by program) and what they add to each timing's
// slowdown_s. None when that does not compose. The step's pricing and its timed bound of a sampled
// column both compose so, to the same bits. A lone column:
std::optional<ComposedColumn> compose_slowed(LayerComposer& composer, const ProgramView& full,
                                             const std::vector<double>& once, const ComposedColumn& composed,
                                             double kept, std::vector<double>& slowed);
// A pipeline column, its programs in the composer's order.
std::optional<std::vector<ComposedColumn>> compose_slowed(LayerComposer& composer, const std::vector<ProgramView>& full,
                                                          const std::vector<const std::vector<double>*>& once,
                                                          const std::vector<ComposedColumn>& composed, double kept,
                                                          std::vector<std::vector<double>>& slowed);

// LayerComposer::prepare(step, full, timed_layers)->compose(once, bounds), when it prepares.
std::optional<ComposedColumn> compose_layers(const StepTemplate& step, const FlatStep& full,
                                             const std::vector<double>& once, const LoneBounds& bounds,
                                             int timed_layers);

}  // namespace wallfacer::detail
