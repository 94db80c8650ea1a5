// The cost of interleaved 1F1B (virtual stages, docs/step.md "Interleaved 1F1B"): the step follows
// the recurrence of Megatron-LM's interleaved order over each chunk's compute and the message
// time, whose bubble for equal stages is (Pp - 1) / (v M + Pp - 1) of the step; the first stage
// holds the activations of its warmup chunks plus one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include <wallfacer/cost/compute_time.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "cost_test_util.hpp"

namespace wallfacer {
namespace {

Workload interleaved_workload(int layers, int M) {
  Workload w = testing::mha_workload(2048, 8, 64, /*causal=*/true);
  w.layers = layers;
  w.kv_heads = 4;
  w.ffn = 1536;
  w.vocab = 4096;
  w.batch = M;
  w.microbatches = M;
  return w;
}

// Compute seconds of one chunk's forward and backward on a stage: its layers, plus the embedding
// (first stage, chunk 0) or the head (last stage, chunk v - 1) and the embedding's backward.
struct ChunkTimes {
  double layer_forward = 0, layer_backward = 0;  // one layer
  double prologue = 0, head = 0, tail = 0, epilogue = 0;
};

ChunkTimes chunk_times(const StepTemplate& t, ComputeTimer& timer, const TokenSetPool& pool) {
  ChunkTimes c;
  const StepSections& s = t.sections;
  for (uint32_t i = 0; i < t.program.ops.size(); ++i) {
    const Op& op = t.program.ops[i];
    if (op.stream != Stream::Compute) continue;
    const double seconds = timer.seconds(op, pool);
    double& part = i < s.prologue_end      ? c.prologue
                   : i < s.forward_end     ? c.layer_forward
                   : i < s.head_end        ? c.head
                   : i < s.gradient_in_end ? c.prologue  // none: stage receives only
                   : i < s.backward_end    ? c.layer_backward
                   : i < s.tail_end        ? c.tail
                                           : c.epilogue;
    part += seconds;
  }
  return c;
}

// Megatron-LM's interleaved order on rank p: (backward?, micro-batch, chunk) in turn.
struct Item {
  bool backward;
  int micro, chunk;
};
std::vector<Item> interleaved_items(int p, int Pp, int v, int M) {
  const int total = v * M, warmup = std::min(2 * (Pp - p - 1) + (v - 1) * Pp, total);
  auto item = [&](bool backward, int k) {
    const int chunk = (k / Pp) % v;
    return Item{backward, (k / (Pp * v)) * Pp + k % Pp, backward ? v - 1 - chunk : chunk};
  };
  std::vector<Item> items;
  int f = 0, b = 0;
  for (; f < warmup; ++f)
    items.push_back(item(false, f));
  while (b < total) {
    if (f < total) items.push_back(item(false, f++));
    items.push_back(item(true, b++));
  }
  return items;
}

// The step as a recurrence: each stage runs its items in order on its compute stream; a chunk's
// forward starts once the model chunk before it (on the previous stage, or the last stage for the
// first stage's later chunks) has sent its output, a backward once the model chunk after it has
// sent its gradient; a stage posts the receive an item needs once it has finished the item before.
// `message` is one stage message's time.
double interleaved_step_s(const std::vector<ChunkTimes>& stages, int v, int M, int layers_per_chunk, double message) {
  const int Pp = int(stages.size()), chunks = Pp * v;
  std::vector<std::vector<double>> fwd(size_t(chunks), std::vector<double>(size_t(M), -1)), bwd = fwd;
  std::vector<std::vector<Item>> order;
  for (int p = 0; p < Pp; ++p)
    order.push_back(interleaved_items(p, Pp, v, M));
  std::vector<size_t> next(size_t(Pp), 0);
  std::vector<double> free_at(size_t(Pp), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int p = 0; p < Pp; ++p)
      while (next[size_t(p)] < order[size_t(p)].size()) {
        const Item it = order[size_t(p)][next[size_t(p)]];
        const int c = it.chunk * Pp + p;  // the model chunk
        double ready = 0;
        if (!it.backward && c > 0) ready = fwd[size_t(c - 1)][size_t(it.micro)];
        if (it.backward && c < chunks - 1) ready = bwd[size_t(c + 1)][size_t(it.micro)];
        if (ready < 0) break;
        // The receive is posted once the stage is free; the message moves once both ends are posted.
        if ((!it.backward && c > 0) || (it.backward && c < chunks - 1))
          ready = std::max(ready, free_at[size_t(p)]) + message;
        const ChunkTimes& s = stages[size_t(p)];
        double length = layers_per_chunk * (it.backward ? s.layer_backward : s.layer_forward);
        if (!it.backward) length += (it.chunk == 0 ? s.prologue : 0) + (it.chunk == v - 1 ? s.head : 0);
        if (it.backward && it.chunk == 0) length += s.tail;
        const double start = std::max(free_at[size_t(p)], ready);
        free_at[size_t(p)] = start + length;
        (it.backward ? bwd : fwd)[size_t(c)][size_t(it.micro)] = free_at[size_t(p)];
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

// Equal stages and free messages: the interleaved step is (v M + Pp - 1) chunk items of f + b, a
// bubble of (Pp - 1) / (v M + Pp - 1) (Narayanan et al. 2021, section 2.2.2: (Pp - 1) / (v M) of
// the ideal time).
TEST(InterleavedCost, RecurrenceOfEqualStagesHasTheClosedFormBubble) {
  for (const auto& [Pp, v, M] : std::vector<std::tuple<int, int, int>>{{4, 1, 8}, {4, 2, 8}, {4, 4, 4}, {8, 2, 16}}) {
    ChunkTimes stage;
    stage.layer_forward = 1.0 / v;  // one layer per chunk: a stage's forward of a micro-batch is 1 s
    stage.layer_backward = 2.0 / v;
    const std::vector<ChunkTimes> stages(size_t(Pp), stage);
    const double step = interleaved_step_s(stages, v, M, 1, 0);
    const double ideal = M * 3.0;
    EXPECT_NEAR(step, ideal + (Pp - 1) * 3.0 / v, 1e-9) << "Pp = " << Pp << ", v = " << v << ", M = " << M;
    EXPECT_NEAR((step - ideal) / step, double(Pp - 1) / (v * M + Pp - 1), 1e-12);
  }
}

TEST(InterleavedCost, StepFollowsTheInterleavedRecurrence) {
  const Calibration calibration = Calibration::defaults();  // the timer keeps a reference
  CostOptions full_speed;                                   // the recurrence runs compute at full speed
  full_speed.comm_slowdown = false;
  for (const auto& [v, M] : std::vector<std::pair<int, int>>{{1, 4}, {2, 4}, {2, 8}, {4, 4}}) {
    const Topology topology = testing::switch_nodes(1, 4, 450);
    const CostModel model(topology, calibration, full_speed);
    const Workload w = interleaved_workload(16, M);
    Plan plan = make_plan(StrategyKind::Ulysses, {.sequence_parallel = 1, .pipeline_parallel = 4, .virtual_stages = v},
                          w, topology, 4);
    plan.scope = Scope::Step;
    const StepBuilder builder(plan);
    ComputeTimer timer(topology.gpu(), calibration, w);
    TokenSetPool pool;
    std::vector<ChunkTimes> stages;
    for (int p = 0; p < 4; ++p)
      stages.push_back(chunk_times(builder.build_template(p, pool), timer, pool));
    const Route& route = topology.route(0, 1);
    const double message = route.latency_us * 1e-6 + double(w.seq * w.hidden * 2) / (route.bottleneck_GBps * 1e9);
    const double expected_ms = interleaved_step_s(stages, v, M, w.layers / (4 * v), message) * 1e3;
    const CostBreakdown cost = model.evaluate_step(plan);
    SCOPED_TRACE(fmt::format("v = {}, M = {}", v, M));
    EXPECT_NEAR(cost.step_ms, expected_ms, 1e-6 * expected_ms);
    // The compute lower bound the search prunes with stays below the step.
    EXPECT_LE(model.step_compute_bound_ms(plan), cost.step_ms * (1 + 1e-9));
  }
}

// More chunks shrink the bubble: the same pipeline runs faster with v = 2 and 4 than with 1.
TEST(InterleavedCost, VirtualStagesShortenThePipelinedStep) {
  const Topology topology = testing::switch_nodes(1, 8, 450);
  const CostModel model(topology, Calibration::defaults());
  std::vector<double> steps;
  for (int v : {1, 2, 4}) {
    Plan plan = make_plan(StrategyKind::Ulysses, {.sequence_parallel = 1, .pipeline_parallel = 8, .virtual_stages = v},
                          interleaved_workload(32, 8), topology, 8);
    plan.scope = Scope::Step;
    steps.push_back(model.evaluate_step(plan).step_ms);
  }
  EXPECT_LT(steps[1], steps[0]);
  EXPECT_LT(steps[2], steps[1]);
}

// The first stage holds min(2 (Pp - 1) + (v - 1) Pp + 1, v M) chunks of L / (Pp v) layers in
// flight, against min(Pp, M) micro-batches of L / Pp layers without chunks.
TEST(InterleavedCost, FirstStageHoldsItsWarmupChunks) {
  const Topology topology = testing::switch_nodes(1, 8);
  const CostModel model(topology, Calibration::defaults());
  auto memory = [&](int v) {
    Workload w = interleaved_workload(16, 8);
    w.zero_stage = 0;
    Plan plan = make_plan(StrategyKind::Ulysses, {.sequence_parallel = 4, .pipeline_parallel = 2, .virtual_stages = v},
                          w, topology, 8);
    plan.scope = Scope::Step;
    return std::make_pair(model.evaluate_step(plan).memory, w);
  };
  const auto [plain, w] = memory(1);
  for (int v : {2, 4}) {
    const MemoryEstimate m = memory(v).first;
    SCOPED_TRACE(fmt::format("v = {}", v));
    const double layers_plain = double(w.layers / 2) * std::min(2, w.microbatches);
    const double layers_v = double(w.layers / (2 * v)) * std::min(2 * 1 + (v - 1) * 2 + 1, v * w.microbatches);
    EXPECT_NEAR(m.activations_GiB, plain.activations_GiB * layers_v / layers_plain, 1e-9 * plain.activations_GiB);
    EXPECT_EQ(m.model_state_GiB, plain.model_state_GiB);  // the same parameters on each stage
  }
}

}  // namespace
}  // namespace wallfacer
