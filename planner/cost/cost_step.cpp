// The whole-step cost (cost_model.hpp, docs/cost-model.md "The whole step"): the timed ranks'
// step templates are unrolled to every layer and timed like any schedule.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/cost/compute_time.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/schedule_hash.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "footprint_cache.hpp"
#include "layer_composition.hpp"
#include "timeline.hpp"

namespace wallfacer {
namespace {

// `schedule` without its weight-gradient all-reduces (nothing waits for them), its token sets taken
// over from `schedule` (give them back once done). Only the ops kept are copied: a copy of every
// program whole, ops cleared after, was a twentieth of a 1,024-GPU step search, most of it in
// faulting in fresh pages.
Schedule without_gradient_all_reduce(Schedule& schedule) {
  Schedule out;
  out.dims = schedule.dims;
  out.tokens = std::move(schedule.tokens);
  out.flow_sets = schedule.flow_sets;
  for (RankProgram& program : schedule.ranks) {
    std::vector<Op> ops = std::move(program.ops);
    std::vector<int32_t> all_deps = std::move(program.deps);
    RankProgram& p = out.ranks.emplace_back(program);  // all but the ops and their dependencies
    program.ops = std::move(ops);
    program.deps = std::move(all_deps);
    p.ops.reserve(program.ops.size());
    p.deps.reserve(program.deps.size());
    std::vector<int32_t> at(program.ops.size(), -1);
    std::vector<int32_t> deps;
    for (size_t i = 0; i < program.ops.size(); ++i) {
      const Op& op = program.ops[i];
      if (op.kind == OpKind::AllReduce && (op.fields & fieldset::kWeightGrad)) continue;
      deps.clear();
      for (const int32_t* d = program.deps_begin(op); d != program.deps_end(op); ++d)
        if (at[size_t(*d)] >= 0) deps.push_back(at[size_t(*d)]);
      at[i] = p.add(op, deps);
    }
  }
  return out;
}

}  // namespace

CostBreakdown CostModel::evaluate_step(const Plan& plan, const std::function<double()>& stop_above_ms,
                                       const ThreadLender& lend) const {
  WF_ASSERT(plan.scope == Scope::Step, "evaluate_step needs a plan of step scope");
  const Workload& w = plan.workload;
  StepBuilder builder(plan);
  // The ranks the attention cost would time (whole pipeline columns), within the same op budget
  // counted on the attention programs.
  Schedule attention;  // the timed ranks' attention programs, for memory and the attention time
  build_timed(plan, attention);
  const uint64_t fingerprint = schedule_hash(plan, attention);
  // Every layer of every micro-batch is timed: a few timed layers extended linearly were tried,
  // and the per-layer increment of the list schedule keeps changing for many layers where the
  // backward's gradient buckets queue up behind the strategy's collectives (docs/cost-model.md).
  Schedule step;  // the step programs' dims, flow sets and token sets
  step.dims = builder.dims();
  step.flow_sets = builder.flow_sets();
  // The memory and the attention alone read the attention programs before the templates may take
  // them over.
  const MemoryEstimate memory = step_memory(plan, attention);
  // The attention alone: its own schedule's step (whole batch), once per layer, without the
  // strategy's weight-gradient all-reduce, which the step replaces by its own synchronisation.
  // Timed once the step is, for a search stops most pricings it starts at their first columns.
  Schedule alone = without_gradient_all_reduce(attention);  // with the attention's token sets
  std::vector<StepTemplate> templates;
  templates.reserve(attention.ranks.size());
  // One micro-batch of one virtual stage is the plan itself: its attention programs are the
  // templates' own, taken over with their token sets instead of built again (as the compute bound
  // does), which was about half of building the templates. The templates' sets are interned after
  // the attention's, whose ids stay.
  const bool taken_over = w.microbatches == 1 && plan.params.virtual_stages <= 1;
  if (taken_over) {
    step.tokens = std::move(alone.tokens);
    for (RankProgram& program : attention.ranks)
      templates.push_back(builder.build_template(std::move(program), step.tokens));
  } else {
    for (const RankProgram& program : attention.ranks)
      templates.push_back(builder.build_template(program.rank, step.tokens));
  }
  attention = Schedule{};
  CostBreakdown cost;
  if (options_.step_shortcuts) {
    cost = time_step_templates(plan, step, templates, stop_above_ms, lend);
    if (cost.stopped) return cost;
  } else {
    for (const StepTemplate& t : templates)
      step.ranks.push_back(unroll(t));
    cost = evaluate_times(plan, step);
    cost.programs_timed = int(step.ranks.size());
    cost.volume = comm_volume(step);
    count_transfers(topology_, plan, step, cost.parts);
    cost.latest_ends_ms = {cost.step_ms};  // every program timed together, never stopped
  }
  templates.clear();
  if (taken_over) alone.tokens = std::move(step.tokens);
  const CostBreakdown layer = evaluate_times(plan, alone);
  alone = Schedule{};
  cost.attention_fingerprint = fingerprint;
  cost.layers_timed = w.layers;
  // Transfers per layer instance a rank runs: its stage's layers, once per micro-batch.
  const double instances = double(w.layers / plan.params.pipeline_parallel) * w.microbatches;
  for (double& count : cost.parts.transfers_per_layer)
    count /= instances;
  cost.backward_ms = cost.step_ms - cost.forward_ms;
  cost.memory = memory;
  cost.attention_ms = layer.step_ms * w.layers;
  cost.attention_flops = layer.attention_flops;
  cost.model_flops = step_model_flops(w);
  const double step_s = cost.step_ms * 1e-3;
  const double peak = kernel_peak_tflops(topology_.gpu(), w.dtype) * 1e12;
  cost.tokens_per_s = step_s > 0 ? double(w.seq) * w.batch / step_s : 0;
  cost.mfu = step_s > 0 ? cost.model_flops / (step_s * plan.num_ranks() * peak) : 0;
  return cost;
}

namespace {

// Which step template a stage builds, for its compute: the first stage's holds the embedding, the
// last one's the LM head and the loss, and the stages between hold the same layers and parameters.
int stage_kind(const Plan& plan, int rank) {
  const int Pp = plan.params.pipeline_parallel, stage = rank / (plan.num_ranks() / Pp);
  return stage == 0 ? 0 : stage == Pp - 1 ? 2 : 1;
}

// A rank's place in its strategy: its rank in its data-parallel replica of the sequence-parallel
// group, within its tensor slice and pipeline stage (rank = stage · W + (replica · S + this) · T +
// slice, W the ranks of a stage). Replicas, slices and stages build one program as the first
// replica, slice and stage do, with peers, groups and sequences renamed (common.hpp,
// tensor_parallel.hpp, pipeline_parallel.hpp): the same compute ops and buffers.
int sequence_rank(const Plan& plan, int rank) {
  const int W = plan.num_ranks() / plan.params.pipeline_parallel;
  return rank % W / std::max(1, plan.params.tensor_parallel) % std::max(1, plan.params.sequence_parallel);
}

}  // namespace

namespace {

// Compute seconds of one micro-batch's forward and backward on a rank, and of its epilogue.
struct ComputeParts {
  double forward = 0, backward = 0, epilogue = 0;
};

ComputeParts compute_parts(const StepTemplate& t, ComputeTimer& timer, const TokenSetPool& pool) {
  ComputeParts parts;
  for (uint32_t i = 0; i < t.program.ops.size(); ++i) {
    const Op& op = t.program.ops[i];
    if (op.stream != Stream::Compute) continue;
    const double seconds = timer.seconds(op, pool) * (in_layer_section(t.sections, i) ? t.layers : 1);
    if (in_epilogue(t.sections, i))
      parts.epilogue += seconds;
    else
      (i < t.sections.head_end ? parts.forward : parts.backward) += seconds;
  }
  return parts;
}

// What a rank's step template computes, besides what its plan fixes: its stage kind, its own
// query rows (the rows of its projections, MLP and norms) and its attention's compute ops, by their
// seconds in program order, forward ones first. The template builder reads nothing else of the
// attention program for its compute ops, so two ranks of one plan with equal signatures get the
// same compute parts, bit for bit: most ranks of a balanced strategy do (86 % of the templates of a
// 512-GPU search).
struct ComputeSignature {
  int stage_kind = 0;
  int64_t query_rows = 0;  // the Q inputs' tokens x heads, x the sequences
  size_t forward_ops = 0;
  std::vector<double> seconds;
  auto operator<=>(const ComputeSignature&) const = default;
};

ComputeSignature compute_signature(int stage_kind, const RankProgram& attention, ComputeTimer& timer,
                                   const TokenSetPool& pool) {
  ComputeSignature sig;
  sig.stage_kind = stage_kind;
  sig.query_rows = query_token_heads(attention, pool) * (attention.batch_end - attention.batch_begin);
  for (const Op& op : attention.ops) {
    if (op.stream != Stream::Compute) continue;
    if (op.phase != Phase::Backward) ++sig.forward_ops;
    sig.seconds.push_back(timer.seconds(op, pool));
  }
  return sig;
}

// The plan a memo's figures belong to, its placement left out (the placement knobs only permute
// the GPUs: StrategyImpl::positions).
struct PlacementFree {
  StrategyKind strategy = StrategyKind::Ring;
  StrategyParams params;
  Workload workload;
  int ranks = 0;
  bool operator==(const PlacementFree&) const = default;
};

PlacementFree placement_free(const Plan& plan) {
  return {plan.strategy, without_placement(plan.params), plan.workload, plan.num_ranks()};
}

// build_timed's walk over `ranks` (timed_ranks order) with its op budget: `visit(rank)` takes a
// rank and returns the ops of its program (a rank renamed from another counts that program's
// ops). Returns how many ranks it took: those build_timed times.
template <typename Visit>
size_t walk_timed_ranks(const Plan& plan, const std::vector<int>& ranks, int64_t max_ops, Visit&& visit) {
  const size_t Pp = size_t(plan.params.pipeline_parallel);
  size_t walked = 0;
  int64_t ops = 0;
  for (int rank : ranks) {
    // A pipeline column is taken whole or not at all.
    if (max_ops > 0 && walked >= 2 && ops >= max_ops && walked % Pp == 0) break;
    ops += int64_t(visit(rank));
    ++walked;
  }
  return walked;
}

}  // namespace

struct StepBoundMemo::Impl {
  std::optional<PlacementFree> plan;
  std::map<int, AttentionFootprint> footprints;        // sequence rank -> its attention program's
  std::map<int, size_t> program_ops;                   // sequence rank -> that program's ops
  std::map<std::pair<int, int>, ComputeParts> alike;   // (stage kind, sequence rank) -> its parts
  std::map<ComputeSignature, ComputeParts> computing;  // templates built, by what they compute

  // Whether the memo holds figures of `p` (after forgetting those of another plan).
  void bind(const Plan& p) {
    PlacementFree key = placement_free(p);
    if (plan == key) return;
    *this = Impl{};
    plan = std::move(key);
  }
};

StepBoundMemo::StepBoundMemo() : impl_(std::make_unique<Impl>()) {}
StepBoundMemo::~StepBoundMemo() = default;

Schedule CostModel::sequence_rank_programs(const Plan& plan, StepBoundMemo& memo, AttentionFootprint& footprint) const {
  StepBoundMemo::Impl& m = *memo.impl_;
  m.bind(plan);
  ScheduleBuilder builder(plan);
  Schedule built;
  built.dims = builder.dims();
  built.flow_sets = builder.flow_sets();
  footprint = {};
  walk_timed_ranks(plan, timed_ranks(plan), options_.max_timed_ops, [&](int rank) {
    const int s = sequence_rank(plan, rank);
    auto [it, fresh] = m.footprints.try_emplace(s);
    if (fresh) {
      const RankProgram& program =
          built.ranks.emplace_back(builder.build_rank(rank, built.tokens, BuildMode::ComputeOnly));
      it->second = program_footprint(plan, built.dims, program, built.tokens);
      m.program_ops[s] = program.op_count();
    }
    footprint.rows = std::max(footprint.rows, it->second.rows);
    footprint.buffer_bytes = std::max(footprint.buffer_bytes, it->second.buffer_bytes);
    return m.program_ops.at(s);
  });
  return built;
}

Schedule CostModel::memory_programs(const Plan& plan) const {
  Schedule programs;
  if (!options_.build_per_sequence_rank) {
    build_timed(plan, programs);
    return programs;
  }
  StepBoundMemo memo;
  AttentionFootprint footprint;
  return sequence_rank_programs(plan, memo, footprint);
}

AttentionFootprint CostModel::memory_footprint(const Plan& plan, Schedule* programs, StepBoundMemo* memo) const {
  detail::FootprintCache::Key key = detail::FootprintCache::key_of(plan);
  if (const std::optional<AttentionFootprint> known = footprints_->find(key)) return *known;
  Schedule built;
  AttentionFootprint footprint;
  if (options_.build_per_sequence_rank) {
    StepBoundMemo local;
    built = sequence_rank_programs(plan, memo ? *memo : local, footprint);
  } else {
    built = memory_programs(plan);
    footprint = attention_footprint(plan, built);
  }
  footprints_->add(std::move(key), footprint);
  if (programs) *programs = std::move(built);
  return footprint;
}

double CostModel::step_compute_bound_ms(const Plan& plan, BoundRank* busiest, MemoryEstimate* memory,
                                        double memory_budget_GiB, StepBoundMemo* memo) const {
  if (!options_.build_per_sequence_rank) memo = nullptr;  // the reference builds every rank, whole
  const BuildMode mode = options_.build_per_sequence_rank ? BuildMode::ComputeOnly : BuildMode::Full;
  StepBuilder builder(plan);
  ComputeTimer timer(topology_.gpu(), calibration_, plan.workload);
  const int Pp = plan.params.pipeline_parallel, W = plan.num_ranks() / Pp, M = plan.workload.microbatches;
  const double v = std::max(1, plan.params.virtual_stages);  // interleaved: the ramp is one chunk per stage
  // With memory asked for, the attention programs evaluate_step would build (unless the footprint
  // is known); one micro-batch of one virtual stage is the plan itself, so those programs are the
  // templates' own and are not built twice.
  Schedule attention;
  if (memory) {
    *memory = step_memory(plan, memory_footprint(plan, &attention, memo));
    if (memory->total_GiB > memory_budget_GiB) return std::numeric_limits<double>::infinity();
  }
  const bool reuse = memory && M == 1 && plan.params.virtual_stages <= 1;
  std::map<int, size_t> built;  // rank -> its program in `attention`
  for (size_t p = 0; reuse && p < attention.ranks.size(); ++p)
    built.emplace(attention.ranks[p].rank, p);
  TokenSetPool& pool = attention.tokens;
  // Rank `rank`'s attention program (of sequence rank `s`): the other stages' ranks of a sequence
  // rank rename the first program of it the bound holds instead of building theirs.
  std::map<int, RankProgram> renamed_from;  // sequence rank -> that program
  const bool rename_stages = options_.build_per_sequence_rank && Pp > 1;
  auto attention_of = [&](int rank, int s) {
    RankProgram program;
    const auto sibling = renamed_from.find(s);
    if (const auto have = built.find(rank); have != built.end())
      program = std::move(attention.ranks[have->second]);  // each rank is timed once: not read again
    else if (sibling != renamed_from.end() && builder.renames_attention(rank, sibling->second.rank))
      program = builder.rename_attention(rank, sibling->second);
    else
      program = builder.build_attention(rank, pool, mode);
    if (rename_stages && sibling == renamed_from.end()) renamed_from.emplace(s, program);
    return program;
  };
  std::map<int, std::vector<std::pair<int, ComputeParts>>> columns;  // stage rank -> (stage, parts)
  StepBoundMemo local;
  StepBoundMemo::Impl& known_parts = *(memo ? memo : &local)->impl_;
  known_parts.bind(plan);
  auto& alike = known_parts.alike;          // (stage_kind, sequence rank) -> its parts
  auto& computing = known_parts.computing;  // templates built, by what they compute
  double most = -1;
  // The ranks build_timed times: those past its op budget are not (a rank counts the ops of its
  // sequence rank's program, which it renames).
  const size_t walked = walk_timed_ranks(plan, timed_ranks(plan), options_.max_timed_ops, [&](int rank) {
    const std::pair<int, int> place{stage_kind(plan, rank), sequence_rank(plan, rank)};
    auto same = alike.find(place);
    if (same == alike.end() || !options_.build_per_sequence_rank) {
      RankProgram program = attention_of(rank, place.second);
      known_parts.program_ops[place.second] = program.op_count();
      ComputeSignature sig = compute_signature(place.first, program, timer, pool);
      auto known = computing.find(sig);
      if (known == computing.end() || !options_.build_per_sequence_rank)
        known = computing
                    .insert_or_assign(std::move(sig),
                                      compute_parts(builder.build_template(std::move(program), pool), timer, pool))
                    .first;
      same = alike.insert_or_assign(place, known->second).first;
    }
    const ComputeParts parts = same->second;
    columns[rank % W].push_back({rank / W, parts});
    const double seconds = M * (parts.forward + parts.backward) + parts.epilogue;
    if (busiest && seconds > most) most = seconds, busiest->rank = rank;
    return known_parts.program_ops.at(place.second);
  });
  if (busiest) busiest->sampled = walked < size_t(plan.num_ranks());
  // Each rank's compute stream runs its micro-batches one op at a time; in a pipeline, a stage's
  // first forward also waits for the earlier stages' forward of that micro-batch, and the step
  // ends after the earlier stages ran the last micro-batch's backward.
  double longest = 0;
  for (auto& [local, stages] : columns) {
    std::sort(stages.begin(), stages.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    double before = 0;  // forward + backward of one micro-batch on the earlier stages of the column
    int expected = 0;   // the ramp counts only when the earlier stages are all timed
    for (const auto& [stage, parts] : stages) {
      if (stage != expected++) before = 0, expected = stage + 1;
      longest = std::max(longest, before + M * (parts.forward + parts.backward) + parts.epilogue);
      before += (parts.forward + parts.backward) / v;
    }
  }
  return longest * 1e3;
}

namespace {

// What a timed bound times of a plan's busiest column before any op is priced: the column's step
// templates and, once a placement's column is not composed from a few layers, their unrolled
// orders and timeline. Held by pointer: the timeline's programs point into the templates and
// orders.
struct BoundColumn {
  PlacementFree plan;
  BoundRank busiest;
  Schedule step;  // the column's dims, flow sets and token sets
  std::vector<StepTemplate> templates;
  std::vector<FlatStep> flats;  // unrolled with the timeline
  std::vector<const RankProgram*> programs;
  std::unique_ptr<detail::TimelineShape> shape;
  bool serves(const Plan& p, BoundRank rank) const {
    return busiest.rank == rank.rank && busiest.sampled == rank.sampled && plan == placement_free(p);
  }
  const detail::TimelineShape& timeline() {
    if (!shape)
      shape = std::make_unique<detail::TimelineShape>(
          views(), busiest.sampled ? detail::PairMode::Symmetric : detail::PairMode::StagesOnly);
    return *shape;
  }
  // The column's programs on their unrolled orders of every layer, unrolled the first time.
  std::vector<detail::ProgramView> views() {
    if (flats.empty()) {
      flats.reserve(templates.size());
      for (const StepTemplate& t : templates)
        flats.push_back(unroll_flat(t));
    }
    std::vector<detail::ProgramView> views;
    for (size_t p = 0; p < templates.size(); ++p)
      views.emplace_back(templates[p].program, flats[p]);
    return views;
  }
  // The timings of a sample's column (lone, or a pipeline column of one micro-batch) composed
  // from `layers` of its layers, as the step's pricing composes it (so that a bound that is the
  // step is the step to the bit), with `kept` below 1 composed again with its compute slowed by
  // communication; none when the column is not sampled or its layers do not repeat.
  std::optional<std::vector<detail::RankTiming>> composed(const std::vector<std::vector<double>>& once, int layers,
                                                          double kept) {
    if (!busiest.sampled || layers <= 0 || !prepare(layers)) return std::nullopt;
    if (templates.size() == 1) {
      const std::optional<detail::LoneBounds> bounds = composer->bounds(once[0]);
      if (!bounds) return std::nullopt;
      std::optional<detail::ComposedColumn> c = composer->compose(once[0], *bounds);
      std::vector<double> slowed;
      if (c && kept < 1) c = detail::compose_slowed(*composer, views().front(), once[0], *c, kept, slowed);
      if (!c) return std::nullopt;
      return std::vector<detail::RankTiming>{c->timing};
    }
    std::vector<const std::vector<double>*> seconds;
    for (const std::vector<double>& program : once)
      seconds.push_back(&program);
    std::optional<std::vector<detail::ComposedColumn>> c = composer->compose(seconds);
    std::vector<std::vector<double>> slowed;
    if (c && kept < 1) c = detail::compose_slowed(*composer, views(), seconds, *c, kept, slowed);
    if (!c) return std::nullopt;
    std::vector<detail::RankTiming> timings;
    for (const detail::ComposedColumn& program : *c)
      timings.push_back(program.timing);
    return timings;
  }
  // How many copies of each template op the column's step holds, read off the composer without
  // unrolling every layer; none when its layers cannot be composed.
  std::optional<std::vector<std::vector<uint32_t>>> copies(int layers) {
    if (!prepare(layers)) return std::nullopt;
    std::vector<std::vector<uint32_t>> copies;
    for (size_t p = 0; p < templates.size(); ++p)
      copies.push_back(composer->copies(p));
    return copies;
  }
  // The column's composer, prepared the first time (none when its layers cannot be composed).
  detail::LayerComposer* prepare(int layers) {
    if (!composer_prepared) {
      std::vector<const StepTemplate*> column;
      for (const StepTemplate& t : templates)
        column.push_back(&t);
      composer = detail::LayerComposer::prepare(column, layers);
    }
    composer_prepared = true;
    return composer.get();
  }
  std::unique_ptr<detail::LayerComposer> composer;  // prepared at the first placement
  bool composer_prepared = false;
};

// The busiest column's step templates; with `attention` ComputeOnly, the attention programs hold
// their compute alone (the synchronisation bound reads the other streams of the step).
std::unique_ptr<BoundColumn> bound_column(const Plan& plan, BoundRank busiest, BuildMode attention = BuildMode::Full) {
  auto column = std::make_unique<BoundColumn>();
  column->plan = placement_free(plan);
  column->busiest = busiest;
  const int rank = busiest.rank;
  StepBuilder builder(plan);
  column->step.dims = builder.dims();
  column->step.flow_sets = builder.flow_sets();
  const int Pp = plan.params.pipeline_parallel, W = plan.num_ranks() / Pp;
  column->templates.reserve(size_t(Pp));
  for (int p = 0; p < Pp; ++p) {
    const int stage_rank = p * W + rank % W;
    column->templates.push_back(
        attention == BuildMode::Full
            ? builder.build_template(stage_rank, column->step.tokens)
            : builder.build_template(builder.build_attention(stage_rank, column->step.tokens, attention),
                                     column->step.tokens));
  }
  for (const StepTemplate& t : column->templates)
    column->programs.push_back(&t.program);
  return column;
}

}  // namespace

double CostModel::step_lower_bound_ms(const Plan& plan, BoundRank busiest) const {
  return step_lower_bounds_ms({{&plan, busiest}}).front();
}

std::vector<double> CostModel::step_sync_bounds_ms(const std::vector<BoundedPlan>& plans) const {
  // Sums of up to millions of copies, each rounded its own way, against a run's chain of ends.
  constexpr double kMargin = 1e-9;
  std::vector<double> bounds;
  std::unique_ptr<BoundColumn> column;  // the last one built
  std::optional<std::vector<std::vector<uint32_t>>> copies;
  for (auto [plan, busiest] : plans) {
    WF_ASSERT(plan->scope == Scope::Step, "step_sync_bounds_ms needs a plan of step scope");
    if (busiest.rank < 0) step_compute_bound_ms(*plan, &busiest);
    if (!column || !column->serves(*plan, busiest)) {
      column = bound_column(*plan, busiest, BuildMode::ComputeOnly);
      copies = column->copies(std::max(4, options_.composed_layers));
    }
    double longest = 0;
    if (copies)
      for (const double seconds : template_sync_seconds(*plan, column->step, column->programs, *copies))
        longest = std::max(longest, seconds);
    bounds.push_back(longest * 1e3 * (1 - kMargin));
  }
  return bounds;
}

std::vector<double> CostModel::step_lower_bounds_ms(const std::vector<BoundedPlan>& plans) const {
  std::vector<double> bounds;
  std::unique_ptr<BoundColumn> column;  // the last one built
  for (auto [plan, busiest] : plans) {
    WF_ASSERT(plan->scope == Scope::Step, "step_lower_bound_ms needs a plan of step scope");
    if (busiest.rank < 0) step_compute_bound_ms(*plan, &busiest);
    if (!column || !column->serves(*plan, busiest)) {
      column.reset();
      column = bound_column(*plan, busiest);
    }
    // Each copy of a template op lasts the template op's time, read through the template (no
    // list of durations per unrolled op: the bound is taken for most candidates of a search).
    // The flow sets are of ranks, the plan maps them to its GPUs.
    const std::vector<std::vector<double>> once = template_op_durations(*plan, column->step, column->programs);
    // A sample's column is priced as the step prices it, its compute slowed by communication
    // included: the step ends no earlier than any of its columns. Other columns (StagesOnly)
    // time compute at full speed.
    if (const std::optional<std::vector<detail::RankTiming>> timings =
            column->composed(once, options_.composed_layers, compute_kept_under_comm())) {
      bounds.push_back(summarize_timings(*plan, *timings, nullptr).step_ms);
      continue;
    }
    detail::TimelineShape::RunOptions options;
    options.by_template_op = true;
    options.compute_kept_under_comm = compute_kept_under_comm();
    bounds.push_back(summarize_timings(*plan, column->timeline().run(once, nullptr, options), nullptr).step_ms);
  }
  return bounds;
}

}  // namespace wallfacer
