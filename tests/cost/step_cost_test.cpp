// The whole-step cost: evaluate_step times the fully unrolled step of its timed ranks, for every
// strategy; throughput and MFU follow their definitions; depth adds time.
#include <gtest/gtest.h>

#include <wallfacer/cost/compute_time.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "cost_test_util.hpp"

namespace wallfacer {
namespace {

Workload step_workload(int layers) {
  Workload w = testing::mha_workload(2048, 8, 64, /*causal=*/true);
  w.layers = layers;
  w.kv_heads = 4;
  w.ffn = 1536;
  w.vocab = 4096;
  w.batch = 2;
  return w;
}

// At full speed: with compute slowed by communication a step template's op is lengthened by the
// mean over its copies (detail::lengthened), an op of the full unroll by its own.
TEST(StepCost, EqualsTheFullUnrollForEveryStrategy) {
  const Topology topology = testing::switch_nodes(2, 4);
  const Workload w = step_workload(7);
  CostOptions full_speed;
  full_speed.comm_slowdown = false;
  const CostModel model(topology, Calibration::defaults(), full_speed);
  int checked = 0;
  for (StrategyKind kind : all_strategies()) {
    for (const StrategyParams& params : enumerate_params(kind, w, 8)) {
      if (!check_feasible(kind, params, w, 8).ok) continue;
      Plan plan = make_plan(kind, params, w, topology, 8);
      plan.scope = Scope::Step;
      const CostBreakdown step = model.evaluate_step(plan);
      // Every rank, every layer.
      const Schedule full = StepBuilder(plan).build();
      const CostBreakdown times = model.evaluate_times(plan, full);
      SCOPED_TRACE(std::string(to_string(kind)) + " " + plan.groups.front().name);
      EXPECT_EQ(step.layers_timed, w.layers);
      EXPECT_NEAR(step.step_ms, times.step_ms, 1e-6 * times.step_ms);
      EXPECT_NEAR(step.forward_ms, times.forward_ms, 1e-6 * times.step_ms);
      const CommVolume v = comm_volume(full);
      EXPECT_EQ(step.volume.p2p_backward, v.p2p_backward);
      EXPECT_EQ(step.volume.collective_backward, v.collective_backward);
      EXPECT_NEAR(step.tokens_per_s, double(w.seq) * w.batch / (step.step_ms * 1e-3), 1e-9 * step.tokens_per_s);
      const double peak = kernel_peak_tflops(topology.gpu(), w.dtype) * 1e12;
      EXPECT_NEAR(step.mfu, step_model_flops(w) / (step.step_ms * 1e-3 * 8 * peak), 1e-12);
      EXPECT_GT(step.step_ms, step.attention_ms);  // the rest of the layer costs something
      ++checked;
    }
  }
  EXPECT_GT(checked, 8);
}

// Deeper models take longer.
TEST(StepCost, StepGrowsWithLayers) {
  const Topology topology = testing::switch_nodes(1, 8);
  const CostModel model(topology, Calibration::defaults());
  std::vector<double> steps;
  for (int layers : {8, 9, 10}) {
    Workload w = step_workload(layers);
    Plan plan = make_plan(StrategyKind::Ulysses, {.sequence_parallel = 8, .data_parallel = 1}, w, topology, 8);
    plan.scope = Scope::Step;
    steps.push_back(model.evaluate_step(plan).step_ms);
  }
  EXPECT_GT(steps[1], steps[0]);
  EXPECT_GT(steps[2], steps[1]);
}

}  // namespace
}  // namespace wallfacer

namespace wallfacer {
namespace {

// A GEMM lasts its FLOPs over the calibrated share of the peak, in bf16 and in fp8; the LM head
// stays in the dtype.
TEST(ComputeTimerGemm, TimeIsFlopsOverTheCalibratedThroughput) {
  const Topology topology = Topology::load("dgx-h100", 1);
  const Calibration calibration = Calibration::defaults();
  Workload w = step_workload(2);
  Op gemm;
  gemm.kind = OpKind::Gemm;
  gemm.label = StepOp::MlpUp;
  gemm.gemm[0] = 8192, gemm.gemm[1] = 14336, gemm.gemm[2] = 4096;
  gemm.flops = 2.0 * 8192 * 14336 * 4096;
  TokenSetPool pool;
  const double bf16 = ComputeTimer(topology.gpu(), calibration, w).seconds(gemm, pool);
  const double efficiency = calibration.gemm_efficiency("H100-SXM5-80GB", 8192, 14336, 4096);
  EXPECT_NEAR(efficiency, 0.80, 1e-12);  // large and aligned: the ceiling
  EXPECT_NEAR(bf16, gemm.flops / (0.80 * 989.4e12), 1e-15);
  w.fp8_linear = true;
  ComputeTimer fp8(topology.gpu(), calibration, w);
  EXPECT_NEAR(fp8.seconds(gemm, pool), gemm.flops / (0.71 * 1979e12), 1e-15);
  gemm.label = StepOp::LmHead;
  EXPECT_NEAR(fp8.seconds(gemm, pool), bf16, 1e-15);
  // Small products run below the ceiling, misaligned ones lower still.
  EXPECT_LT(calibration.gemm_efficiency("H100", 1024, 1024, 1024), 0.2);
  EXPECT_NEAR(calibration.gemm_efficiency("H100", 8192, 10922, 4096) / efficiency, 272.7 / 398.4, 1e-12);
}

}  // namespace
}  // namespace wallfacer

namespace wallfacer {
namespace {

// Compute seconds of one pass of each part of a stage's step: a micro-batch's forward (input,
// every layer, head or send), its backward, and the once-per-step epilogue.
struct StageTimes {
  double forward = 0, backward = 0, epilogue = 0;
};

StageTimes stage_times(const StepTemplate& t, ComputeTimer& timer, const TokenSetPool& pool) {
  StageTimes s;
  for (uint32_t i = 0; i < t.program.ops.size(); ++i) {
    const Op& op = t.program.ops[i];
    if (op.stream != Stream::Compute) continue;
    const double seconds = timer.seconds(op, pool) * (in_layer_section(t.sections, i) ? t.layers : 1);
    if (in_epilogue(t.sections, i))
      s.epilogue += seconds;
    else
      (i < t.sections.head_end ? s.forward : s.backward) += seconds;
  }
  return s;
}

// The 1F1B pipeline as a recurrence over items: stage p runs its items in 1F1B order, a forward
// after the previous stage's forward of the same micro-batch has arrived, a backward after the
// next stage's backward has; a stage posts the receive an item needs once it has finished the item
// before (docs/step.md). `message` is one stage message's transfer time.
double one_forward_one_backward_s(const std::vector<StageTimes>& stages, int M, double message) {
  const int Pp = int(stages.size());
  std::vector<std::vector<double>> fwd(size_t(Pp), std::vector<double>(size_t(M), -1)), bwd = fwd;
  std::vector<std::vector<std::pair<bool, int>>> order(static_cast<size_t>(Pp));  // (backward?, micro-batch)
  for (int p = 0; p < Pp; ++p) {
    const int warmup = std::min(Pp - p - 1, M);
    int f = 0, b = 0;
    for (; f < warmup; ++f)
      order[size_t(p)].push_back({false, f});
    while (b < M) {
      if (f < M) order[size_t(p)].push_back({false, f++});
      order[size_t(p)].push_back({true, b++});
    }
  }
  std::vector<size_t> next(size_t(Pp), 0);
  std::vector<double> free_at(size_t(Pp), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int p = 0; p < Pp; ++p)
      while (next[size_t(p)] < order[size_t(p)].size()) {
        const auto [backward, j] = order[size_t(p)][next[size_t(p)]];
        double sent = 0;
        const bool received = (!backward && p > 0) || (backward && p < Pp - 1);
        if (!backward && p > 0) sent = fwd[size_t(p - 1)][size_t(j)];
        if (backward && p < Pp - 1) sent = bwd[size_t(p + 1)][size_t(j)];
        if (sent < 0) break;
        // The receive is posted once the stage is free; the message moves once both ends are posted.
        const double start = std::max(free_at[size_t(p)], sent) + (received ? message : 0);
        free_at[size_t(p)] = start + (backward ? stages[size_t(p)].backward : stages[size_t(p)].forward);
        (backward ? bwd : fwd)[size_t(p)][size_t(j)] = free_at[size_t(p)];
        ++next[size_t(p)];
        progress = true;
      }
  }
  double step = 0;
  for (int p = 0; p < Pp; ++p) {
    EXPECT_EQ(next[size_t(p)], order[size_t(p)].size()) << "stage " << p << " never finished";
    step = std::max(step, free_at[size_t(p)] + stages[size_t(p)].epilogue);
  }
  return step;
}

// The last micro-batch's gradient buckets run on the sync stream, not in the queue of the
// tensor-parallel gathers its backward still waits for: data parallelism over a slow network adds
// the synchronisation of the stage that finishes last at the end of the step, not a delay that
// every stage hands on to the one before it. So what it adds does not grow with the stages (two
// layers a stage either way): 1.34 ms with 2 stages and with 4, where on the collective stream
// the buckets added 2.55 and 3.40 ms.
TEST(StepCost, DataParallelSynchronisationIsNotHandedDownThePipeline) {
  const Calibration calibration = Calibration::defaults();
  // At full speed: compute slowed beside the synchronisation's kernels would add to it.
  CostOptions full_speed;
  full_speed.comm_slowdown = false;
  double added[2] = {};  // step(D = 2) - step(D = 1) with 2 and 4 stages
  for (int Pp : {2, 4}) {
    double step[2] = {};
    for (int D : {1, 2}) {
      // A node per stage and tensor group, as large models run: the stages' messages cross nodes
      // either way, the data-parallel groups too (one 100 Gb/s NIC per node).
      const Topology topology = testing::switch_nodes(Pp * D, 8);
      const CostModel model(topology, calibration, full_speed);
      Workload w = step_workload(2 * Pp);
      w.kv_heads = 8;
      w.microbatches = 4;
      w.batch = 4 * D;
      w.zero_stage = 1;
      Plan plan = make_plan(StrategyKind::Ulysses,
                            {.sequence_parallel = 1, .data_parallel = D, .tensor_parallel = 8, .pipeline_parallel = Pp},
                            w, topology, 8 * Pp * D);
      plan.scope = Scope::Step;
      step[D - 1] = model.evaluate_step(plan).step_ms;
    }
    added[Pp / 4] = step[1] - step[0];
  }
  SCOPED_TRACE(fmt::format("data parallelism adds {} ms with 2 stages, {} ms with 4", added[0], added[1]));
  EXPECT_GT(added[0], 0);  // the synchronisation itself costs
  EXPECT_NEAR(added[1], added[0], 0.02 * added[0]);
}

TEST(StepCost, PipelineBubbleFollowsTheOneForwardOneBackwardRecurrence) {
  const Calibration calibration = Calibration::defaults();  // the timer keeps a reference
  // Stage messages cost a few microseconds on NVSwitch and milliseconds on a 1 GB/s fabric.
  // The recurrence runs compute at full speed (no slowdown beside communication kernels).
  CostOptions full_speed;
  full_speed.comm_slowdown = false;
  for (const auto& [M, GBps] : std::vector<std::pair<int, double>>{{1, 450}, {2, 450}, {8, 450}, {1, 1}, {8, 1}}) {
    const Topology topology = testing::switch_nodes(1, 4, GBps);
    const CostModel model(topology, calibration, full_speed);
    Workload w = step_workload(8);
    w.batch = M;
    w.microbatches = M;
    Plan plan = make_plan(StrategyKind::Ulysses, {.sequence_parallel = 1, .pipeline_parallel = 4}, w, topology, 4);
    plan.scope = Scope::Step;
    const StepBuilder builder(plan);
    ComputeTimer timer(topology.gpu(), calibration, w);
    TokenSetPool pool;
    std::vector<StageTimes> stages;
    for (int p = 0; p < 4; ++p)
      stages.push_back(stage_times(builder.build_template(p, pool), timer, pool));
    const Route& route = topology.route(0, 1);
    const double message = route.latency_us * 1e-6 + double(w.seq * w.hidden * 2) / (route.bottleneck_GBps * 1e9);
    const double expected_ms = one_forward_one_backward_s(stages, M, message) * 1e3;
    const CostBreakdown cost = model.evaluate_step(plan);
    SCOPED_TRACE(fmt::format("M = {}, {} GB/s", M, GBps));
    if (GBps > 100) {
      EXPECT_NEAR(cost.step_ms, expected_ms, 1e-6 * expected_ms);
    } else {
      // A rank's stage sends share its send stream: where a message outlasts a micro-batch's
      // compute, the activations to the next stage and the gradients to the previous one queue
      // behind each other, which the recurrence (every message on its own) does not charge.
      EXPECT_GE(cost.step_ms, expected_ms * (1 - 1e-9));
      EXPECT_LE(cost.step_ms, expected_ms + 2 * M * message * 1e3);
    }
    // The bubble: the busiest stage idles for (Pp - 1) items' worth of others' work.
    double busiest = 0;
    for (const StageTimes& s : stages)
      busiest = std::max(busiest, M * (s.forward + s.backward) + s.epilogue);
    EXPECT_GT(cost.step_ms, busiest * 1e3 * (1 + 0.5 * 3.0 / (M + 3)));
  }
}

// A stage holds its share of the parameters and, under 1F1B, the activations of min(Pp, M)
// micro-batches on the first stage.
TEST(StepCost, PipelineStagesHoldTheirShareOfTheModel) {
  const Topology topology = testing::switch_nodes(1, 8);
  const CostModel model(topology, Calibration::defaults());
  auto memory = [&](int Pp, int M) {
    Workload w = step_workload(8);
    w.batch = 8;
    w.microbatches = M;
    w.zero_stage = 0;
    Plan plan =
        make_plan(StrategyKind::Ulysses, {.sequence_parallel = 8 / Pp, .pipeline_parallel = Pp}, w, topology, 8);
    plan.scope = Scope::Step;
    return std::make_pair(model.evaluate_step(plan).memory, w);
  };
  const auto [whole, w] = memory(1, 1);
  EXPECT_NEAR(whole.model_state_GiB * 1024.0 * 1024 * 1024, 16.0 * double(w.parameter_count()), 1.0);
  for (const auto& [Pp, M] : std::vector<std::pair<int, int>>{{2, 1}, {2, 4}, {4, 2}, {4, 8}}) {
    SCOPED_TRACE(fmt::format("Pp = {}, M = {}", Pp, M));
    const MemoryEstimate m = memory(Pp, M).first;
    // The fullest stage is the first (the embedding, min(Pp, M) micro-batches in flight) or the
    // last (the head and final norm, the logits, one micro-batch): its parameters in full (ZeRO 0).
    const bool first = m.model_state_GiB * 1024.0 * 1024 * 1024 == 16.0 * double(w.stage_parameter_count(0, Pp));
    const bool last = m.model_state_GiB * 1024.0 * 1024 * 1024 == 16.0 * double(w.stage_parameter_count(Pp - 1, Pp));
    ASSERT_TRUE(first || last);
    // Each stage's sequence-parallel group is Pp times smaller, so a micro-batch's rows per rank
    // are Pp / M times the whole-batch rows without pipelining; L / Pp layers of them per micro-batch.
    const double in_flight = first ? std::min(Pp, M) : 1;
    EXPECT_NEAR(m.activations_GiB, whole.activations_GiB * (double(Pp) / M) / Pp * in_flight,
                1e-9 * whole.activations_GiB);
    EXPECT_NEAR(m.total_GiB, m.model_state_GiB + m.activations_GiB + m.attention_GiB + m.working_GiB, 1e-12);
  }
}

}  // namespace
}  // namespace wallfacer
