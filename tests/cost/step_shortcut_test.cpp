// The whole step's shortcuts against the full computation: pricing each step-template op once for
// all its unrolled copies (and reading volumes and transfer counts off the templates) gives every
// plan (each strategy, tensor and pipeline parallel ones, several micro-batches, ZeRO 3 with full
// recomputation) the same times, parts and volumes as pricing every unrolled op on its own, which
// is also timed without folding the chains of gradient and parameter buckets (timeline_fold.hpp);
// and the timed lower bound the search prunes on never exceeds the step.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/schedule_hash.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "cost_test_util.hpp"
#include "lent_threads.hpp"

namespace wallfacer {
namespace {

void expect_same(double shortcut, double full, const char* what) {
  EXPECT_NEAR(shortcut, full, 1e-9 * std::max(1e-12, std::abs(full))) << what;
}

// A part of the step, within 1e-9 of the step: the parts are cut at op ends, which a sample's
// columns composed from a few layers (CostOptions::composed_layers) round their own way.
void expect_same_part(double shortcut, double full, double step_ms, const char* what) {
  EXPECT_NEAR(shortcut, full, 1e-9 * std::max(1e-12, std::abs(step_ms))) << what;
}

void expect_same_cost(const CostBreakdown& a, const CostBreakdown& b) {
  expect_same(a.step_ms, b.step_ms, "step_ms");
  expect_same(a.forward_ms, b.forward_ms, "forward_ms");
  expect_same(a.attention_ms, b.attention_ms, "attention_ms");
  expect_same(a.compute_ms, b.compute_ms, "compute_ms");
  expect_same(a.exposed_comm_ms, b.exposed_comm_ms, "exposed_comm_ms");
  expect_same(a.mfu, b.mfu, "mfu");
  expect_same_part(a.parts.compute_ms, b.parts.compute_ms, b.step_ms, "parts.compute_ms");
  expect_same_part(a.parts.imbalance_ms, b.parts.imbalance_ms, b.step_ms, "parts.imbalance_ms");
  expect_same_part(a.parts.idle_ms, b.parts.idle_ms, b.step_ms, "parts.idle_ms");
  expect_same_part(a.parts.hidden_ms, b.parts.hidden_ms, b.step_ms, "parts.hidden_ms");
  for (int t = 0; t < kNumCommTiers; ++t) {
    expect_same_part(a.parts.exposed_ms[t], b.parts.exposed_ms[t], b.step_ms, "parts.exposed_ms");
    expect_same(a.parts.transfers_per_layer[t], b.parts.transfers_per_layer[t], "parts.transfers_per_layer");
  }
  EXPECT_EQ(a.volume.p2p_backward, b.volume.p2p_backward);
  EXPECT_EQ(a.volume.collective_forward, b.volume.collective_forward);
  expect_same(a.memory.total_GiB, b.memory.total_GiB, "memory");
}

struct Setting {
  int tensor, pipeline, microbatches, zero;
  Checkpointing checkpointing;
};

// A small GQA model of `layers` layers at 4K tokens, `batch` sequences in as many micro-batches.
Workload small_step_workload(int layers, int batch) {
  Workload w = testing::mha_workload(4096, 8, 64, /*causal=*/true, batch);
  w.layers = layers;
  w.kv_heads = 4;
  w.ffn = 1536;
  w.vocab = 4096;
  w.microbatches = batch;
  return w;
}

// Every feasible step plan of 8 GPUs on two 4-GPU nodes under each setting: each strategy, tensor
// and pipeline parallel, several micro-batches, ZeRO 0 to 3, every checkpointing mode.
template <typename Visit>
void for_each_step_plan(const Topology& topology, Visit&& visit) {
  for (const Setting& s : {Setting{1, 1, 1, 1, Checkpointing::Selective}, Setting{2, 1, 2, 3, Checkpointing::Full},
                           Setting{1, 2, 4, 1, Checkpointing::None}, Setting{2, 2, 2, 0, Checkpointing::Selective}}) {
    Workload w = small_step_workload(6, s.microbatches);
    w.zero_stage = s.zero;
    w.checkpointing = s.checkpointing;
    w.grad_bucket_MiB = 1;  // several buckets a layer: chains of collectives the timeline folds
    Workload slice = w;
    slice.heads /= s.tensor;
    slice.kv_heads /= s.tensor;
    slice.hidden = int64_t(slice.heads) * slice.head_dim;
    for (StrategyKind kind : all_strategies())
      for (StrategyParams params : enumerate_params(kind, slice, 8 / (s.tensor * s.pipeline))) {
        params.tensor_parallel = s.tensor;
        params.pipeline_parallel = s.pipeline;
        if (!check_feasible(kind, params, w, 8).ok) continue;
        Plan plan = make_plan(kind, params, w, topology, 8);
        plan.scope = Scope::Step;
        SCOPED_TRACE(fmt::format("{} T={} P={} M={}", to_string(kind), s.tensor, s.pipeline, s.microbatches));
        visit(plan, s);
      }
  }
}

// With every rank timed, and with a sample of 4 ranks, whose programs (pipeline columns with
// pipeline parallelism) meet only each other and are timed group by group, keeping their unrolled
// orders for the groups after them or not. At full speed: compute slowed by communication
// lengthens a template op by the mean over its copies (detail::lengthened), an op priced on its
// own by its own.
TEST(StepShortcuts, TemplateDurationsEqualPricingEveryUnrolledOp) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  for (int sample : {0, 4}) {
    SCOPED_TRACE(sample ? "a sample of 4 ranks" : "every rank");
    CostOptions fast_options, reference_options;
    fast_options.comm_slowdown = reference_options.comm_slowdown = false;
    fast_options.max_timed_ranks = reference_options.max_timed_ranks = sample;
    reference_options.step_shortcuts = false;
    // Unrolled orders kept for later groups, and none kept (each unrolled for its group alone).
    CostOptions unkept_options = fast_options;
    unkept_options.kept_unrolled_order_bytes = 0;
    const CostModel fast(topology, Calibration::defaults(), fast_options);
    const CostModel unkept(topology, Calibration::defaults(), unkept_options);
    const CostModel reference(topology, Calibration::defaults(), reference_options);
    int checked = 0, tensor = 0, pipelined = 0;
    for_each_step_plan(topology, [&](const Plan& plan, const Setting& s) {
      const CostBreakdown expected = reference.evaluate_step(plan);
      expect_same_cost(fast.evaluate_step(plan), expected);
      expect_same_cost(unkept.evaluate_step(plan), expected);
      ++checked;
      tensor += s.tensor > 1 ? 1 : 0;
      pipelined += s.pipeline > 1 ? 1 : 0;
    });
    EXPECT_GT(checked, 20);
    EXPECT_GT(tensor, 4);
    EXPECT_GT(pipelined, 4);
  }
}

// The fingerprint a whole step's pricing leaves is the hash of the timed ranks' attention programs
// that the merge of equal schedules would otherwise build (planner/search/explain.cpp): the same
// value, so the merge decides alike either way.
TEST(StepShortcuts, FingerprintIsTheHashOfTheTimedAttentionPrograms) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  CostOptions options;
  options.max_timed_ranks = 4;
  const CostModel model(topology, Calibration::defaults(), options);
  std::set<uint64_t> seen;
  int plans = 0;
  for_each_step_plan(topology, [&](const Plan& plan, const Setting&) {
    Plan attention = plan;
    attention.scope = Scope::Attention;
    Schedule timed;
    model.build_timed(attention, timed);
    const uint64_t fingerprint = model.evaluate_step(plan).attention_fingerprint;
    EXPECT_EQ(fingerprint, schedule_hash(attention, timed));
    seen.insert(fingerprint);
    ++plans;
  });
  EXPECT_GT(plans, 20);
  EXPECT_GT(seen.size(), 10u);  // not one constant
}

// With every rank timed, ranks that run alike are timed once per class (timeline_classes.hpp):
// every plan gets the very times and parts it gets with every rank timed on its own, and most
// plans of this cluster time fewer programs than ranks (one node's ranks mirror the other's).
TEST(StepShortcuts, RankClassesTimeLikeEveryRank) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  CostOptions every_rank;
  every_rank.time_rank_classes = false;
  const CostModel by_class(topology, Calibration::defaults(), CostOptions{});
  const CostModel reference(topology, Calibration::defaults(), every_rank);
  int plans = 0, fewer = 0;
  for_each_step_plan(topology, [&](const Plan& plan, const Setting&) {
    const CostBreakdown a = by_class.evaluate_step(plan), b = reference.evaluate_step(plan);
    EXPECT_EQ(a.step_ms, b.step_ms);
    EXPECT_EQ(a.forward_ms, b.forward_ms);
    EXPECT_EQ(a.compute_ms, b.compute_ms);
    EXPECT_EQ(a.parts.hidden_ms, b.parts.hidden_ms);
    EXPECT_EQ(a.parts.idle_ms, b.parts.idle_ms);
    EXPECT_EQ(a.parts.imbalance_ms, b.parts.imbalance_ms);
    for (int t = 0; t < kNumCommTiers; ++t)
      EXPECT_EQ(a.parts.exposed_ms[t], b.parts.exposed_ms[t]);
    EXPECT_EQ(b.programs_timed, plan.num_ranks());
    EXPECT_LE(a.programs_timed, plan.num_ranks());
    fewer += a.programs_timed < plan.num_ranks() ? 1 : 0;
    ++plans;
  });
  EXPECT_GT(plans, 20);
  EXPECT_GT(fewer, plans / 2);
}

// The compute bound can also report the step memory, reusing the attention programs it then
// builds for its templates (one micro-batch of one virtual stage): the bound and its busiest rank
// are those it finds without, and the memory is evaluate_step's, with every rank timed and with a
// sample of 4 ranks.
TEST(StepShortcuts, ComputeBoundWithMemoryEqualsBoundAndStepMemory) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  for (int sample : {0, 4}) {
    CostOptions options;
    options.max_timed_ranks = sample;
    const CostModel model(topology, Calibration::defaults(), options);
    int plans = 0;
    for_each_step_plan(topology, [&](const Plan& plan, const Setting&) {
      BoundRank alone, with_memory;
      MemoryEstimate memory;
      const double bound = model.step_compute_bound_ms(plan, &alone);
      EXPECT_EQ(model.step_compute_bound_ms(plan, &with_memory, &memory), bound);
      EXPECT_EQ(with_memory.rank, alone.rank);
      EXPECT_EQ(with_memory.sampled, alone.sampled);
      EXPECT_EQ(memory.total_GiB, model.evaluate_step(plan).memory.total_GiB);
      ++plans;
    });
    EXPECT_GT(plans, 20);
  }
}

// Ranks of one sequence rank in their data-parallel replica, tensor slice and pipeline stage build
// one program for the compute bound and the step memory: the bound, its busiest rank and every
// part of the memory are those of building every timed rank, bit for bit, with every rank timed,
// with a sample of 4 ranks and with an op budget that stops the walk over the ranks early (the
// compute-only programs count the full programs' ops), with the memory asked for (the templates
// then take over the attention programs) and without; and plans with data, tensor or pipeline
// parallelism build fewer attention programs than the ranks they time.
TEST(StepShortcuts, ProgramsPerSequenceRankGiveTheSameBoundAndMemory) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  for (const auto& [sample, budget] : {std::pair{0, int64_t(0)}, {4, int64_t(0)}, {0, int64_t(120)}}) {
    SCOPED_TRACE(fmt::format("sample {}, op budget {}", sample, budget));
    CostOptions options;
    options.max_timed_ranks = sample;
    if (budget > 0) options.max_timed_ops = budget;
    CostOptions every = options;
    every.build_per_sequence_rank = false;
    const CostModel model(topology, Calibration::defaults(), options);
    const CostModel reference(topology, Calibration::defaults(), every);
    int fewer = 0;
    for_each_step_plan(topology, [&](const Plan& plan, const Setting&) {
      BoundRank busiest, expected_busiest;
      MemoryEstimate memory, expected;
      EXPECT_EQ(model.step_compute_bound_ms(plan, &busiest, &memory),
                reference.step_compute_bound_ms(plan, &expected_busiest, &expected));
      EXPECT_EQ(busiest.rank, expected_busiest.rank);
      EXPECT_EQ(busiest.sampled, expected_busiest.sampled);
      EXPECT_EQ(memory.model_state_GiB, expected.model_state_GiB);
      EXPECT_EQ(memory.activations_GiB, expected.activations_GiB);
      EXPECT_EQ(memory.attention_GiB, expected.attention_GiB);
      EXPECT_EQ(memory.working_GiB, expected.working_GiB);
      EXPECT_EQ(memory.total_GiB, expected.total_GiB);
      EXPECT_EQ(model.step_compute_bound_ms(plan), reference.step_compute_bound_ms(plan));
      const size_t built = model.memory_programs(plan).ranks.size();
      EXPECT_LE(built, reference.memory_programs(plan).ranks.size());
      fewer += built < reference.memory_programs(plan).ranks.size();
    });
    EXPECT_GT(fewer, 10);
  }
}

// Pipeline stages between the first and the last build step templates of the same compute, so the
// compute bound builds one for all of them: with 4 and 8 stages of 8 GPUs (every rank timed, one
// and two virtual stages), each strategy's bound and busiest rank are those of building every
// timed rank's template.
TEST(StepShortcuts, MiddleStagesGiveTheBoundOfEveryStage) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  const Workload w = small_step_workload(16, 8);
  CostOptions every;
  every.build_per_sequence_rank = false;
  const CostModel model(topology, Calibration::defaults());
  const CostModel reference(topology, Calibration::defaults(), every);
  int plans = 0;
  for (int stages : {4, 8})
    for (int virtual_stages : {1, 2})
      for (StrategyKind kind : all_strategies())
        for (StrategyParams params : enumerate_params(kind, w, 8 / stages)) {
          params.pipeline_parallel = stages;
          params.virtual_stages = virtual_stages;
          if (!check_feasible(kind, params, w, 8).ok) continue;
          Plan plan = make_plan(kind, params, w, topology, 8);
          plan.scope = Scope::Step;
          SCOPED_TRACE(
              fmt::format("{} {} P={} V={}", to_string(kind), params.sequence_parallel, stages, virtual_stages));
          BoundRank busiest, expected_busiest;
          EXPECT_EQ(model.step_compute_bound_ms(plan, &busiest),
                    reference.step_compute_bound_ms(plan, &expected_busiest));
          EXPECT_EQ(busiest.rank, expected_busiest.rank);
          EXPECT_EQ(busiest.sampled, expected_busiest.sampled);
          ++plans;
        }
  EXPECT_GT(plans, 10);
}

// A model remembers the attention footprint of each plan whose memory it was asked for, and finds
// it again for the same plan under another ZeRO stage or checkpointing mode (as a search under
// other memory settings asks), never for another dtype: every plan under every ZeRO stage and
// checkpointing mode, in bf16 and fp32, asked of one model in turn, has the memory and the bound a
// model asked for that plan alone gives.
TEST(StepShortcuts, RememberedFootprintsGiveTheMemoryOfEachPlanAlone) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  const CostModel shared(topology, Calibration::defaults());
  int plans = 0;
  for_each_step_plan(topology, [&](const Plan& plan, const Setting&) {
    for (DType dtype : {DType::BF16, DType::FP32})
      for (int zero = 0; zero <= 3; ++zero)
        for (Checkpointing mode : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full}) {
          Plan p = plan;
          p.workload.dtype = dtype;
          p.workload.zero_stage = zero;
          p.workload.checkpointing = mode;
          const CostModel alone(topology, Calibration::defaults());
          MemoryEstimate remembered, expected;
          EXPECT_EQ(shared.step_compute_bound_ms(p, nullptr, &remembered),
                    alone.step_compute_bound_ms(p, nullptr, &expected));
          EXPECT_EQ(remembered.total_GiB, expected.total_GiB);
          EXPECT_EQ(remembered.activations_GiB, expected.activations_GiB);
          EXPECT_EQ(remembered.attention_GiB, expected.attention_GiB);
          EXPECT_EQ(remembered.working_GiB, expected.working_GiB);
        }
    ++plans;
  });
  EXPECT_GT(plans, 20);
}

// Plans that differ only in their placement share a StepBoundMemo: every step plan, each of its
// placements in turn on one memo (which forgets a plan when handed another), with every rank timed
// and with a sample of 4 ranks (which ranks are sampled depends on the placement), has the bound,
// the busiest rank and the memory of a model asked for that plan alone; a second placement builds
// fewer attention programs for its memory than the first.
TEST(StepShortcuts, PlacementsSharingAMemoGiveTheBoundAndMemoryOfEachAlone) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  for (int sample : {0, 4}) {
    SCOPED_TRACE(fmt::format("sample {}", sample));
    CostOptions options;
    options.max_timed_ranks = sample;
    StepBoundMemo memo;
    std::optional<StrategyParams> last;  // the last plan's params, placement left out
    int placements = 0, fewer = 0;
    for_each_step_plan(topology, [&](const Plan& plan, const Setting&) {
      const CostModel shared(topology, Calibration::defaults(), options);
      const CostModel alone(topology, Calibration::defaults(), options);
      BoundRank busiest, expected_busiest;
      MemoryEstimate memory, expected;
      Schedule built;
      const bool again = last == without_placement(plan.params);
      if (again) {  // the memo knows the other placement: see what the memory builds
        shared.memory_footprint(plan, &built, &memo);
        fewer += built.ranks.size() < alone.memory_programs(plan).ranks.size();
        ++placements;
      }
      const CostModel fresh(topology, Calibration::defaults(), options);  // no footprint remembered
      EXPECT_EQ(fresh.step_compute_bound_ms(plan, &busiest, &memory, 1e9, &memo),
                alone.step_compute_bound_ms(plan, &expected_busiest, &expected));
      EXPECT_EQ(busiest.rank, expected_busiest.rank);
      EXPECT_EQ(busiest.sampled, expected_busiest.sampled);
      EXPECT_EQ(memory.attention_GiB, expected.attention_GiB);
      EXPECT_EQ(memory.working_GiB, expected.working_GiB);
      EXPECT_EQ(memory.total_GiB, expected.total_GiB);
      last = without_placement(plan.params);
    });
    EXPECT_GT(placements, 10);
    EXPECT_GT(fewer, 5);
  }
}

// Placements of one plan taken together share the busiest column's templates, orders and
// timeline, and each gets the timed bound it gets alone (its ops priced on its own GPUs): every
// step plan's placements, with every rank timed and with a sample of 4 ranks.
TEST(StepShortcuts, PlacementsBoundTogetherGiveTheTimedBoundOfEachAlone) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  for (int sample : {0, 4}) {
    SCOPED_TRACE(fmt::format("sample {}", sample));
    CostOptions options;
    options.max_timed_ranks = sample;
    const CostModel model(topology, Calibration::defaults(), options);
    std::vector<std::vector<Plan>> alike;  // plans equal but for their placement, in a row
    for_each_step_plan(topology, [&](const Plan& plan, const Setting&) {
      if (alike.empty() || without_placement(alike.back().front().params) != without_placement(plan.params))
        alike.emplace_back();
      alike.back().push_back(plan);
    });
    int shared = 0, differing = 0;
    for (const std::vector<Plan>& plans : alike) {
      if (plans.size() < 2) continue;
      std::vector<CostModel::BoundedPlan> together;
      std::vector<double> alone;
      for (const Plan& plan : plans) {
        BoundRank busiest;
        model.step_compute_bound_ms(plan, &busiest);
        together.emplace_back(&plan, busiest);
        alone.push_back(CostModel(topology, Calibration::defaults(), options).step_lower_bound_ms(plan, busiest));
      }
      EXPECT_EQ(model.step_lower_bounds_ms(together), alone) << to_string(plans.front().strategy);
      shared += together[1].second.rank == together[0].second.rank;
      differing += alone[1] != alone[0];
    }
    EXPECT_GT(shared, 5);
    EXPECT_GT(differing, 0);
  }
}

// The search prunes whole-step candidates on step_lower_bound_ms: it never exceeds the step, with
// every rank timed (messages paired with their real other ends, collectives meeting) and with a
// sample of 4 ranks (symmetric partners), and it is at least the compute of the rank it times. On
// a sample the busiest rank's column is timed as the step times it: never below its bound with
// only the stage messages paired, and the step itself where that column ends last.
TEST(StepShortcuts, TimedLowerBoundNeverExceedsTheStep) {
  const Topology topology = testing::switch_nodes(2, 4, 450);
  // At full speed, where the bound often is the step itself (compute slowed by communication
  // lengthens the step past it: StepSearch.BoundsNeverPruneTheBestStepWithComputeSlowedByCommunication).
  CostOptions every_rank, sampled_options;
  every_rank.comm_slowdown = sampled_options.comm_slowdown = false;
  sampled_options.max_timed_ranks = 4;
  int checked = 0, sampled = 0, exact = 0;
  for (const CostOptions& options : {every_rank, sampled_options}) {
    const CostModel model(topology, Calibration::defaults(), options);
    for_each_step_plan(topology, [&](const Plan& plan, const Setting&) {
      const double bound = model.step_lower_bound_ms(plan);
      const CostBreakdown step = model.evaluate_step(plan);
      EXPECT_LE(bound, step.step_ms * (1 + 1e-12));
      EXPECT_GT(bound, 0.5 * step.parts.compute_ms);
      BoundRank busiest;
      model.step_compute_bound_ms(plan, &busiest);
      EXPECT_EQ(busiest.sampled, int(model.timed_ranks(plan).size()) < plan.num_ranks());
      if (busiest.sampled) {
        ++sampled;
        // Up to rounding: the sample's column may be composed from a few layers.
        EXPECT_GE(bound * (1 + 1e-12), model.step_lower_bound_ms(plan, {busiest.rank, false}));
        exact += bound == step.step_ms;
      }
      ++checked;
    });
  }
  EXPECT_GT(checked, 40);
  EXPECT_GT(sampled, 20);
  EXPECT_GT(exact, sampled / 4);
}

// A contiguous causal ring of 16 ranks over 128K tokens, sampled at 8 ranks: the later a rank's
// tokens, the more attention it computes, so its sampled columns end far apart.
Plan uneven_sampled_ring(const Topology& topology) {
  Workload w = small_step_workload(4, 1);
  w.seq = 131072;
  Plan plan = make_plan(StrategyKind::Ring, enumerate_params(StrategyKind::Ring, w, 16).front(), w, topology, 16);
  plan.scope = Scope::Step;
  return plan;
}

// A sample's columns that cannot end last nor end their forward last (detail::lone_bounds) are not
// timed; the step, its parts and volumes are those of pricing every unrolled op.
TEST(StepShortcuts, SampledColumnsThatCannotEndLastAreNotTimed) {
  const Topology topology = testing::switch_nodes(2, 8, 450);
  CostOptions fast_options, reference_options;
  fast_options.max_timed_ranks = reference_options.max_timed_ranks = 8;
  fast_options.comm_slowdown = reference_options.comm_slowdown = false;  // slowed columns are all timed
  reference_options.step_shortcuts = false;
  const Plan plan = uneven_sampled_ring(topology);
  ASSERT_EQ(plan.params.sequence_parallel, 16);
  const CostBreakdown fast = CostModel(topology, Calibration::defaults(), fast_options).evaluate_step(plan);
  const CostBreakdown expected = CostModel(topology, Calibration::defaults(), reference_options).evaluate_step(plan);
  expect_same_cost(fast, expected);
  fast_options.kept_unrolled_order_bytes = 0;
  expect_same_cost(CostModel(topology, Calibration::defaults(), fast_options).evaluate_step(plan), expected);
  ASSERT_EQ(fast.latest_ends_ms.size(), 8u);
  EXPECT_LT(fast.programs_timed, 8);
  EXPECT_GT(fast.programs_timed, 0);
}

// Stopped above a step, a pricing has timed the first columns of the whole pricing, in the same
// order, up to the first whose latest end passes the stop; a stop it never passes before the last
// column changes nothing. With compute slowed by communication, a column that passes the stop at
// full speed (it only ends later slowed) stops the pricing without its slowed timing: its latest
// end is then the whole pricing's at full speed.
TEST(StepShortcuts, StoppedPricingsTimeTheFirstColumnsOfTheWholeOne) {
  const Topology topology = testing::switch_nodes(2, 8, 450);
  CostOptions options;
  options.max_timed_ranks = 8;
  ASSERT_TRUE(options.comm_slowdown);
  const CostModel model(topology, Calibration::defaults(), options);
  const Plan plan = uneven_sampled_ring(topology);
  const CostBreakdown whole = model.evaluate_step(plan);
  const std::vector<double>& ends = whole.latest_ends_ms;
  const std::vector<double>& full_speed = whole.latest_full_speed_ends_ms;
  ASSERT_EQ(ends.size(), 8u);
  ASSERT_EQ(full_speed.size(), ends.size());
  EXPECT_FALSE(whole.stopped);
  EXPECT_TRUE(std::is_sorted(ends.begin(), ends.end()));
  EXPECT_EQ(ends.back(), whole.step_ms);
  std::vector<double> stops = {0.5 * ends.front(), ends.front(), 0.5 * (ends.front() + ends.back())};
  for (size_t k = 0; k < ends.size(); ++k) {
    EXPECT_LE(full_speed[k], ends[k]);
    // Between a column's latest end at full speed and slowed, where no earlier one passes it.
    if (full_speed[k] < ends[k] && (k == 0 || ends[k - 1] < full_speed[k]))
      stops.push_back(0.5 * (std::max(full_speed[k], k == 0 ? 0.0 : ends[k - 1]) + ends[k]));
  }
  int at_full_speed = 0, slowed = 0;
  for (const double stop : stops) {
    const CostBreakdown stopped = model.evaluate_step(plan, [stop] { return stop; });
    const size_t first_past = size_t(std::upper_bound(ends.begin(), ends.end(), stop) - ends.begin());
    SCOPED_TRACE(fmt::format("stop {} ms, first past it {}", stop, first_past));
    if (first_past + 1 >= ends.size()) {
      EXPECT_FALSE(stopped.stopped);
      expect_same_cost(stopped, whole);
      continue;
    }
    EXPECT_TRUE(stopped.stopped);
    const bool passed_at_full_speed = full_speed[first_past] > stop;
    EXPECT_EQ(stopped.stopped_at_full_speed, passed_at_full_speed);
    (passed_at_full_speed ? at_full_speed : slowed) += 1;
    std::vector<double> expected(ends.begin(), ends.begin() + std::ptrdiff_t(first_past) + 1);
    if (passed_at_full_speed) expected.back() = full_speed[first_past];
    EXPECT_EQ(stopped.latest_ends_ms, expected);
    EXPECT_EQ(stopped.latest_full_speed_ends_ms,
              std::vector<double>(full_speed.begin(), full_speed.begin() + std::ptrdiff_t(first_past) + 1));
    EXPECT_EQ(stopped.step_ms, expected.back());
  }
  EXPECT_GT(at_full_speed, 0);
  EXPECT_GT(slowed, 0);
  const CostBreakdown unstopped = model.evaluate_step(plan, [&] { return whole.step_ms; });
  EXPECT_FALSE(unstopped.stopped);
  expect_same_cost(unstopped, whole);
}

// A sample's columns timed side by side on lent threads give what timing them one after another
// gives: the step, its parts, the latest ends, the columns timed and the stops. A loan that runs
// before the pricing goes on times the next columns with what was known then, some of which are
// left out at their turn.
TEST(StepShortcuts, ColumnsTimedOnLentThreadsGiveTheSamePricing) {
  const Topology topology = testing::switch_nodes(2, 8, 450);
  for (const size_t kept_bytes : {size_t(64) << 20, size_t(0)}) {
    CostOptions options;
    options.max_timed_ranks = 8;
    options.kept_unrolled_order_bytes = kept_bytes;
    const CostModel model(topology, Calibration::defaults(), options);
    const Plan plan = uneven_sampled_ring(topology);
    const CostBreakdown alone = model.evaluate_step(plan);
    // The column with the most work ends last here: a stop below it stops after it, while lent
    // threads may be timing the next ones.
    const double stop = 0.5 * alone.latest_ends_ms.front();
    const CostBreakdown stopped_alone = model.evaluate_step(plan, [stop] { return stop; });
    ASSERT_TRUE(stopped_alone.stopped);
    auto expect_as_alone = [&](const ThreadLender& lend) {
      const CostBreakdown helped = model.evaluate_step(plan, {}, lend);
      expect_same_cost(helped, alone);
      EXPECT_EQ(helped.latest_ends_ms, alone.latest_ends_ms);
      EXPECT_EQ(helped.programs_timed, alone.programs_timed);
      const CostBreakdown stopped = model.evaluate_step(
          plan, [stop] { return stop; }, lend);
      EXPECT_TRUE(stopped.stopped);
      EXPECT_EQ(stopped.stopped_at_full_speed, stopped_alone.stopped_at_full_speed);
      EXPECT_EQ(stopped.latest_ends_ms, stopped_alone.latest_ends_ms);
      EXPECT_EQ(stopped.latest_full_speed_ends_ms, stopped_alone.latest_full_speed_ends_ms);
      EXPECT_EQ(stopped.programs_timed, stopped_alone.programs_timed);
    };
    for (const int threads : {1, 3}) {
      SCOPED_TRACE(fmt::format("{} threads, {} bytes of kept orders", threads, kept_bytes));
      testing::ThreadsToLend lent(threads);
      expect_as_alone(lent.lender());
      EXPECT_GT(lent.loans(), 0);
    }
    int loans = 0;
    expect_as_alone([&loans](std::function<void()> work) {
      ++loans;
      return testing::lend_and_wait(std::move(work));
    });
    EXPECT_GT(loans, 0);
  }
}

}  // namespace
}  // namespace wallfacer
