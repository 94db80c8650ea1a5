// Timing a whole step's templates (CostModel::time_step_templates, docs/cost-model.md "The whole
// step"): each timed rank's template is unrolled to every layer, its ops priced once per template
// op, and the programs timed group by group, the sample's lone columns with the shortcuts that
// leave out or stop early what cannot change the step, or compose it from a few of its layers.
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/step.hpp>
#include "columns_ahead.hpp"
#include "layer_composition.hpp"
#include "step_columns.hpp"
#include "step_parts.hpp"
#include "timeline.hpp"
#include "timeline_classes.hpp"

namespace wallfacer {
namespace {

using detail::LoneColumns;
using detail::UnrolledOrders;

// comm_volume of the unrolled programs, read off their templates: a copy sends what its template
// op sends. Sums of integers, so equal to summing every copy.
CommVolume template_volume(const std::vector<const RankProgram*>& templates,
                           const std::vector<std::vector<uint32_t>>& copies) {
  CommVolume v;
  for (size_t p = 0; p < templates.size(); ++p) {
    CommVolume r;
    const RankProgram& program = *templates[p];
    for (size_t i = 0; i < program.ops.size(); ++i) {
      const Op& op = program.ops[i];
      const int64_t n = copies[p][i];
      const bool fwd = op.phase == Phase::Forward;
      if (op.kind == OpKind::Send) {
        (fwd ? r.p2p_forward : r.p2p_backward) += n * op.bytes;
        (fwd ? r.messages_forward : r.messages_backward) += n;
      } else if (is_collective(op.kind)) {
        (fwd ? r.collective_forward : r.collective_backward) += n * op.bytes;
      }
    }
    v.p2p_forward = std::max(v.p2p_forward, r.p2p_forward);
    v.p2p_backward = std::max(v.p2p_backward, r.p2p_backward);
    v.collective_forward = std::max(v.collective_forward, r.collective_forward);
    v.collective_backward = std::max(v.collective_backward, r.collective_backward);
    v.messages_forward = std::max(v.messages_forward, r.messages_forward);
    v.messages_backward = std::max(v.messages_backward, r.messages_backward);
  }
  return v;
}

// count_transfers of the unrolled programs, read off their templates (a copy has its template op's
// peer and group, hence its tier). The counts are integers, exact in a double either way.
void template_transfers(const Topology& topology, const Plan& plan, const std::vector<const RankProgram*>& templates,
                        const std::vector<std::vector<uint32_t>>& copies, StepParts& parts) {
  detail::TierClassifier tiers(topology, plan);
  double counts[kNumCommTiers] = {};
  for (size_t p = 0; p < templates.size(); ++p)
    for (size_t i = 0; i < templates[p]->ops.size(); ++i) {
      const Op& op = templates[p]->ops[i];
      if (copies[p][i] > 0 && op.stream != Stream::Compute && op.kind != OpKind::Recv)
        counts[int(tiers.of(op, *templates[p]))] += copies[p][i];
    }
  for (int t = 0; t < kNumCommTiers; ++t)
    parts.transfers_per_layer[t] = templates.empty() ? 0 : counts[t] / double(templates.size());
}

// The durations of a flat program's ops: its template ops' (`once`).
std::vector<double> flat_durations(const std::vector<double>& once, const FlatStep& flat) {
  std::vector<double> duration;
  duration.reserve(flat.size());
  for (uint32_t op : flat.origin)
    duration.push_back(once[op]);
  return duration;
}

// Programs whose ops meet only each other, timed together (by index into the timed programs):
// with every rank timed all of them; a sample meets within each program (symmetric partners) and,
// through the stage messages, within its pipeline column.
std::vector<std::vector<size_t>> meeting_groups(const Plan& plan, const std::vector<StepTemplate>& templates,
                                                detail::PairMode mode) {
  std::vector<std::vector<size_t>> groups;
  if (mode == detail::PairMode::Matched) {
    groups.emplace_back(templates.size());
    std::iota(groups.back().begin(), groups.back().end(), size_t(0));
    return groups;
  }
  const int W = plan.num_ranks() / plan.params.pipeline_parallel;
  std::map<int, size_t> column;  // stage rank -> its group
  for (size_t p = 0; p < templates.size(); ++p) {
    auto [it, fresh] = column.try_emplace(templates[p].program.rank % W, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(p);
  }
  return groups;
}

// Whether the groups are a sample's lone columns: one program each, timed on its own.
bool lone_columns(const std::vector<std::vector<size_t>>& groups, detail::PairMode mode) {
  return mode == detail::PairMode::Symmetric &&
         std::all_of(groups.begin(), groups.end(), [](const auto& g) { return g.size() == 1; });
}

// The order in which the groups are timed: as listed, but a sample's lone columns with the most
// work first (the sum of their template ops' durations), so that the columns likely to end last
// are timed before the ones LoneColumns::untimed may then leave out. Equal sums keep their order.
std::vector<size_t> timing_order(const std::vector<std::vector<size_t>>& groups,
                                 const std::vector<std::vector<double>>& once, detail::PairMode mode) {
  std::vector<size_t> order(groups.size());
  std::iota(order.begin(), order.end(), size_t(0));
  if (!lone_columns(groups, mode)) return order;
  std::vector<double> work(groups.size(), 0);
  for (size_t g = 0; g < groups.size(); ++g)
    for (const double seconds : once[groups[g][0]])
      work[g] += std::max(0.0, seconds);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return work[a] > work[b]; });
  return order;
}

// A group of programs timed together: the ends of the one asked for. Its timeline goes once run
// (nothing reads it after), so that a column timed ahead or kept as the critical one holds only
// its unrolled order and those ends.
struct TimedGroup {
  std::vector<std::shared_ptr<const FlatStep>> flats;  // by program; one per unrolled order
  std::vector<std::vector<double>> ends;               // by program timed: those of the one asked for
  std::vector<std::vector<double>> slowed;             // compute slowed: the durations of `ends`' timing
  bool timed = false;                                  // not taken from an earlier group nor left out
  bool composed = false;                               // a lone column composed from a few layers
  // With compute slowed: the group's latest end at full speed where it was timed, and whether
  // that passed the stop (CostBreakdown::stopped_at_full_speed; its timings and ends are then those
  // at full speed).
  std::optional<double> full_speed_end_s;
  bool at_full_speed = false;
  // With ranks timed by class (detail::rank_classes): by program its class, of `classes`, whose
  // representatives were timed; empty when every program was.
  std::vector<uint32_t> class_of;
  size_t classes = 0;
  size_t in_shape(size_t k) const { return class_of.empty() ? k : class_of[k]; }
};

// Has a group's run keep its latest end at full speed in `t` and stop at full speed past `stop_s`.
void stop_at_full_speed(detail::TimelineShape::RunOptions& options, double stop_s, TimedGroup& t) {
  t.full_speed_end_s = 0.0;
  options.full_speed_end_s = &*t.full_speed_end_s;
  options.full_speed_stop_s = stop_s;
  options.stopped_at_full_speed = &t.at_full_speed;
}

// Whether a composed group's latest end at full speed, `end_s`, kept in `t`, passes `stop_s`: then
// it is not composed slowed (TimedGroup::at_full_speed).
bool composed_past_stop(double end_s, double stop_s, TimedGroup& t) {
  t.full_speed_end_s = end_s;
  t.at_full_speed = end_s > stop_s;
  return t.at_full_speed;
}

// Times `views` (every rank of a plan, each op of view p lasting durations[p][its template op])
// through one representative per class of ranks that run the same timeline, into `t` (whose
// flats the views run); the timings by class. None when the ranks form no fewer classes than
// ranks, or when the representatives' timing called off a meeting (every rank is timed then).
// `ends_of`: the program whose ends are kept, else the critical one.
std::optional<std::vector<detail::RankTiming>> time_by_class(const std::vector<detail::ProgramView>& views,
                                                             const std::vector<std::vector<double>>& durations,
                                                             std::optional<size_t> ends_of, TimedGroup& t,
                                                             double kept_under_comm, double full_speed_stop_s) {
  std::optional<detail::RankClasses> classes = detail::rank_classes(views, durations);
  if (!classes) return std::nullopt;
  std::vector<detail::ProgramView> representatives;
  std::vector<std::vector<double>> representative_durations;
  for (size_t c = 0; c < classes->quotient.size(); ++c) {
    const size_t p = classes->representative[c];
    representatives.emplace_back(classes->quotient[c], *t.flats[p]);
    representative_durations.push_back(durations[p]);
  }
  // No order library: its entries would point at the renamed programs past their life.
  auto shape = std::make_unique<detail::TimelineShape>(std::move(representatives), detail::PairMode::Matched);
  const std::vector<uint32_t>& class_of = classes->class_of;
  detail::TimelineShape::RunOptions options;
  options.by_template_op = true;
  options.compute_kept_under_comm = kept_under_comm;
  options.slowed_durations = &t.slowed;
  stop_at_full_speed(options, full_speed_stop_s, t);
  size_t called_off = 0;
  options.called_off = &called_off;
  options.ends_of = [&](const std::vector<detail::RankTiming>& by_class) -> size_t {
    if (ends_of) return class_of[*ends_of];
    std::vector<detail::RankTiming> every;
    every.reserve(class_of.size());
    for (const uint32_t c : class_of)
      every.push_back(by_class[c]);
    return class_of[detail::critical_program(every)];
  };
  std::vector<std::vector<double>> ends;
  std::vector<detail::RankTiming> times = shape->run(representative_durations, &ends, options);
  if (called_off > 0) return std::nullopt;
  t.classes = classes->quotient.size();
  t.class_of = std::move(classes->class_of);
  t.timed = true;
  t.ends = std::move(ends);
  return times;
}

// How many columns past the one a pricing takes lent threads may time: each holds its unrolled
// order and ends until taken.
constexpr size_t kColumnsAhead = 2;

// What the columns taken so far (in timing order) give: the latest end and forward end.
struct TimedSoFar {
  double latest_end = 0, latest_forward = 0;
  // A column (not the last) whose latest end at full speed passes this stops the pricing at full
  // speed (TimedGroup::at_full_speed): the stop (s) when compute is slowed, else infinity.
  double full_speed_stop_s = std::numeric_limits<double>::infinity();
};

// A lone column of a sample timed on its own (ColumnsAhead): its unrolled order, its bounds and,
// unless they left it out with what was known when it was taken, its timing and timed group.
struct LoneColumn {
  std::shared_ptr<const FlatStep> flat;  // none when composed without unrolling every layer
  std::shared_ptr<const FlatStep> few;   // then the unrolled order of its fewest layers timed
  std::optional<detail::LoneBounds> bounds;
  std::optional<detail::RankTiming> timing;
  TimedGroup group;
};

// The composers one pricing has prepared, shared by the columns each serves
// (detail::LayerComposer::serves): a sample's columns mostly unroll alike and differ in their
// durations alone (at 1,024 GPUs, the 32 two-stage columns of a zigzag ring all do), so the runs of
// a few layers, their timelines and what each op waits for are made once, not once a column. The
// latest two are kept (each holds two runs of a column: at 16,384 GPUs four kept raised the peak
// memory by a tenth); columns timed ahead on lent threads ask too. With `share` false every
// column gets its own.
class SharedComposers {
 public:
  SharedComposers(int timed_layers, bool share) : timed_layers_(timed_layers), share_(share) {}
  // A composer of `column` (one template, or a pipeline column's), none when it cannot be composed.
  std::shared_ptr<detail::LayerComposer> of(const std::vector<const StepTemplate*>& column) {
    const std::lock_guard lock(mutex_);
    if (share_)
      for (const std::shared_ptr<detail::LayerComposer>& kept : kept_)
        if (kept->serves(column)) return kept;
    std::shared_ptr<detail::LayerComposer> made = detail::LayerComposer::prepare(column, timed_layers_);
    if (!made || !share_) return made;
    if (kept_.size() == kKept) kept_.erase(kept_.begin());
    kept_.push_back(made);
    return made;
  }

 private:
  static constexpr size_t kKept = 2;
  const int timed_layers_;
  const bool share_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<detail::LayerComposer>> kept_;  // the latest made last
};

// The second composition of a lone column whose compute is slowed by communication (`kept` below
// 1), detail::compose_slowed, keeping its slowed durations in `group`. `full`: the column's
// unrolled order of every layer.
std::optional<detail::ComposedColumn> compose_slowed(detail::LayerComposer& composer, const StepTemplate& step,
                                                     const FlatStep& full, const std::vector<double>& once,
                                                     const detail::ComposedColumn& c, double kept, TimedGroup& group) {
  std::vector<double> slowed;
  std::optional<detail::ComposedColumn> again =
      detail::compose_slowed(composer, detail::ProgramView(step.program, full), once, c, kept, slowed);
  if (again) group.slowed.assign(1, std::move(slowed));
  return again;
}

// Template p's lone column (its unrolled order the group's only flat step) composed from
// `composed_layers` of its layers (detail::LayerComposer): its timing, with the ends of every op
// in the group. None when it is not composed (composed_layers 0, or layers that do not repeat).
// `kept` below 1: compute slowed by communication (compose_slowed), unless it passes
// `full_speed_stop_s` at full speed.
std::optional<detail::RankTiming> composed_column(const StepTemplate& step, const std::vector<double>& once,
                                                  const std::optional<detail::LoneBounds>& bounds, int composed_layers,
                                                  TimedGroup& group, double kept, double full_speed_stop_s) {
  if (!bounds || composed_layers <= 0) return std::nullopt;
  const std::unique_ptr<detail::LayerComposer> composer =
      detail::LayerComposer::prepare(step, group.flats.at(0).get(), composed_layers);
  if (!composer) return std::nullopt;
  std::optional<detail::ComposedColumn> c = composer->compose(once, *bounds);
  if (c && kept < 1 && !composed_past_stop(c->timing.end_s, full_speed_stop_s, group))
    c = compose_slowed(*composer, step, *group.flats.at(0), once, *c, kept, group);
  if (!c) return std::nullopt;
  group.ends.clear();
  group.ends.push_back(std::move(c->ends));
  group.timed = group.composed = true;
  return c->timing;
}

// The second composition of a pipeline column whose compute is slowed by communication (`kept`
// below 1), detail::compose_slowed on each stage's program unrolled into `t`'s flats, which keeps
// the slowed durations for the parts.
std::optional<std::vector<detail::ComposedColumn>> compose_pipeline_slowed(
    detail::LayerComposer& composer, const std::vector<StepTemplate>& templates, const std::vector<size_t>& group,
    const std::vector<const std::vector<double>*>& once, const std::vector<detail::ComposedColumn>& composed,
    double kept, TimedGroup& t) {
  std::vector<detail::ProgramView> full;
  for (size_t k = 0; k < group.size(); ++k) {
    const StepTemplate& step = templates[group[k]];
    t.flats[k] = composer.full_order(k);
    full.emplace_back(step.program, *t.flats[k]);
  }
  std::vector<std::vector<double>> slowed;
  std::optional<std::vector<detail::ComposedColumn>> again =
      detail::compose_slowed(composer, full, once, composed, kept, slowed);
  if (again) t.slowed = std::move(slowed);
  return again;
}

// A sample's pipeline column of one micro-batch (`group`, its stages' programs) composed from
// `composed_layers` of its layers (detail::LayerComposer), without unrolling every layer: each
// program's timing into `timings` and its copies of its template ops into `orders`; the group
// keeps the ends of program `ends_of` (by its place in the group), or of the one that ends last.
// None when it does not compose. `kept` below 1: compute slowed by communication, composed
// twice (compose_pipeline_slowed) unless it passes `full_speed_stop_s` at full speed.
std::optional<TimedGroup> composed_pipeline(const std::vector<StepTemplate>& templates,
                                            const std::vector<std::vector<double>>& once,
                                            const std::vector<size_t>& group, std::optional<size_t> ends_of,
                                            int composed_layers, SharedComposers& composers,
                                            std::vector<detail::RankTiming>& timings, UnrolledOrders& orders,
                                            double kept, double full_speed_stop_s) {
  if (composed_layers <= 0 || group.size() < 2) return std::nullopt;
  std::vector<const StepTemplate*> column;
  std::vector<const std::vector<double>*> seconds;
  for (const size_t p : group) {
    column.push_back(&templates[p]);
    seconds.push_back(&once[p]);
  }
  const std::shared_ptr<detail::LayerComposer> composer = composers.of(column);
  if (!composer) return std::nullopt;
  std::optional<std::vector<detail::ComposedColumn>> composed = composer->compose(seconds);
  if (!composed) return std::nullopt;
  TimedGroup t;
  t.flats.resize(group.size());  // unrolled for the parts when the critical one is in it
  t.ends.resize(group.size());
  if (kept < 1) {
    double end = 0;
    for (const detail::ComposedColumn& c : *composed)
      end = std::max(end, c.timing.end_s);
    if (!composed_past_stop(end, full_speed_stop_s, t) &&
        !(composed = compose_pipeline_slowed(*composer, templates, group, seconds, *composed, kept, t)))
      return std::nullopt;
  }
  std::vector<detail::RankTiming> times;
  for (size_t k = 0; k < group.size(); ++k) {
    timings[group[k]] = (*composed)[k].timing;
    times.push_back((*composed)[k].timing);
    orders.set_copies(group[k], composer->copies(k));
  }
  const size_t kept_ends = ends_of ? *ends_of : detail::critical_program(times);
  t.ends[kept_ends] = std::move((*composed)[kept_ends].ends);
  for (size_t k = 0; k < group.size(); ++k)
    if (k != kept_ends) t.flats[k].reset();  // only the kept ends are read
  t.timed = t.composed = true;
  return t;
}

// Template p's lone column priced without unrolling every layer (detail::LayerComposer): its
// bounds and, unless they leave it out with what is `known`, its composed timing, the ends of every
// op (in `group`, whose unrolled order is made when the parts read them) and the unrolled order of
// its fewest layers timed; or, when composing it fails, only that (`failed`: timed whole then). Sets
// the template's copies of its ops unless it failed. None when it cannot be composed.
struct ComposedLone {
  std::optional<detail::LoneBounds> bounds;
  bool left_out = false, failed = false;
  std::optional<detail::RankTiming> timing;
  std::shared_ptr<const FlatStep> few;
  TimedGroup group;
};

// A column's bounds once it is composed at full speed: the ends so composed are its ends at full
// speed, the tightest upper bounds of them. Slowed, its timeline ends at most what slowing its
// compute adds after (each end is a longest path of durations, and lengthening ops lengthens a
// path by at most what they gain), which is what detail::slowed_bounds adds to any upper bound.
// The forward's bound keeps its premise: it is the end's unless the forward runs first.
void tighten_bounds(detail::LoneBounds& bounds, const detail::RankTiming& full_speed) {
  const bool forward_first = bounds.forward_end_s < bounds.end_s;
  bounds.end_s = std::min(bounds.end_s, full_speed.end_s);
  bounds.forward_end_s = forward_first ? std::min(bounds.forward_end_s, full_speed.forward_end_s) : bounds.end_s;
}

// `kept` below 1: compute slowed by communication (compose_slowed, on its every layer unrolled
// for the slowdown; left out on the bounds of that, detail::slowed_bounds, and, once composed at
// full speed, on those of its composed timeline so slowed).
std::optional<ComposedLone> compose_without_unrolling(const StepTemplate& step, const std::vector<double>& once,
                                                      size_t p, UnrolledOrders& orders, const TimedSoFar& known,
                                                      int composed_layers, SharedComposers& composers, double kept) {
  if (composed_layers <= 0) return std::nullopt;
  const std::shared_ptr<detail::LayerComposer> composer = composers.of({&step});
  if (!composer) return std::nullopt;
  ComposedLone c;
  c.bounds = composer->bounds(once);
  if (!c.bounds) return std::nullopt;
  c.left_out = LoneColumns::left_out(c.bounds, known.latest_end, known.latest_forward, kept).has_value();
  std::optional<detail::ComposedColumn> composed;
  if (!c.left_out && !(composed = composer->compose(once, *c.bounds))) {
    c.failed = true;
    return c;
  }
  if (composed && kept < 1 && !composed_past_stop(composed->timing.end_s, known.full_speed_stop_s, c.group)) {
    // Composed at full speed, the column may be left out on its timeline's ends, far tighter than
    // its bounds where much of its time is waiting: a light rank of a causal ring.
    tighten_bounds(*c.bounds, composed->timing);
    c.left_out = LoneColumns::left_out(c.bounds, known.latest_end, known.latest_forward, kept).has_value();
    if (!c.left_out &&
        !(composed = compose_slowed(*composer, step, *composer->full_order(), once, *composed, kept, c.group))) {
      c.failed = true;
      return c;
    }
  }
  orders.set_copies(p, composer->copies());
  if (c.left_out) return c;
  c.timing = composed->timing;
  c.few = composer->few_layers();
  c.group.flats.push_back(nullptr);
  c.group.ends.push_back(std::move(composed->ends));
  c.group.timed = c.group.composed = true;
  return c;
}

// Template p's column timed alone with its own unrolled order, as the pricing times a column
// whose order no earlier column has (no order library: nothing timed before shares its order).
// `kept_under_comm` below 1: compute slowed by communication (left out on detail::slowed_bounds).
LoneColumn time_lone_column(const std::vector<StepTemplate>& templates, const std::vector<double>& once, size_t p,
                            UnrolledOrders& orders, const TimedSoFar& known, int composed_layers,
                            SharedComposers& composers, double kept_under_comm) {
  LoneColumn c;
  std::optional<ComposedLone> composed =
      compose_without_unrolling(templates[p], once, p, orders, known, composed_layers, composers, kept_under_comm);
  if (composed && !composed->failed) {
    c.bounds = composed->bounds;
    c.timing = composed->timing;
    c.few = std::move(composed->few);
    c.group = std::move(composed->group);
    return c;
  }
  c.flat = orders.unrolled(p);
  c.bounds = detail::lone_bounds(detail::ProgramView(templates[p].program, *c.flat), once);
  if (LoneColumns::left_out(c.bounds, known.latest_end, known.latest_forward, kept_under_comm)) return c;
  c.group.flats.push_back(c.flat);
  if (!composed && (c.timing = composed_column(templates[p], once, c.bounds, composed_layers, c.group, kept_under_comm,
                                               known.full_speed_stop_s)))
    return c;
  std::vector<detail::ProgramView> views{detail::ProgramView(templates[p].program, *c.flat)};
  const detail::TimelineShape shape(std::move(views), detail::PairMode::Symmetric, nullptr);
  detail::TimelineShape::RunOptions options;
  options.by_template_op = true;
  options.ends_of = detail::critical_program;
  options.compute_kept_under_comm = kept_under_comm;
  options.slowed_durations = &c.group.slowed;
  stop_at_full_speed(options, known.full_speed_stop_s, c.group);
  c.timing = shape.run({once}, &c.group.ends, options).at(0);
  c.group.timed = true;
  return c;
}

// By place in the timing order: whether a sample's lone column may be timed ahead, which those
// whose unrolled order no earlier column has may (the others may time alike with an earlier one,
// which is decided at their turn). None when fewer than two may.
std::vector<bool> columns_to_time_ahead(const std::vector<StepTemplate>& templates,
                                        const std::vector<std::vector<size_t>>& groups,
                                        const std::vector<size_t>& visit) {
  std::vector<bool> ahead(visit.size(), false);
  std::vector<size_t> firsts;  // the first template of each unrolled order met
  for (size_t v = 0; v < visit.size(); ++v) {
    const size_t p = groups[visit[v]][0];
    ahead[v] = std::none_of(firsts.begin(), firsts.end(),
                            [&](size_t q) { return same_unrolled_order(templates[q], templates[p]); });
    if (ahead[v]) firsts.push_back(p);
  }
  if (firsts.size() < 2) ahead.clear();
  return ahead;
}

}  // namespace

CostBreakdown CostModel::time_step_templates(const Plan& plan, const Schedule& step,
                                             const std::vector<StepTemplate>& templates,
                                             const std::function<double()>& stop_above_ms,
                                             const ThreadLender& lend) const {
  std::vector<const RankProgram*> programs;
  std::vector<detail::ProgramView> all;
  for (const StepTemplate& t : templates) {
    programs.push_back(&t.program);
    all.emplace_back(t.program);
  }
  // Each template op priced once for its unrolled copies, which are timed through their templates
  // without being copied (FlatStep).
  const std::vector<std::vector<double>> once = template_op_durations(plan, step, programs);
  const detail::PairMode mode = detail::pair_mode_for(plan.num_ranks(), all, false);
  // Programs that meet only each other are timed group by group, so that one group's unrolled
  // order and timeline are in memory at a time: each op's times depend on its own group alone.
  const std::vector<std::vector<size_t>> groups = meeting_groups(plan, templates, mode);
  std::vector<detail::RankTiming> timings(templates.size());
  std::vector<std::vector<uint32_t>> copies(templates.size());
  UnrolledOrders orders(templates, copies, options_.kept_unrolled_order_bytes);
  // Their waiting structure too, shared by the groups (each group is a shape of its own).
  auto library = std::make_unique<detail::OrderLibrary>();
  LoneColumns lone(templates, once);
  // Compute slowed by communication is found on each column's whole timeline at full speed; a
  // column is left out on the bounds of its timeline so slowed (detail::slowed_bounds).
  const double kept_under_comm = compute_kept_under_comm();
  const int composed_layers = options_.composed_layers;
  SharedComposers composers(composed_layers, options_.share_composers);
  double latest_end = 0, latest_forward = 0;  // among the programs timed so far
  const size_t columns = groups.size();
  // What the columns timed so far give a column that may be left out on its bounds; nothing (so
  // that every column is timed) with CostOptions::leave_out_columns off. With compute slowed, the
  // stop: slowed, a column only ends later, so one whose latest end at full speed is past the stop
  // (and ends before the last) stops the pricing without being timed again.
  auto known = [&] {
    TimedSoFar k = options_.leave_out_columns ? TimedSoFar{latest_end, latest_forward} : TimedSoFar{};
    if (kept_under_comm < 1 && stop_above_ms) k.full_speed_stop_s = stop_above_ms() / 1e3;
    return k;
  };
  // What column v (in timing order) is known with: the last one is never stopped.
  auto known_at = [&](size_t v, TimedSoFar k) {
    if (v + 1 >= columns) k.full_speed_stop_s = std::numeric_limits<double>::infinity();
    return k;
  };
  auto left_out = [&](const std::optional<detail::LoneBounds>& bounds) {
    const TimedSoFar k = known();
    return LoneColumns::left_out(bounds, k.latest_end, k.latest_forward, kept_under_comm);
  };
  int programs_timed = 0;    // by the groups' first timings
  int columns_composed = 0;  // of those, lone columns composed from a few layers
  // A sample's lone column met first whose unrolled order no column kept: taken from a composed
  // column it times alike with, left out on its bounds, or composed, without its every layer
  // unrolled. None when it is to be unrolled; `compose`, whether it is composed then (not when
  // composing it failed already).
  auto lone_without_unrolling = [&](size_t p, bool& compose, const TimedSoFar& so_far) -> std::optional<TimedGroup> {
    if (const std::optional<size_t> q = lone.composed_alike(p)) {
      timings[p] = timings[*q];
      orders.set_copies(p, copies[*q]);
      return TimedGroup{};
    }
    std::optional<ComposedLone> c = compose_without_unrolling(templates[p], once[p], p, orders, so_far, composed_layers,
                                                              composers, kept_under_comm);
    compose = !c;
    if (c && c->left_out) {
      timings[p] = *left_out(c->bounds);
      return TimedGroup{};
    }
    if (!c || !c->timing) return std::nullopt;
    timings[p] = *c->timing;
    lone.remember_composed(p, std::move(c->few));
    ++programs_timed, ++columns_composed;
    return std::move(c->group);
  };
  // Keeps the ends of one program, `ends_of` (by its place in the group), or without
  // it of the one that ends last. `first`: the group's first timing, which a lone column timed
  // alike with an earlier one takes from it (then nothing is kept), with `so_far` known.
  auto time_group = [&](const std::vector<size_t>& group, bool first, std::optional<size_t> ends_of,
                        const TimedSoFar& so_far) {
    TimedGroup t;
    std::vector<detail::ProgramView> views;
    // Whether every unrolled order of the group is kept: the order library and the lone columns
    // point at the flat steps they see, so a group with one that goes after its timing shares
    // nothing.
    bool shared = true;
    if (mode == detail::PairMode::Symmetric && group.size() == 1) {
      const size_t p = group[0];
      std::shared_ptr<const FlatStep> flat = orders.known(p);
      if (flat && first)
        if (const std::optional<size_t> q = lone.timed_alike(p, *flat)) {
          timings[p] = timings[*q];
          return TimedGroup{};
        }
      bool compose = true;  // once unrolled (not when composing it failed without)
      if (!flat && first)
        if (std::optional<TimedGroup> t = lone_without_unrolling(p, compose, so_far)) return std::move(*t);
      const bool known = flat != nullptr;
      if (!known) flat = orders.unrolled(p);
      const std::optional<detail::LoneBounds> bounds =
          detail::lone_bounds(detail::ProgramView(templates[p].program, *flat), once[p]);
      if (first)
        if (const std::optional<detail::RankTiming> timing = left_out(bounds)) {
          timings[p] = *timing;  // its unrolled order is not kept: nothing times it
          return TimedGroup{};
        }
      shared = known || orders.keep(p, flat);
      if (shared && first) lone.remember(p, *flat);
      t.flats.push_back(std::move(flat));
      // Timed again for the parts (not first), a column composed before is composed again.
      if (const std::optional<detail::RankTiming> timing =
              compose ? composed_column(templates[p], once[p], bounds, composed_layers, t, kept_under_comm,
                                        so_far.full_speed_stop_s)
                      : std::nullopt) {
        timings[p] = *timing;
        if (first) ++programs_timed, ++columns_composed;
        return t;
      }
    } else {
      if (mode == detail::PairMode::Symmetric)
        if (std::optional<TimedGroup> c =
                composed_pipeline(templates, once, group, ends_of, composed_layers, composers, timings, orders,
                                  kept_under_comm, so_far.full_speed_stop_s)) {
          if (first) programs_timed += int(group.size()), columns_composed += int(group.size());
          return std::move(*c);
        }
      for (size_t p : group) {
        auto [flat, kept] = orders.of(p);
        shared = shared && kept;
        t.flats.push_back(std::move(flat));
      }
    }
    std::vector<std::vector<double>> durations;  // by template op: each copy lasts its template op's
    for (size_t k = 0; k < group.size(); ++k) {
      durations.push_back(once[group[k]]);
      views.emplace_back(templates[group[k]].program, *t.flats[k]);
    }
    detail::TimelineShape::RunOptions options;
    options.by_template_op = true;
    options.compute_kept_under_comm = kept_under_comm;
    options.slowed_durations = &t.slowed;
    if (mode == detail::PairMode::Matched && options_.time_rank_classes)
      if (std::optional<std::vector<detail::RankTiming>> times =
              time_by_class(views, durations, ends_of, t, kept_under_comm, so_far.full_speed_stop_s)) {
        for (size_t k = 0; k < group.size(); ++k)
          timings[group[k]] = (*times)[t.class_of[k]];
        if (first) programs_timed += int(t.classes);
        return t;
      }
    const detail::TimelineShape shape(std::move(views), mode, shared ? library.get() : nullptr);
    stop_at_full_speed(options, so_far.full_speed_stop_s, t);
    if (ends_of)
      options.ends_of = [k = *ends_of](const std::vector<detail::RankTiming>&) { return k; };
    else
      options.ends_of = detail::critical_program;
    const std::vector<detail::RankTiming> times = shape.run(durations, &t.ends, options);
    t.timed = true;
    for (size_t k = 0; k < group.size(); ++k)
      timings[group[k]] = times[k];
    if (first) programs_timed += int(group.size());
    return t;
  };
  // The parts are read off the critical program (the first of those that end last): each group
  // keeps its own critical program's ends, and the group holding the latest so far is kept, so the
  // critical group is not timed again. (A group timed alike with an earlier one ends with it, so
  // the earlier one stays ahead.)
  TimedGroup kept;
  std::optional<size_t> kept_critical;  // the program whose ends `kept` holds
  std::vector<double> latest_ends_ms, latest_full_speed_ends_ms;
  const std::vector<size_t> visit = timing_order(groups, once, mode);
  // A sample's lone columns timed side by side on threads lent (ColumnsAhead), each taken here
  // at its turn and decided on as if timed here. Declared after what its threads read, so that it
  // waits for them first.
  const std::vector<bool> may_time_ahead =
      lend && lone_columns(groups, mode) ? columns_to_time_ahead(templates, groups, visit) : std::vector<bool>{};
  std::optional<detail::ColumnsAhead<LoneColumn, TimedSoFar>> ahead;
  if (!may_time_ahead.empty())
    ahead.emplace(may_time_ahead, kColumnsAhead, [&](size_t v, const TimedSoFar& known) {
      const size_t p = groups[visit[v]][0];
      return time_lone_column(templates, once[p], p, orders, known_at(v, known), composed_layers, composers,
                              kept_under_comm);
    });
  auto take_ahead = [&](size_t v) {
    const size_t p = groups[visit[v]][0];
    LoneColumn c = ahead->take(v, known());
    if (const std::optional<detail::RankTiming> timing = left_out(c.bounds)) {
      timings[p] = *timing;
      return TimedGroup{};
    }
    WF_ASSERT(c.timing.has_value(), "a column left out when taken ahead is left out at its turn");
    timings[p] = *c.timing;
    if (!c.flat)
      lone.remember_composed(p, std::move(c.few));
    else if (orders.keep(p, c.flat))
      lone.remember(p, *c.flat);
    ++programs_timed;
    columns_composed += c.group.composed;
    return std::move(c.group);
  };
  for (size_t v = 0; v < visit.size(); ++v) {
    const std::vector<size_t>& group = groups[visit[v]];
    if (ahead) {
      ahead->reach(v, known());
      ahead->lend(lend);
    }
    TimedGroup t =
        ahead && may_time_ahead[v] ? take_ahead(v) : time_group(group, true, std::nullopt, known_at(v, known()));
    // A group timed at full speed first ends no later than slowed: by its latest end so, known
    // however far the pricing goes, a pruned step is told the same whatever stopped it. A group
    // not timed here (taken from another, left out) adds nothing to it.
    const double full_speed_latest_ms = std::max(latest_end, t.full_speed_end_s.value_or(0.0)) * 1e3;
    for (size_t p : group) {
      latest_end = std::max(latest_end, timings[p].end_s);
      latest_forward = std::max(latest_forward, timings[p].forward_end_s);
    }
    latest_ends_ms.push_back(latest_end * 1e3);
    if (kept_under_comm < 1) latest_full_speed_ends_ms.push_back(full_speed_latest_ms);
    WF_ASSERT(!t.at_full_speed || v + 1 < visit.size(), "the last column is not stopped at full speed");
    const double stop_ms =
        stop_above_ms && v + 1 < visit.size() ? stop_above_ms() : std::numeric_limits<double>::infinity();
    // Past the stop at full speed, whether or not the group was timed slowed too (one timed
    // ahead read a stop that has fallen since): the pricing stops so, as it does when the group
    // is timed here with the stop read now.
    const bool at_full_speed = t.at_full_speed || (kept_under_comm < 1 && full_speed_latest_ms > stop_ms);
    if (at_full_speed) latest_ends_ms.back() = full_speed_latest_ms;
    if (at_full_speed || latest_ends_ms.back() > stop_ms) {
      CostBreakdown stopped;
      stopped.step_ms = latest_ends_ms.back();
      stopped.latest_ends_ms = std::move(latest_ends_ms);
      stopped.latest_full_speed_ends_ms = std::move(latest_full_speed_ends_ms);
      stopped.stopped = true;
      stopped.stopped_at_full_speed = at_full_speed;
      WF_LOG_DEBUG("cost", "step of {} timed ranks: stopped after {} of {} groups{}, {} programs timed",
                   templates.size(), v + 1, visit.size(), at_full_speed ? " at full speed" : "", programs_timed);
      stopped.programs_timed = programs_timed;
      stopped.columns_composed = columns_composed;
      return stopped;
    }
    if (!t.timed) continue;
    std::vector<detail::RankTiming> times;
    for (size_t p : group)
      times.push_back(timings[p]);
    const size_t critical = group[detail::critical_program(times)];
    const double end = timings[critical].end_s, latest = kept_critical ? timings[*kept_critical].end_s : 0;
    if (!kept_critical || end > latest || (end == latest && critical < *kept_critical))
      kept = std::move(t), kept_critical = critical;
  }
  const PartsOf parts = [&](size_t critical, double step_s, double mean_compute_s, double busiest_compute_s) {
    const auto in = std::find_if(groups.begin(), groups.end(), [&](const std::vector<size_t>& g) {
      return std::find(g.begin(), g.end(), critical) != g.end();
    });
    const size_t k = size_t(std::find(in->begin(), in->end(), critical) - in->begin());
    if (kept_critical != critical || kept.ends[kept.in_shape(k)].empty())
      kept = time_group(*in, false, k, TimedSoFar{});
    if (!kept.flats[k])  // composed without its every layer unrolled
      kept.flats[k] = std::make_shared<const FlatStep>(unroll_flat(templates[critical]));
    WF_ASSERT(kept.flats[k]->size() == kept.ends[kept.in_shape(k)].size(), "the parts read an end of every op");
    detail::TierClassifier tiers(topology_, plan);
    // Compute slowed by communication was timed with its ops lengthened.
    const size_t in_shape = kept.in_shape(k);
    const bool lengthened = in_shape < kept.slowed.size() && !kept.slowed[in_shape].empty();
    return detail::step_parts(detail::ProgramView(templates[critical].program, *kept.flats[k]),
                              flat_durations(lengthened ? kept.slowed[in_shape] : once[critical], *kept.flats[k]),
                              kept.ends[in_shape], step_s, mean_compute_s, busiest_compute_s, tiers);
  };
  CostBreakdown cost = summarize_timings(plan, timings, &parts);
  cost.programs_timed = programs_timed;
  cost.columns_composed = columns_composed;
  WF_LOG_DEBUG("cost", "step of {} timed ranks: {} programs timed, {} of them composed from a few layers",
               templates.size(), programs_timed, columns_composed);
  cost.latest_ends_ms = std::move(latest_ends_ms);
  cost.latest_full_speed_ends_ms = std::move(latest_full_speed_ends_ms);
  kept = TimedGroup{};  // release the unrolled orders before the rest is read off the templates
  library.reset();
  orders.clear();
  cost.volume = template_volume(programs, copies);
  template_transfers(topology_, plan, programs, copies, cost.parts);
  return cost;
}

}  // namespace wallfacer
