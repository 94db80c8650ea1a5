// Internal to the cost model: times rank programs as a list schedule through their four streams,
// with op durations fixed in advance. An op starts when the previous op of its stream and its
// dependencies have finished. Forward and backward run as one program, as the simulator runs them:
// a rank starts its backward when its own forward work allows, so ranks with less forward work
// (the early members of a contiguous causal ring) start their backward ahead of the others, as
// they would after the later layers' backward in training.
//
// A message moves when both ends are posted: a Send and its Recv start together, at the later of
// the two ready times. How the other end is found depends on what is timed:
//  - every rank of the plan (PairMode::Matched): the Recv on the peer with the same tag, matched
//    in program order, as the simulator pairs them;
//  - a sample of representative ranks (PairMode::Symmetric): the peer is assumed to run this
//    rank's program shifted by nothing, so it posts its end of a message when this rank posts its
//    own op of the same tag in the other direction (every ring member forwards the same block at
//    the same step). A receive whose sender sends only after computing (a pass-KV ring's dK,dV
//    accumulator) thus waits for that compute like the rank's own send does. Pipeline stage
//    messages are the exception: a sample holds whole pipeline columns, so they are matched with
//    their real other end, and the pipeline's bubble shows.
// Collectives: with every rank timed, the k-th collective of a group starts on all members when the
// last of them has posted it (as the simulator runs it); in a sample, when the member is ready.
// Their price covers the group.
// With every rank timed, chains of collectives that nothing else waits for (a step's gradient and
// parameter buckets) are folded into their last op (timeline_fold.hpp), with the same times as
// unfolded.
// Bounds: Unpaired meets nothing (every op starts when its own rank allows); StagesOnly meets only
// pipeline stage messages with their real other end. Both only let ops start earlier than either
// pairing above, so the end of any program they time bounds its end there from below.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/step.hpp>

namespace wallfacer::detail {

// The ops of one program as the timeline reads them: a program's own, or a step template's ops in
// the order its unrolled step runs them (FlatStep), without the copies.
class ProgramView {
 public:
  ProgramView(const RankProgram& program) : program_(&program) {}  // NOLINT: a view of it
  ProgramView(const RankProgram& step_template, const FlatStep& flat) : program_(&step_template), flat_(&flat) {}
  // The rank, its collectives, and (without a flat step) its ops.
  const RankProgram& program() const { return *program_; }
  int rank() const { return program_->rank; }
  size_t size() const { return flat_ ? flat_->origin.size() : program_->ops.size(); }
  const Op& op(size_t i) const { return program_->ops[flat_ ? flat_->origin[i] : i]; }
  // A step template's unrolled order: op i copies the template's op origin(i).
  bool flat() const { return flat_ != nullptr; }
  bool same_flat(const ProgramView& other) const { return flat_ == other.flat_; }
  uint32_t origin(size_t i) const { return flat_->origin[i]; }
  const int32_t* deps_begin(size_t i) const {
    return flat_ ? flat_->deps.data() + flat_->dep_begin[i] : program_->deps_begin(program_->ops[i]);
  }
  const int32_t* deps_end(size_t i) const {
    return flat_ ? flat_->deps.data() + flat_->dep_begin[i + 1] : program_->deps_end(program_->ops[i]);
  }

 private:
  const RankProgram* program_;
  const FlatStep* flat_ = nullptr;
};

enum class PairMode { Matched, Symmetric, Unpaired, StagesOnly };

struct RankTiming {
  double forward_end_s = 0;                              // when the rank's last forward op ends
  double end_s = 0;                                      // when its last op ends
  double compute_forward_s = 0, compute_backward_s = 0;  // compute-stream busy time per phase
  // With RunOptions::compute_kept_under_comm below 1: what compute slowed by communication adds to
  // the rank's compute ops, included in the compute times above (and in the ends).
  double slowdown_s = 0;
};

// What each op of a program waits for on its own rank (its stream predecessor, its dependencies),
// derived once per unrolled order and kept for the shapes built after: a sampled step is timed
// one pipeline column per shape, and its columns mostly share a few unrolled orders. A column of
// one program (no pipeline) also shares whom its ops meet: in a sample that is its own message
// ends, paired by their tags. Keeps pointers to the programs it has seen; it must not outlive them.
// Keeps at most `budget_bytes` of orders and pairings; past that, shapes derive their own.
class OrderLibrary {
 public:
  explicit OrderLibrary(size_t budget_bytes = kDefaultBudgetBytes);
  // The sampled columns of one step share a few orders, kept first; the many a large step's
  // columns hold past those are mostly never met again (docs/cost-model.md).
  static constexpr size_t kDefaultBudgetBytes = size_t(64) << 20;
  ~OrderLibrary();
  OrderLibrary(const OrderLibrary&) = delete;
  OrderLibrary& operator=(const OrderLibrary&) = delete;

  struct Impl;

 private:
  friend class TimelineShape;
  std::unique_ptr<Impl> impl_;
};

// How the ops of some rank programs wait for each other under one pairing: built once (pairing
// sorts every message end), then run with any op durations (the search prices one schedule under
// many GPU orders). Keeps pointers to the programs.
class TimelineShape {
 public:
  // `library`, when given, provides the orders of programs like those seen before and keeps the new ones.
  TimelineShape(std::vector<ProgramView> programs, PairMode mode, OrderLibrary* library = nullptr);
  TimelineShape(const std::vector<const RankProgram*>& programs, PairMode mode);
  ~TimelineShape();
  TimelineShape(TimelineShape&&) noexcept;
  TimelineShape& operator=(TimelineShape&&) noexcept;

  struct RunOptions {
    // `duration` is by template op: an op of a flat program lasts what the template op it copies
    // does (a step's copies need not be listed one by one); other programs' ops are their own.
    bool by_template_op = false;
    // With `op_ends`: the program whose ends are taken, chosen from the timings (the others are
    // left empty: a step's parts read one program's); without it, every program's.
    std::function<size_t(const std::vector<RankTiming>&)> ends_of;
    // When given, receives how many meetings (pairs of message ends, collectives) the run called
    // off because some of their ops were never posted.
    size_t* called_off = nullptr;
    // Below 1: compute runs at this share of its speed while a transfer of its rank is posted:
    // the programs are timed at full speed, each compute op lengthened by what that puts under
    // its rank's transfers (detail::ComputeUnderComm), and timed again (RankTiming::slowdown_s).
    // Ignored by the bounds' pairings (Unpaired, StagesOnly), which stay at full speed.
    double compute_kept_under_comm = 1;
    // With compute slowed: receives the durations the programs were timed with again (as given:
    // by op, or by template op; detail::lengthened), of the programs whose ends `op_ends`
    // receives (the others left empty).
    std::vector<std::vector<double>>* slowed_durations = nullptr;
    // Receives the programs' latest end (s) at full speed, a lower bound of the slowed one: ops
    // only last longer slowed, and an op ends no earlier when what it waits for ends later.
    double* full_speed_end_s = nullptr;
    // With compute slowed: when that latest end at full speed is past this, the programs are not
    // timed again; the full-speed timings (and ends) are returned and `*stopped_at_full_speed` is
    // set. A pricing that stops above a step needs no more of a column that passes it so.
    double full_speed_stop_s = std::numeric_limits<double>::infinity();
    bool* stopped_at_full_speed = nullptr;
  };
  // `duration[p][i]`: seconds op i of the p-th program lasts. One entry per program. A pairing that
  // cannot be honoured (an end that is never posted) falls back to starting the waiting op on its
  // own, so timing always finishes. `op_ends`, when given, receives every op's end time (by
  // program, then op): an op started at its end minus its duration.
  std::vector<RankTiming> run(const std::vector<std::vector<double>>& duration,
                              std::vector<std::vector<double>>* op_ends = nullptr) const {
    return run(duration, op_ends, RunOptions{});
  }
  std::vector<RankTiming> run(const std::vector<std::vector<double>>& duration,
                              std::vector<std::vector<double>>* op_ends, const RunOptions& options) const;
  size_t size() const;
  const ProgramView& program(size_t p) const;

  struct Impl;

 private:
  // `fold`: whether chains of collectives are folded (timeline_fold.hpp); they are unless that
  // would time them differently.
  TimelineShape(std::vector<ProgramView> programs, PairMode mode, OrderLibrary* library, bool fold);
  std::unique_ptr<Impl> impl_;
};

// The program that ends last (the first of those), whose parts a step reports: 0 when none ends
// after 0.
size_t critical_program(const std::vector<RankTiming>& timings);

// Whether `op` is a message end (a Send or a Recv), which meets its other end.
inline bool is_message(const Op& op) {
  return op.kind == OpKind::Send || op.kind == OpKind::Recv;
}

// Whether two programs' ops wait for the same ops of their own rank: flat steps of one unrolled
// order whose template ops run on the same streams in the same phases.
bool same_order(const ProgramView& a, const ProgramView& b);

// Whether two programs of a sample, each timed alone (PairMode::Symmetric) with the same op
// durations, run the same timeline: one unrolled order, template ops on the same streams in the
// same phases, of the same kinds, messages of the same tags, and no pipeline stage message.
bool times_alike(const ProgramView& a, const ProgramView& b);

// What a sampled column of one program (PairMode::Symmetric, no pipeline stage message) gives
// without being timed: its compute-stream time per phase, exactly as a run sums it, and upper
// bounds of its end and of its forward's end. A list schedule starts each op as early as its
// predecessors and meetings allow, so it never ends after running every op one after another:
// the end is at most the sum of all durations; and where no forward op waits for (or meets) an
// op of the backward, the forward ops can run first, so the forward ends within their sum
// (otherwise its bound is the end's). A step whose columns end later than a column's bound can
// skip timing it (docs/cost-model.md). None for a program that is not flat, holds a stage
// message, or an op of negative duration. `duration`: by template op.
struct LoneBounds {
  double end_s = 0, forward_end_s = 0;                   // upper bounds
  double compute_forward_s = 0, compute_backward_s = 0;  // as RankTiming holds them
};
std::optional<LoneBounds> lone_bounds(const ProgramView& program, const std::vector<double>& duration);
// Whether a column of these bounds can be left untimed when the columns timed so far end at
// `latest_end_s` and their forwards at `latest_forward_s`: it cannot be the one that ends last
// (nor tie with it), nor move the forward's end. The margin keeps the bounds, summed in another
// order than a run adds, clear of rounding.
inline bool may_leave_out(const LoneBounds& bounds, double latest_end_s, double latest_forward_s) {
  constexpr double kMargin = 1e-6;
  return bounds.end_s * (1 + kMargin) < latest_end_s && bounds.forward_end_s * (1 + kMargin) <= latest_forward_s;
}

// The bounds of the same column with its compute slowed by communication to `kept` of its speed
// (TimelineShape::RunOptions::compute_kept_under_comm): detail::lengthened adds to a compute op
// at most (1 / kept - 1) of its time (what runs beside it never lasts longer than it, and
// 1 - kept <= 1 / kept - 1), and the bounds sum the durations they are given. The forward's
// bound is the end's unless the forward runs first (forward_end_s below end_s).
inline LoneBounds slowed_bounds(const LoneBounds& bounds, double kept) {
  if (kept >= 1) return bounds;
  const double more = 1 / kept - 1;
  LoneBounds slowed = bounds;
  slowed.end_s = bounds.end_s + more * (bounds.compute_forward_s + bounds.compute_backward_s);
  slowed.forward_end_s =
      bounds.forward_end_s < bounds.end_s ? bounds.forward_end_s + more * bounds.compute_forward_s : slowed.end_s;
  return slowed;
}

// How to pair the programs' message ends: with every rank of a plan of `plan_ranks` ranks at hand
// (each once) Matched, else Symmetric; `lower_bound`: StagesOnly.
PairMode pair_mode_for(int plan_ranks, const std::vector<ProgramView>& programs, bool lower_bound);

// TimelineShape(programs, mode).run(duration).
std::vector<RankTiming> time_programs(const std::vector<const RankProgram*>& programs,
                                      const std::vector<std::vector<double>>& duration, PairMode mode);

}  // namespace wallfacer::detail
