// Sampled columns composed from a few of their layers (detail::LayerComposer): on the unrolled
// step templates of every strategy under every ZeRO stage, with random durations, a composed
// column's every op ends when timing every layer ends it (up to rounding) and its compute is the
// run's to the bit; a column whose layers settle later than the runs show is timed whole; and the
// cost model prices and bounds sampled steps composed as it does timing every layer.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "cost_test_util.hpp"
#include "layer_composition.hpp"
#include "timeline.hpp"

namespace wallfacer {
namespace {

using detail::PairMode;
using detail::ProgramView;
using detail::RankTiming;

struct FullRun {
  RankTiming timing;
  std::vector<double> ends;
};

// The column timed over every layer, as the cost model times a sampled column without composing.
FullRun run_every_layer(const StepTemplate& step, const FlatStep& flat, const std::vector<double>& seconds) {
  detail::TimelineShape::RunOptions options;
  options.by_template_op = true;
  options.ends_of = [](const std::vector<RankTiming>&) { return size_t(0); };
  std::vector<std::vector<double>> ends;
  FullRun run;
  run.timing = detail::TimelineShape({ProgramView(step.program, flat)}, PairMode::Symmetric)
                   .run({seconds}, &ends, options)
                   .front();
  run.ends = std::move(ends.front());
  return run;
}

void expect_like_the_run(const detail::ComposedColumn& composed, const FullRun& run) {
  const double tolerance = 1e-9 * run.timing.end_s;
  EXPECT_NEAR(composed.timing.end_s, run.timing.end_s, tolerance);
  EXPECT_NEAR(composed.timing.forward_end_s, run.timing.forward_end_s, tolerance);
  EXPECT_EQ(composed.timing.compute_forward_s, run.timing.compute_forward_s);
  EXPECT_EQ(composed.timing.compute_backward_s, run.timing.compute_backward_s);
  ASSERT_EQ(composed.ends.size(), run.ends.size());
  size_t off = 0;
  for (size_t i = 0; i < run.ends.size(); ++i)
    off += !(std::abs(composed.ends[i] - run.ends[i]) <= tolerance);
  EXPECT_EQ(off, 0u) << "ops whose composed end is not the run's";
}

// A small GQA model of 14 layers at 4K tokens, one sequence, several gradient buckets a layer.
Workload composed_workload(int zero, Checkpointing checkpointing) {
  Workload w = testing::mha_workload(4096, 8, 64, /*causal=*/true, 1);
  w.layers = 14;
  w.kv_heads = 4;
  w.ffn = 1024;
  w.vocab = 2048;
  w.zero_stage = zero;
  w.checkpointing = checkpointing;
  w.grad_bucket_MiB = 1;
  return w;
}

// Every feasible step plan of 8 GPUs on two 4-GPU nodes, each strategy under ZeRO 0 to 3, in
// `stages` pipeline stages (of 8 / stages GPUs each; one micro-batch, so that with 16 layers each
// of 2 stages runs 8).
template <typename Visit>
void for_each_plan(const Topology& topology, Visit&& visit, int stages = 1) {
  const std::pair<int, Checkpointing> settings[] = {
      {0, Checkpointing::None}, {1, Checkpointing::Selective}, {2, Checkpointing::None}, {3, Checkpointing::Full}};
  for (const auto& [zero, checkpointing] : settings) {
    Workload w = composed_workload(zero, checkpointing);
    if (stages > 1) w.layers = 16;
    for (StrategyKind kind : all_strategies()) {
      int index = 0;
      for (StrategyParams params : enumerate_params(kind, w, 8 / stages)) {
        ++index;
        params.pipeline_parallel = stages;
        if (!check_feasible(kind, params, w, 8).ok) continue;
        Plan plan = make_plan(kind, params, w, topology, 8);
        plan.scope = Scope::Step;
        SCOPED_TRACE(fmt::format("{} parameters #{} ZeRO {} P={}", to_string(kind), index, zero, stages));
        visit(plan);
      }
    }
  }
}

// A rank's step template, its unrolled order of every layer, and durations of its template ops
// drawn by `draw(template op)`.
struct DrawnColumn {
  StepTemplate step;
  FlatStep flat;
  std::vector<double> seconds;
};

// How many copies of each template op the column's unrolled order of every layer holds.
std::vector<uint32_t> copies_of(const DrawnColumn& c) {
  std::vector<uint32_t> copies(c.step.program.ops.size(), 0);
  for (const uint32_t op : c.flat.origin)
    ++copies[op];
  return copies;
}

template <typename Draw>
DrawnColumn drawn_column(const StepBuilder& builder, int rank, TokenSetPool& pool, Draw&& draw) {
  DrawnColumn c;
  c.step = builder.build_template(rank, pool);
  c.flat = unroll_flat(c.step);
  for (size_t i = 0; i < c.step.program.ops.size(); ++i)
    c.seconds.push_back(draw(i));
  return c;
}

TEST(LayerComposition, ComposedColumnsEndLikeTimingEveryLayer) {
  const Topology topology = testing::switch_nodes(2, 4);
  std::mt19937_64 random(11);
  std::uniform_real_distribution<double> uniform(0.0, 1e-3);
  int columns = 0, composed = 0;
  for_each_plan(topology, [&](const Plan& plan) {
    const StepBuilder builder(plan);
    TokenSetPool pool;
    for (int rank : {0, 5}) {
      SCOPED_TRACE(fmt::format("rank {}", rank));
      const auto [step, flat, seconds] =
          drawn_column(builder, rank, pool, [&](size_t i) { return i % 7 == 0 ? 0.0 : uniform(random); });
      const std::optional<detail::LoneBounds> bounds = detail::lone_bounds(ProgramView(step.program, flat), seconds);
      ASSERT_TRUE(bounds.has_value());
      const FullRun run = run_every_layer(step, flat, seconds);
      for (int K : {4, 5}) {
        ++columns;
        const std::optional<detail::ComposedColumn> c = detail::compose_layers(step, flat, seconds, *bounds, K);
        if (!c) continue;
        ++composed;
        SCOPED_TRACE(fmt::format("composed from {} layers", K));
        expect_like_the_run(*c, run);
      }
    }
  });
  EXPECT_GT(columns, 150);
  EXPECT_GT(composed, columns * 3 / 4);
}

// A sample's pipeline column of one micro-batch: both stages' programs of a sequence rank, timed
// together (the stage messages met by their real other ends), composed from 4 and from 5 layers
// of the 8 each stage runs: every op of both ends as timing every layer ends it, up to rounding,
// and their compute is the run's to the bit.
TEST(LayerComposition, PipelineColumnsEndLikeTimingEveryLayer) {
  const Topology topology = testing::switch_nodes(2, 4);
  std::mt19937_64 random(17);
  std::uniform_real_distribution<double> uniform(0.0, 1e-3);
  int columns = 0, composed = 0;
  for_each_plan(
      topology,
      [&](const Plan& plan) {
        const StepBuilder builder(plan);
        TokenSetPool pool;
        for (int rank : {0, 3}) {
          SCOPED_TRACE(fmt::format("sequence rank {}", rank));
          auto draw = [&](size_t i) { return i % 7 == 0 ? 0.0 : uniform(random); };
          const DrawnColumn first = drawn_column(builder, rank, pool, draw);
          const DrawnColumn second = drawn_column(builder, rank + 4, pool, draw);
          ASSERT_EQ(first.step.layers, 8);
          ASSERT_EQ(second.step.layers, 8);
          detail::TimelineShape::RunOptions options;
          options.by_template_op = true;
          std::vector<std::vector<double>> ends;
          const std::vector<RankTiming> run = detail::TimelineShape({ProgramView(first.step.program, first.flat),
                                                                     ProgramView(second.step.program, second.flat)},
                                                                    PairMode::Symmetric)
                                                  .run({first.seconds, second.seconds}, &ends, options);
          for (int K : {4, 5}) {
            ++columns;
            const std::unique_ptr<detail::LayerComposer> composer =
                detail::LayerComposer::prepare({&first.step, &second.step}, K);
            ASSERT_NE(composer, nullptr);
            const std::optional<std::vector<detail::ComposedColumn>> c =
                composer->compose({&first.seconds, &second.seconds});
            if (!c) continue;
            ++composed;
            SCOPED_TRACE(fmt::format("composed from {} layers", K));
            ASSERT_EQ(c->size(), 2u);
            for (size_t p = 0; p < 2; ++p)
              expect_like_the_run((*c)[p], FullRun{run[p], ends[p]});
            EXPECT_EQ(composer->copies(1), copies_of(second));
          }
        }
      },
      2);
  EXPECT_GT(columns, 100);
  EXPECT_GT(composed, columns * 3 / 4);
}

// What a column composed without unrolling every layer reads off its template: its bounds (the
// sums of lone_bounds, in the same order, and its forward's bound) and the copies of each template
// op, as the unrolled order of every layer gives them.
TEST(LayerComposition, BoundsAndCopiesWithoutUnrollingAreThoseOfEveryLayer) {
  const Topology topology = testing::switch_nodes(2, 4);
  std::mt19937_64 random(3);
  std::uniform_real_distribution<double> uniform(0.0, 1e-3);
  int columns = 0, forward_first = 0;
  for_each_plan(topology, [&](const Plan& plan) {
    const StepBuilder builder(plan);
    TokenSetPool pool;
    for (int rank : {0, 6}) {
      SCOPED_TRACE(fmt::format("rank {}", rank));
      const DrawnColumn column = drawn_column(builder, rank, pool, [&](size_t) { return uniform(random); });
      const auto& [step, flat, seconds] = column;
      const std::optional<detail::LoneBounds> expected = detail::lone_bounds(ProgramView(step.program, flat), seconds);
      ASSERT_TRUE(expected.has_value());
      const std::unique_ptr<detail::LayerComposer> composer = detail::LayerComposer::prepare(step, nullptr, 4);
      ASSERT_NE(composer, nullptr);
      const std::optional<detail::LoneBounds> bounds = composer->bounds(seconds);
      ASSERT_TRUE(bounds.has_value());
      EXPECT_EQ(bounds->end_s, expected->end_s);
      EXPECT_EQ(bounds->forward_end_s, expected->forward_end_s);
      EXPECT_EQ(bounds->compute_forward_s, expected->compute_forward_s);
      EXPECT_EQ(bounds->compute_backward_s, expected->compute_backward_s);
      EXPECT_EQ(composer->copies(), copies_of(column));
      forward_first += expected->forward_end_s < expected->end_s;
      ++columns;
    }
  });
  EXPECT_GT(columns, 100);
  EXPECT_GT(forward_first, columns / 2);
}

// Gradient synchronisation made to fall behind: the head's sync ops (the output layer's gradient
// buckets) last as long as about ten backward layers and the layers' own buckets a tenth of their
// compute, so the backward layers' buckets queue behind the head's until the eleventh or so, one
// after the other, then start when their layer's compute ends. Runs of 4, 5, 8 and 9 layers see
// only the queue, whose rate is not the layers': such columns are refused (a composition of the
// queue would end too late), and whatever is composed still ends like the run.
TEST(LayerComposition, ColumnsWhoseLayersSettleLaterThanTheRunsAreTimedWhole) {
  const Topology topology = testing::switch_nodes(2, 4);
  std::mt19937_64 random(5);
  std::uniform_real_distribution<double> uniform(1e-4, 1e-3);
  int slowed = 0, refused = 0;
  for_each_plan(topology, [&](const Plan& plan) {
    const StepBuilder builder(plan);
    TokenSetPool pool;
    const StepTemplate step = builder.build_template(0, pool);
    const FlatStep flat = unroll_flat(step);
    const StepSections& s = step.sections;
    const std::vector<Op>& ops = step.program.ops;
    std::vector<double> seconds;
    std::vector<uint32_t> head_sync;
    for (uint32_t i = 0; i < ops.size(); ++i) {
      const bool backward_layer = i >= s.gradient_in_end && i < s.backward_end;
      seconds.push_back(uniform(random) * (backward_layer && ops[i].stream == Stream::Sync ? 0.1 : 1.0));
      if (i >= s.forward_end && i < s.head_end && ops[i].stream == Stream::Sync) head_sync.push_back(i);
    }
    if (head_sync.empty()) return;
    // A backward layer's period and its buckets' time, without the head's buckets.
    for (uint32_t i : head_sync)
      seconds[i] = 0;
    const FullRun before = run_every_layer(step, flat, seconds);
    const size_t layer_ops = s.backward_end - s.gradient_in_end;
    const auto backward = size_t(
        std::find_if(flat.origin.begin(), flat.origin.end(), [&](uint32_t op) { return op >= s.gradient_in_end; }) -
        flat.origin.begin());
    const size_t sixth_end = backward + 6 * layer_ops - 1;  // the last op of the sixth backward layer
    const double period = before.ends[sixth_end + layer_ops] - before.ends[sixth_end];
    double sync_s = 0;
    for (uint32_t i = s.gradient_in_end; i < s.backward_end; ++i)
      sync_s += ops[i].stream == Stream::Sync ? seconds[i] : 0;
    if (!(period > 2 * sync_s)) return;
    for (uint32_t i : head_sync)
      seconds[i] = 11 * (period - sync_s) / double(head_sync.size());
    const std::optional<detail::LoneBounds> bounds = detail::lone_bounds(ProgramView(step.program, flat), seconds);
    ASSERT_TRUE(bounds.has_value());
    const FullRun run = run_every_layer(step, flat, seconds);
    ++slowed;
    const std::optional<detail::ComposedColumn> c = detail::compose_layers(step, flat, seconds, *bounds, 4);
    if (!c) {
      ++refused;
      return;
    }
    expect_like_the_run(*c, run);
  });
  EXPECT_GT(slowed, 20);
  EXPECT_GT(refused, slowed / 2);
}

// Columns served by another column's composer (LayerComposer::serves): composed to the bit as by
// a composer prepared for them, lone columns and two-stage pipeline columns alike; and a column
// whose template differs in what the runs read (a message's tag, an op's stream, a stage message's
// other end) is not served.
TEST(LayerComposition, ASharedComposerComposesTheColumnsItServesAsTheirOwn) {
  const Topology topology = testing::switch_nodes(2, 4);
  std::mt19937_64 random(23);
  std::uniform_real_distribution<double> uniform(0.0, 1e-3);
  auto draw = [&](size_t i) { return i % 5 == 0 ? 0.0 : uniform(random); };
  int served = 0, refused = 0, altered = 0, rerouted_columns = 0;
  for (int stages : {1, 2}) {
    const int per_stage = 8 / stages;
    for_each_plan(
        topology,
        [&](const Plan& plan) {
          const StepBuilder builder(plan);
          TokenSetPool pool;
          auto column_of = [&](int stage_rank) {
            std::vector<DrawnColumn> column;
            for (int stage = 0; stage < stages; ++stage)
              column.push_back(drawn_column(builder, stage_rank + stage * per_stage, pool, draw));
            return column;
          };
          auto pointers = [](const std::vector<DrawnColumn>& column) {
            std::vector<const StepTemplate*> steps;
            std::vector<const std::vector<double>*> seconds;
            for (const DrawnColumn& c : column) {
              steps.push_back(&c.step);
              seconds.push_back(&c.seconds);
            }
            return std::pair(steps, seconds);
          };
          auto prepare = [&](const std::vector<const StepTemplate*>& steps) {
            return detail::LayerComposer::prepare(steps, 4);
          };
          const std::vector<DrawnColumn> first = column_of(0);
          const std::unique_ptr<detail::LayerComposer> shared = prepare(pointers(first).first);
          ASSERT_NE(shared, nullptr);
          EXPECT_TRUE(shared->serves(pointers(first).first));
          for (int stage_rank = 1; stage_rank < per_stage; ++stage_rank) {
            SCOPED_TRACE(fmt::format("stage rank {}", stage_rank));
            const std::vector<DrawnColumn> column = column_of(stage_rank);
            const auto [steps, seconds] = pointers(column);
            if (!shared->serves(steps)) {
              ++refused;
              continue;
            }
            ++served;
            const std::unique_ptr<detail::LayerComposer> own = prepare(steps);
            ASSERT_NE(own, nullptr);
            const auto a = shared->compose(seconds), b = own->compose(seconds);
            ASSERT_EQ(a.has_value(), b.has_value());
            for (size_t p = 0; a && p < a->size(); ++p) {
              EXPECT_EQ((*a)[p].ends, (*b)[p].ends);
              EXPECT_EQ((*a)[p].timing.end_s, (*b)[p].timing.end_s);
              EXPECT_EQ((*a)[p].timing.forward_end_s, (*b)[p].timing.forward_end_s);
              EXPECT_EQ((*a)[p].timing.compute_backward_s, (*b)[p].timing.compute_backward_s);
              EXPECT_EQ(shared->copies(p), own->copies(p));
            }
            if (stages == 1) {
              EXPECT_EQ(shared->bounds(column[0].seconds)->end_s, own->bounds(column[0].seconds)->end_s);
            }
            // The same column with one message's tag, or one op's stream, changed is not served.
            std::vector<DrawnColumn> tagged = column, streamed = column;
            RankProgram& program = tagged.back().step.program;
            const auto message = std::find_if(program.ops.begin(), program.ops.end(), [](const Op& op) {
              return detail::is_message(op) && !is_stage_message(op);
            });
            if (message != program.ops.end()) {
              message->tag += 1000;
              EXPECT_FALSE(shared->serves(pointers(tagged).first));
              ++altered;
            }
            Op& last = streamed.back().step.program.ops.back();
            last.stream = last.stream == Stream::Compute ? Stream::Collective : Stream::Compute;
            EXPECT_FALSE(shared->serves(pointers(streamed).first));
            // Nor one whose stage message meets a program outside the column.
            std::vector<DrawnColumn> rerouted = column;
            std::vector<Op>& ops = rerouted.front().step.program.ops;
            const auto stage = std::find_if(ops.begin(), ops.end(), [](const Op& op) { return is_stage_message(op); });
            if (stage != ops.end()) {
              stage->peer = 1000;
              EXPECT_FALSE(shared->serves(pointers(rerouted).first));
              ++rerouted_columns;
            }
          }
        },
        stages);
  }
  EXPECT_GT(served, 100);
  EXPECT_GT(altered, 50);
  EXPECT_GT(rerouted_columns, 20);
  EXPECT_GT(refused, 0);  // a causal ring's ranks run different orders
}

// The options of a sample of 4 of the 8 ranks, compute slowed by communication or not.
CostOptions sampled_options(bool slowdown) {
  CostOptions o;
  o.max_timed_ranks = 4;
  o.comm_slowdown = slowdown;
  return o;
}

// The cost model prices a sample's steps alike, to the bit, whether its columns share composers
// (CostOptions::share_composers) or each prepares its own, compute slowed by communication or not.
TEST(LayerComposition, SampledStepsPriceAlikeWithComposersSharedOrNot) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  int plans = 0;
  for (const bool slowdown : {false, true})
    for (int stages : {1, 2}) {
      const CostOptions shared = sampled_options(slowdown);
      CostOptions own = shared;
      own.share_composers = false;
      const CostModel a_model(topology, Calibration::defaults(), shared),
          b_model(topology, Calibration::defaults(), own);
      for_each_plan(
          topology,
          [&](const Plan& plan) {
            const CostBreakdown a = a_model.evaluate_step(plan), b = b_model.evaluate_step(plan);
            EXPECT_EQ(a.step_ms, b.step_ms);
            EXPECT_EQ(a.forward_ms, b.forward_ms);
            EXPECT_EQ(a.parts.idle_ms, b.parts.idle_ms);
            EXPECT_EQ(a.parts.hidden_ms, b.parts.hidden_ms);
            EXPECT_EQ(a.parts.exposed_total_ms(), b.parts.exposed_total_ms());
            EXPECT_EQ(a.parts.slowdown_ms, b.parts.slowdown_ms);
            EXPECT_EQ(a.columns_composed, b.columns_composed);
            plans += a.columns_composed > 0;
          },
          stages);
    }
  EXPECT_GT(plans, 120);
}

// The synchronisation stream's bound (CostModel::step_sync_bounds_ms) of every sampled plan, lone
// columns and two-stage pipeline columns, ZeRO 0 to 3: never above the timed bound; under ZeRO 3
// never zero where the columns compose (the weight gathers run on that stream); and where compute
// is negligible and the gathers cross a 100 Gb/s NIC, most of the timed bound.
TEST(LayerComposition, SyncStreamBoundsStayBelowTheTimedBoundAndCarryZero3Steps) {
  int plans = 0, zero3 = 0, carried = 0;
  for (const bool fast_compute : {false, true}) {
    const Topology topology = testing::switch_nodes(2, 4, 450, fast_compute);
    // The bounds time compute at full speed.
    const CostModel model(topology, Calibration::defaults(), sampled_options(false));
    for (int stages : {1, 2})
      for_each_plan(
          topology,
          [&](const Plan& plan) {
            const double timed = model.step_lower_bound_ms(plan);
            const double sync = model.step_sync_bounds_ms({{&plan, BoundRank{}}}).front();
            EXPECT_LE(sync, timed);
            ++plans;
            // Columns whose layers cannot be composed get no bound (their copies would need every
            // layer unrolled): the pricing composes none of them either.
            if (plan.workload.zero_stage != 3 || model.evaluate_step(plan).columns_composed == 0) return;
            ++zero3;
            EXPECT_GT(sync, 0);
            carried += fast_compute && sync > 0.5 * timed;
          },
          stages);
  }
  EXPECT_GT(plans, 150);
  EXPECT_GT(carried, zero3 / 4);
}

// Within 1e-9 of the step: the parts are cut at op ends, each of them rounded its own way.
void expect_near(double composed, double every_layer, double step_ms, const char* what) {
  EXPECT_NEAR(composed, every_layer, 1e-9 * step_ms) << what;
}

// The same step priced two ways: the step and its parts, the slowdown beside communication
// included.
void expect_same_figures(const CostBreakdown& a, const CostBreakdown& b) {
  expect_near(a.step_ms, b.step_ms, b.step_ms, "step_ms");
  expect_near(a.forward_ms, b.forward_ms, b.step_ms, "forward_ms");
  expect_near(a.compute_ms, b.compute_ms, b.step_ms, "compute_ms");
  expect_near(a.exposed_comm_ms, b.exposed_comm_ms, b.step_ms, "exposed_comm_ms");
  expect_near(a.parts.compute_ms, b.parts.compute_ms, b.step_ms, "parts.compute_ms");
  expect_near(a.parts.imbalance_ms, b.parts.imbalance_ms, b.step_ms, "parts.imbalance_ms");
  expect_near(a.parts.idle_ms, b.parts.idle_ms, b.step_ms, "parts.idle_ms");
  expect_near(a.parts.hidden_ms, b.parts.hidden_ms, b.step_ms, "parts.hidden_ms");
  expect_near(a.parts.slowdown_ms, b.parts.slowdown_ms, b.step_ms, "parts.slowdown_ms");
  for (int t = 0; t < kNumCommTiers; ++t)
    expect_near(a.parts.exposed_ms[t], b.parts.exposed_ms[t], b.step_ms, "parts.exposed_ms");
}

// A step composed from a few layers (`a`) against the same timed every layer (`b`).
void expect_same_step(const CostBreakdown& a, const CostBreakdown& b) {
  expect_same_figures(a, b);
  EXPECT_EQ(b.columns_composed, 0);
}

// The cost model on a sample of 4 ranks composing its columns from a few layers (`fast`) and timing
// every layer (`reference`), compute slowed beside communication or at full speed.
struct ComposingAndEveryLayer {
  ComposingAndEveryLayer(const Topology& topology, bool slowdown)
      : fast(topology, Calibration::defaults(), options(slowdown, false)),
        reference(topology, Calibration::defaults(), options(slowdown, true)) {}
  static CostOptions options(bool slowdown, bool every_layer) {
    CostOptions o = sampled_options(slowdown);
    if (every_layer) o.composed_layers = 0;
    return o;
  }
  const CostModel fast, reference;
};

// The cost model on a sample of 4 of the 8 ranks (lone columns, or with 2 pipeline stages two
// pipeline columns of one micro-batch): the step, its parts and the timed bound composed equal
// those of timing every layer, and a bound that is the step there is the step composed, to the
// bit (the search prunes a candidate whose bound reaches the best step).
void expect_priced_and_bounded_as_every_layer(int stages) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  const ComposingAndEveryLayer models(topology, false);  // bounds that are the step: full speed
  const CostModel &fast = models.fast, &reference = models.reference;
  int plans = 0, bound_is_step = 0, composed = 0;
  for_each_plan(
      topology,
      [&](const Plan& plan) {
        const CostBreakdown a = fast.evaluate_step(plan), b = reference.evaluate_step(plan);
        expect_same_step(a, b);
        composed += a.columns_composed > 0;
        EXPECT_EQ(a.volume.p2p_forward, b.volume.p2p_forward);
        EXPECT_EQ(a.volume.collective_backward, b.volume.collective_backward);
        const double bound = fast.step_lower_bound_ms(plan), reference_bound = reference.step_lower_bound_ms(plan);
        expect_near(bound, reference_bound, b.step_ms, "step_lower_bound_ms");
        EXPECT_LE(bound, a.step_ms);
        if (reference_bound == b.step_ms) {
          ++bound_is_step;
          EXPECT_EQ(bound, a.step_ms);
        }
        ++plans;
      },
      stages);
  EXPECT_GT(plans, stages > 1 ? 30 : 40);
  EXPECT_GT(composed, plans * 3 / 4);
  EXPECT_GT(bound_is_step, plans / 4);
}

TEST(LayerComposition, SampledStepsPriceAndBoundAsTimingEveryLayer) {
  expect_priced_and_bounded_as_every_layer(1);
}

TEST(LayerComposition, SampledPipelineStepsPriceAndBoundAsTimingEveryLayer) {
  expect_priced_and_bounded_as_every_layer(2);
}

// Compute slowed by communication (the default): a sample's columns composed twice, at full
// speed and with their compute ops lengthened by what that puts beside their transfers, price the
// step, its parts and the slowdown as timing every layer twice does. `stages`: lone columns (1) or
// pipeline columns of one micro-batch (2).
void expect_slowed_priced_as_every_layer(int stages) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  ASSERT_TRUE(CostOptions{}.comm_slowdown);  // the default
  const ComposingAndEveryLayer models(topology, true);
  const CostModel &fast = models.fast, &reference = models.reference;
  int plans = 0, composed = 0, slowed = 0, bound_is_step = 0;
  for_each_plan(
      topology,
      [&](const Plan& plan) {
        const CostBreakdown a = fast.evaluate_step(plan), b = reference.evaluate_step(plan);
        expect_same_step(a, b);
        composed += a.columns_composed > 0;
        slowed += b.parts.slowdown_ms > 0;
        // The timed bound prices the busiest column as the step does, slowed alike: at most the
        // step, and the step to the bit when that column ends last.
        const double bound = fast.step_lower_bound_ms(plan);
        EXPECT_LE(bound, a.step_ms);
        expect_near(bound, reference.step_lower_bound_ms(plan), b.step_ms, "step_lower_bound_ms");
        bound_is_step += bound == a.step_ms && a.parts.slowdown_ms > 0;
        ++plans;
      },
      stages);
  EXPECT_GT(plans, stages > 1 ? 30 : 40);
  EXPECT_GT(composed, plans * 3 / 4);
  EXPECT_GT(slowed, plans / 2);
  EXPECT_GT(bound_is_step, plans / 4) << plans;
}

// A sample's lone columns left out on their bounds (CostOptions::leave_out_columns), slowed by
// communication or at full speed, and slowed also on their ends composed at full speed: the step,
// its parts and the busiest work equal those of timing every column, with fewer columns timed.
TEST(LayerComposition, ColumnsLeftOutOnTheirBoundsPriceAsTimingEveryColumn) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  int plans = 0;
  for (const bool slowdown : {false, true}) {
    const CostOptions leaving = sampled_options(slowdown);
    CostOptions timing = leaving;
    timing.leave_out_columns = false;
    const CostModel a_model(topology, Calibration::defaults(), leaving),
        b_model(topology, Calibration::defaults(), timing);
    int left = 0;
    for_each_plan(topology, [&](const Plan& plan) {
      const CostBreakdown a = a_model.evaluate_step(plan), b = b_model.evaluate_step(plan);
      EXPECT_EQ(a.step_ms, b.step_ms);  // a column left out is never the critical one
      EXPECT_EQ(a.forward_ms, b.forward_ms);
      expect_same_figures(a, b);
      EXPECT_LE(a.programs_timed, b.programs_timed);
      left += a.programs_timed < b.programs_timed;
      ++plans;
    });
    // Slowed, a column composed at full speed is also left out on its composed ends (a far tighter
    // bound than its serial sums): 18 plans time fewer columns here, 6 on the bounds alone.
    EXPECT_GT(left, slowdown ? 12 : 5) << "slowdown " << slowdown;
  }
  EXPECT_GT(plans, 80);
}

TEST(LayerComposition, SlowedSampledStepsPriceAsTimingEveryLayer) {
  expect_slowed_priced_as_every_layer(1);
}

TEST(LayerComposition, SlowedSampledPipelineStepsPriceAsTimingEveryLayer) {
  expect_slowed_priced_as_every_layer(2);
}

}  // namespace
}  // namespace wallfacer
