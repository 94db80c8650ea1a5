// Internal to the cost model: what the pricing of a whole step (step_timing.cpp) remembers of
// the sampled columns it has timed, so that a later column is not unrolled or timed again: the
// unrolled orders it keeps within a budget, and the columns a later one times alike with or may
// be left out beside.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <wallfacer/schedule/step.hpp>
#include "timeline.hpp"

namespace wallfacer::detail {

// How many unrolled copies of each template op a program holds (by template op).
inline std::vector<uint32_t> copies_of(const std::vector<uint32_t>& origin, size_t template_ops) {
  std::vector<uint32_t> copies(template_ops, 0);
  for (uint32_t op : origin)
    ++copies[op];
  return copies;
}

// The sampled columns of one program timed so far (PairMode::Symmetric). A later one runs the same
// timeline as one of them when it has the same unrolled order (the same FlatStep), ops that wait
// and meet alike (times_alike) and the same template durations, and takes its timing
// instead: a homogeneous cluster's sampled ranks mostly price alike. A column that cannot end
// last, nor end its forward last, is not timed at all (untimed).
class LoneColumns {
 public:
  LoneColumns(const std::vector<StepTemplate>& templates, const std::vector<std::vector<double>>& once)
      : templates_(templates), once_(once) {}
  // The program timed before that program `p` (on `flat`) times alike with, if any.
  std::optional<size_t> timed_alike(size_t p, const FlatStep& flat) const {
    const ProgramView view(templates_[p].program, flat);
    for (const auto& [q, seen] : timed_)
      if (seen == &flat && once_[q] == once_[p] && times_alike(ProgramView(templates_[q].program, *seen), view))
        return q;
    return std::nullopt;
  }
  // Remembers `p` as timed on `flat`, which is the caller's and must outlive this.
  void remember(size_t p, const FlatStep& flat) { timed_.emplace_back(p, &flat); }
  // The program composed before (without every layer unrolled) that program `p` times alike with,
  // if any: the same unrolled order, ops that wait and meet alike on the composed one's few layers,
  // and the same durations.
  std::optional<size_t> composed_alike(size_t p) const {
    for (const auto& [q, few] : composed_)
      if (once_[q] == once_[p] && same_unrolled_order(templates_[q], templates_[p]) &&
          times_alike(ProgramView(templates_[q].program, *few), ProgramView(templates_[p].program, *few)))
        return q;
    return std::nullopt;
  }
  // Remembers `p` as composed, its few layers' unrolled order `few`.
  void remember_composed(size_t p, std::shared_ptr<const FlatStep> few) {
    if (few) composed_.emplace_back(p, std::move(few));
  }
  // A program's timing for the step's summary when its column need not be timed: when its end is
  // bound to come before `latest_end` and its forward's end no later than `latest_forward` (the
  // latest among the columns timed so far; lone_bounds, with `kept` below 1 of its compute
  // slowed by communication, slowed_bounds), it cannot be the critical program nor move
  // the forward's end, and the summary reads nothing else of it but its compute at full speed,
  // which the bounds sum as a run does. Its ends are then left at zero.
  static std::optional<RankTiming> left_out(const std::optional<LoneBounds>& bounds, double latest_end,
                                            double latest_forward, double kept) {
    if (!bounds || !may_leave_out(slowed_bounds(*bounds, kept), latest_end, latest_forward)) return std::nullopt;
    RankTiming timing;
    timing.compute_forward_s = bounds->compute_forward_s;
    timing.compute_backward_s = bounds->compute_backward_s;
    return timing;
  }

 private:
  const std::vector<StepTemplate>& templates_;
  const std::vector<std::vector<double>>& once_;  // template op durations, by program
  std::vector<std::pair<size_t, const FlatStep*>> timed_;
  std::vector<std::pair<size_t, std::shared_ptr<const FlatStep>>> composed_;
};

// The distinct unrolled orders of a step's timed templates (their flat steps), so that each is
// unrolled once: a step's ranks mostly share a few, in every group alike. Keeps at most
// `budget_bytes` of them, the first ones (CostOptions::kept_unrolled_order_bytes); past that an
// unrolled order serves the group that needed it alone and goes with it (met again, it is
// unrolled again). A contiguous causal ring's sampled columns all differ, and kept they were a
// third of a large step's memory: at 1,024 GPUs 64 columns of half a million ops. Sets each
// template's copies of its ops as it finds its order.
class UnrolledOrders {
 public:
  UnrolledOrders(const std::vector<StepTemplate>& templates, std::vector<std::vector<uint32_t>>& copies,
                 size_t budget_bytes)
      : templates_(templates), copies_(copies), budget_bytes_(budget_bytes) {}
  // Template p's unrolled order if kept.
  std::shared_ptr<const FlatStep> known(size_t p) {
    for (const auto& [q, flat] : kept_)
      if (same_unrolled_order(templates_[q], templates_[p])) {
        copies_[p] = copies_[q];
        return flat;
      }
    return nullptr;
  }
  // Template p's order unrolled afresh (not kept). Threads may unroll different templates at once.
  std::shared_ptr<const FlatStep> unrolled(size_t p) {
    auto flat = std::make_shared<const FlatStep>(unroll_flat(templates_[p]));
    copies_[p] = copies_of(flat->origin, templates_[p].program.ops.size());
    return flat;
  }
  // Keeps `flat`, template p's order, within the budget: whether it is kept.
  bool keep(size_t p, std::shared_ptr<const FlatStep> flat) {
    const size_t bytes = 4 * (flat->origin.size() + flat->dep_begin.size() + flat->deps.size());
    if (bytes_ + bytes > budget_bytes_) return false;
    bytes_ += bytes;
    kept_.emplace_back(p, std::move(flat));
    return true;
  }
  // Template p's order, and whether it is kept.
  std::pair<std::shared_ptr<const FlatStep>, bool> of(size_t p) {
    if (std::shared_ptr<const FlatStep> flat = known(p)) return {flat, true};
    std::shared_ptr<const FlatStep> flat = unrolled(p);
    const bool kept = keep(p, flat);
    return {std::move(flat), kept};
  }
  // Sets template p's copies of its ops when its order is not unrolled (a composed column's).
  void set_copies(size_t p, std::vector<uint32_t> copies) { copies_[p] = std::move(copies); }
  void clear() { kept_.clear(); }

 private:
  const std::vector<StepTemplate>& templates_;
  std::vector<std::vector<uint32_t>>& copies_;  // by template: copies of each of its ops
  std::vector<std::pair<size_t, std::shared_ptr<const FlatStep>>> kept_;
  size_t budget_bytes_, bytes_ = 0;
};

}  // namespace wallfacer::detail
