// The whole-step schedule against closed forms: every token's layer work is done once across the
// ranks, GEMM FLOPs equal 6 x tokens x matrix weights (plus what recomputation repeats), each
// layer computes every attention pair once, gradients synchronise every parameter once, and an
// unrolled layer's backward waits for its own forward.
#include <gtest/gtest.h>

#include <functional>

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

Workload step_workload(Checkpointing mode, int zero_stage) {
  Workload w = testing::small_workload(64, 8, 2, true, 2, 4);
  w.layers = 3;
  w.ffn = 48;
  w.vocab = 50;
  w.checkpointing = mode;
  w.zero_stage = zero_stage;
  w.grad_bucket_MiB = 1;
  return w;
}

struct Sums {
  int64_t rows = 0;
  double gemm_flops = 0, recompute_gemm_flops = 0;
  double attention_flops = 0, recompute_attention_flops = 0;
  int64_t grad_elements = 0;  // over the first gradient group, all ranks
};

Sums sum_schedule(const Plan& plan, int layers) {
  StepBuilder builder(plan);
  Sums sums;
  TokenSetPool pool;
  for (int r = 0; r < plan.num_ranks(); ++r) {
    const StepTemplate t = builder.build_template(r, pool);
    sums.rows += t.tokens;
    const RankProgram p = unroll(t, layers);
    int32_t first_group = -1;
    for (const Op& op : p.ops) {
      const bool again = op.flags & kOpRecompute;
      if (op.kind == OpKind::Gemm) (again ? sums.recompute_gemm_flops : sums.gemm_flops) += op.flops;
      if (op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd)
        (again ? sums.recompute_attention_flops : sums.attention_flops) += op.flops;
      if (op.label != StepOp::GradSync) continue;
      const CollectiveSpec& spec = p.collectives[size_t(op.coll)];
      if (first_group < 0) first_group = spec.group;
      if (spec.group == first_group && r == 0) sums.grad_elements += spec.elements;
    }
  }
  return sums;
}

// Weights of the matrix products of one layer (attention projections and MLP).
double layer_matrix_weights(const Workload& w) {
  return double(w.attention_parameters_per_layer()) + (w.gated_ffn ? 3.0 : 2.0) * double(w.hidden) * double(w.ffn);
}

class StepClosedForms : public ::testing::TestWithParam<std::tuple<StrategyKind, Checkpointing, int>> {};

TEST_P(StepClosedForms, EveryStrategyAndSplit) {
  const auto [kind, mode, zero] = GetParam();
  const Workload w = step_workload(mode, zero);
  int tried = 0;
  for (const StrategyParams& params : enumerate_params(kind, w, 8)) {
    if (!check_feasible(kind, params, w, 8).ok) continue;
    ++tried;
    const Plan plan = testing::hand_plan(kind, params, w);
    const Sums s = sum_schedule(plan, 0);
    const double tokens = double(w.seq) * w.batch;
    SCOPED_TRACE(plan.groups.empty() ? std::string("single") : plan.groups.front().name);
    EXPECT_EQ(s.rows, int64_t(tokens));
    // Forward, data gradient and weight gradient of every matrix: 3 x 2 x tokens x weights.
    const double matrices = w.layers * layer_matrix_weights(w) + double(w.vocab) * w.hidden;
    EXPECT_NEAR(s.gemm_flops, 6.0 * tokens * matrices, 1e-9 * s.gemm_flops);
    // Exact causal pairs N(N+1)/2 (layer_attention_flops counts the convention's N^2/2).
    const double pairs = w.causal ? double(w.seq) * (w.seq + 1) / 2 : double(w.seq) * w.seq;
    const double attention = w.layers * 3.5 * 4.0 * w.batch * pairs * w.heads * w.head_dim;
    EXPECT_NEAR(s.attention_flops, attention, 1e-9 * attention);
    if (mode == Checkpointing::Full) {
      // Everything before the down projection again: projections, gate and up, attention forward.
      const double again = double(w.attention_parameters_per_layer()) + (w.gated_ffn ? 2.0 : 1.0) * w.hidden * w.ffn;
      EXPECT_NEAR(s.recompute_gemm_flops, 2.0 * tokens * w.layers * again, 1e-9 * s.recompute_gemm_flops);
      EXPECT_NEAR(s.recompute_attention_flops, attention / 3.5, 1e-9 * attention);
    } else {
      EXPECT_EQ(s.recompute_gemm_flops, 0);
      EXPECT_EQ(s.recompute_attention_flops, 0);
    }
    // Every parameter's gradient passes the first gradient group once.
    EXPECT_EQ(s.grad_elements, w.parameter_count());
  }
  EXPECT_GT(tried, 0);
}

std::string name_of(const ::testing::TestParamInfo<StepClosedForms::ParamType>& info) {
  std::string name = to_string(std::get<0>(info.param));
  for (char& c : name)
    if (c == '-') c = '_';
  return name + "_" + to_string(std::get<1>(info.param)) + "_zero" + std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Step, StepClosedForms,
                         ::testing::Combine(::testing::ValuesIn(all_strategies()),
                                            ::testing::Values(Checkpointing::None, Checkpointing::Selective,
                                                              Checkpointing::Full),
                                            ::testing::Values(0, 2, 3)),
                         name_of);

// Bytes a rank sends in its gradient synchronisation and its parameter gathers.
std::pair<int64_t, int64_t> sync_and_gather_bytes(const Plan& plan, int rank, int& sync_ops) {
  TokenSetPool pool;
  const RankProgram p = unroll(StepBuilder(plan).build_template(rank, pool), plan.workload.layers);
  int64_t sync = 0, gather = 0;
  sync_ops = 0;
  for (const Op& op : p.ops) {
    if (op.label != StepOp::GradSync) continue;
    sync += op.bytes, ++sync_ops;
    EXPECT_EQ(plan.groups[size_t(p.collectives[size_t(op.coll)].group)].name, "world");
  }
  for (const Op& op : p.ops)
    if (op.label == StepOp::ParamGather) gather += op.bytes;
  return {sync, gather};
}

// The gradient synchronisation carries every parameter once in grad_comm_dtype: a ring
// all-reduce sends 2 (P-1)/P of the buffer, a reduce-scatter (P-1)/P, each bucket rounded down to
// whole bytes. Parameter gathers stay in the dtype whatever the gradients travel in.
TEST(StepGradCommDtype, GradientBytesFollowTheDtypeAndGathersTheParameters) {
  for (int zero : {0, 1, 3}) {
    int64_t gather_bytes = -1;
    for (DType grad : {DType::FP32, DType::BF16, DType::FP16}) {
      SCOPED_TRACE(fmt::format("zero {} grads {}", zero, to_string(grad)));
      Workload w = step_workload(Checkpointing::Selective, zero);
      w.grad_comm_dtype = grad;
      const Plan plan = testing::hand_plan(StrategyKind::Ulysses, testing::seq_params(8), w);
      const double P = 8;  // every rank: the world group
      int ops = 0;
      const auto [sync, gather] = sync_and_gather_bytes(plan, 3, ops);
      const double share = (zero == 0 ? 2.0 : 1.0) * (P - 1) / P;
      const double expected = share * double(w.parameter_count()) * bytes_of(grad);
      EXPECT_LE(double(sync), expected);
      EXPECT_GT(double(sync), expected - ops);
      if (gather_bytes < 0) gather_bytes = gather;
      EXPECT_EQ(gather, gather_bytes);
      EXPECT_EQ(gather > 0, zero >= 1);
    }
  }
}

// Transformer Engine's fp8 casts against their closed form: per layer, every token's GEMM inputs
// (attention input, attention output, MLP input, activation) in the forward and its output
// gradients (down, gate and up, output projection, Q/K/V) in the backward, and every rank's
// weights in each forward, each element read in the dtype and written twice in fp8. The
// recomputed forward (full checkpointing) casts its inputs and weights again, the down projection
// aside. Delayed scaling updates 12 tensors' amax histories per layer (6 more when recomputing).
TEST(StepFp8Casts, BytesMatchTheRecipe) {
  for (Checkpointing mode : {Checkpointing::Selective, Checkpointing::Full}) {
    SCOPED_TRACE(to_string(mode));
    Workload w = step_workload(mode, 1);
    w.fp8_linear = true;
    const Plan plan = testing::hand_plan(StrategyKind::Ring, testing::seq_params(4, 2), w);
    const double e = bytes_of(w.dtype), tokens = double(w.seq) * w.batch, H = double(w.hidden);
    const double Hkv = double(w.kv_width()), F = double(w.ffn), L = w.layers, ranks = plan.num_ranks();
    const double gated = w.gated_ffn ? 2 : 1;
    const double forward_rows = H + H + H + F, backward_rows = H + gated * F + H + (H + 2 * Hkv);
    const double weights = (H + 2 * Hkv) * H + H * H + gated * F * H + H * F;
    double casts = 0, recast = 0, scales = 0, rescales = 0;
    TokenSetPool pool;
    for (int r = 0; r < plan.num_ranks(); ++r) {
      const RankProgram p = unroll(StepBuilder(plan).build_template(r, pool), w.layers);
      for (const Op& op : p.ops) {
        const bool again = op.flags & kOpRecompute;
        if (op.label == StepOp::Fp8Cast) (again ? recast : casts) += double(op.bytes);
        if (op.label == StepOp::Fp8Scale) (again ? rescales : scales) += double(op.bytes);
      }
    }
    const double per_tensor = 2 * 4 * 1024 + 4 * 4;
    EXPECT_DOUBLE_EQ(casts, (e + 2) * L * (tokens * (forward_rows + backward_rows) + ranks * weights));
    EXPECT_DOUBLE_EQ(scales, L * ranks * 12 * per_tensor);
    if (mode == Checkpointing::Full) {
      EXPECT_DOUBLE_EQ(recast, (e + 2) * L * (tokens * 3 * H + ranks * (weights - H * F)));
      EXPECT_DOUBLE_EQ(rescales, L * ranks * 6 * per_tensor);
    } else {
      EXPECT_EQ(recast + rescales, 0);
    }
    // Without fp8 GEMMs nothing is cast.
    w.fp8_linear = false;
    const Plan plain = testing::hand_plan(StrategyKind::Ring, testing::seq_params(4, 2), w);
    const RankProgram p = unroll(StepBuilder(plain).build_template(0, pool), w.layers);
    EXPECT_EQ(std::count_if(p.ops.begin(), p.ops.end(),
                            [](const Op& op) { return op.label == StepOp::Fp8Cast || op.label == StepOp::Fp8Scale; }),
              0);
  }
}

// Unrolled layers: op counts add up, and the backward of layer l waits only for layer l's forward.
TEST(StepUnroll, LayerBackwardWaitsForItsOwnForward) {
  const Workload w = step_workload(Checkpointing::Selective, 1);
  const Plan plan = testing::hand_plan(StrategyKind::Ring, testing::seq_params(4), w);
  TokenSetPool pool;
  const StepTemplate t = StepBuilder(plan).build_template(1, pool);
  const StepSections& s = t.sections;
  const uint32_t forward = s.forward_end - s.prologue_end, backward = s.backward_end - s.head_end;
  const uint32_t head = s.head_end - s.forward_end, epilogue = uint32_t(t.program.ops.size()) - s.backward_end;
  for (int n = 1; n <= w.layers; ++n) {
    const RankProgram p = unroll(t, n);
    ASSERT_EQ(p.ops.size(), size_t(s.prologue_end + n * forward + head + n * backward + epilogue));
    const uint32_t backward_at = s.prologue_end + n * forward + head;
    int cross = 0;
    for (int l = 0; l < n; ++l) {
      const uint32_t begin = backward_at + uint32_t(n - 1 - l) * backward;
      for (uint32_t i = begin; i < begin + backward; ++i)
        for (const int32_t* d = p.deps_begin(p.ops[i]); d != p.deps_end(p.ops[i]); ++d) {
          if (uint32_t(*d) >= backward_at || uint32_t(*d) < s.prologue_end) continue;
          const uint32_t layer_of_dep = (uint32_t(*d) - s.prologue_end) / forward;
          EXPECT_EQ(layer_of_dep, uint32_t(l)) << "op " << i << " depends on " << *d;
          ++cross;
        }
    }
    EXPECT_GT(cross, 0);  // the ring's backward reads what its forward accumulated
    // Each layer has its own attention buffers.
    std::map<std::string, int> names;
    for (const BufferDecl& b : p.buffers)
      ++names[b.name];
    for (const auto& [name, count] : names)
      EXPECT_EQ(count, 1) << name;
  }
  EXPECT_THROW(unroll(t, w.layers + 1), InputError);
}

// Every strategy's 4-layer step plans with pipeline stages, virtual stages, micro-batches, ZeRO 0
// to 3 and every checkpointing mode, each handed to `visit` under a trace naming it.
void for_each_unroll_plan(const std::function<void(const Plan&)>& visit) {
  struct Setting {
    int Pp, v, M, zero;
    Checkpointing mode;
  };
  for (const Setting& s : {Setting{1, 1, 1, 1, Checkpointing::Selective}, Setting{1, 1, 2, 3, Checkpointing::Full},
                           Setting{2, 1, 4, 0, Checkpointing::None}, Setting{2, 2, 4, 2, Checkpointing::Selective}}) {
    Workload w = step_workload(s.mode, s.zero);
    w.layers = 4;
    w.microbatches = s.M;
    w.batch = 2 * s.M;
    for (StrategyKind kind : all_strategies())
      for (StrategyParams params : enumerate_params(kind, w, 4)) {
        params.pipeline_parallel = s.Pp;
        params.virtual_stages = s.v;
        if (!check_feasible(kind, params, w, 4 * s.Pp).ok) continue;
        const Plan plan = testing::hand_plan(kind, params, w);
        SCOPED_TRACE(fmt::format("{} Pp={} v={} M={} ZeRO {}", to_string(kind), s.Pp, s.v, s.M, s.zero));
        visit(plan);
      }
  }
}

// The flat order the cost model times (unroll_flat) is the unrolled program without its op copies:
// flat op i copies the template op unroll() reports for it and waits for the same ops, for every
// strategy with pipeline stages, virtual stages, micro-batches, ZeRO 0 to 3 and every
// checkpointing mode, and for fewer layers than the template's.
TEST(StepUnroll, FlatOrderIsTheUnrolledProgramWithoutItsCopies) {
  int compared = 0;
  for_each_unroll_plan([&](const Plan& plan) {
    TokenSetPool pool;
    for (int r = 0; r < plan.num_ranks(); r += 3) {
      const StepTemplate t = StepBuilder(plan).build_template(r, pool);
      for (int layers : {0, t.chunks}) {
        std::vector<uint32_t> origin;
        const RankProgram program = unroll(t, layers, &origin);
        const FlatStep flat = unroll_flat(t, layers);
        ASSERT_EQ(flat.origin, origin);
        ASSERT_EQ(flat.dep_begin.size(), program.ops.size() + 1);
        for (size_t i = 0; i < program.ops.size(); ++i) {
          const std::vector<int32_t> deps(program.deps_begin(program.ops[i]), program.deps_end(program.ops[i]));
          const std::vector<int32_t> flat_deps(flat.deps.begin() + flat.dep_begin[i],
                                               flat.deps.begin() + flat.dep_begin[i + 1]);
          ASSERT_EQ(flat_deps, deps) << "op " << i;
        }
        ++compared;
      }
    }
  });
  EXPECT_GT(compared, 40);
}

bool same_flat(const FlatStep& a, const FlatStep& b) {
  return a.origin == b.origin && a.dep_begin == b.dep_begin && a.deps == b.deps;
}

// Ranks whose templates same_unrolled_order calls alike unroll to the same flat order (the cost
// model then unrolls one of them), over every strategy and the settings above; most ranks of a
// strategy share an order; and a template that differs in one dependency, in whether an op is a
// gradient synchronisation, or in its pipeline stage is told apart.
TEST(StepUnroll, TemplatesOfTheSameUnrolledOrderUnrollAlike) {
  int alike = 0, pairs = 0;
  for_each_unroll_plan([&](const Plan& plan) {
    TokenSetPool pool;
    std::vector<StepTemplate> ts;
    std::vector<FlatStep> flats;
    for (int r = 0; r < plan.num_ranks(); ++r) {
      ts.push_back(StepBuilder(plan).build_template(r, pool));
      flats.push_back(unroll_flat(ts.back()));
    }
    for (size_t a = 0; a < ts.size(); ++a)
      for (size_t b = a + 1; b < ts.size(); ++b) {
        ++pairs;
        if (!same_unrolled_order(ts[a], ts[b])) continue;
        ++alike;
        EXPECT_TRUE(same_flat(flats[a], flats[b])) << "ranks " << a << " and " << b;
        EXPECT_EQ(ts[a].stage, ts[b].stage);
      }
    // Changed copies of rank 0's template.
    StepTemplate deps = ts[0], label = ts[0], stage = ts[0];
    const auto with_deps =
        std::find_if(deps.program.ops.begin(), deps.program.ops.end(), [](const Op& op) { return op.dep_count > 0; });
    ASSERT_NE(with_deps, deps.program.ops.end());
    deps.program.deps[with_deps->dep_begin] = deps.program.deps[with_deps->dep_begin] > 0 ? 0 : 1;
    EXPECT_FALSE(same_unrolled_order(ts[0], deps));
    label.program.ops.back().label =
        label.program.ops.back().label == StepOp::GradSync ? StepOp::Optimizer : StepOp::GradSync;
    EXPECT_FALSE(same_unrolled_order(ts[0], label));
    stage.stage += 1;
    EXPECT_FALSE(same_unrolled_order(ts[0], stage));
    EXPECT_TRUE(same_unrolled_order(ts[0], StepTemplate(ts[0])));
  });
  // Most pairs of ranks share their order (only causal work splits and team roles differ).
  EXPECT_GT(alike, pairs / 4) << alike << " of " << pairs;
}

// The optimizer starts after every gradient synchronisation; ZeRO-3 gathers each layer's weights
// before its forward and again before its backward.
TEST(StepUnroll, OptimizerWaitsForGradientsAndZero3Gathers) {
  const Workload w = step_workload(Checkpointing::None, 3);
  const Plan plan = testing::hand_plan(StrategyKind::Ulysses, testing::seq_params(4), w);
  const RankProgram p = StepBuilder(plan).build({0}).ranks[0];
  int32_t last_collective = -1, optimizer = -1, gathers = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    if (is_collective_stream(p.ops[i].stream) && optimizer < 0) last_collective = int32_t(i);
    if (p.ops[i].label == StepOp::Optimizer) optimizer = int32_t(i);
    if (p.ops[i].label == StepOp::ParamGather) ++gathers;
  }
  ASSERT_GE(optimizer, 0);
  bool waits = false;
  for (const int32_t* d = p.deps_begin(p.ops[size_t(optimizer)]); d != p.deps_end(p.ops[size_t(optimizer)]); ++d)
    waits = waits || *d == last_collective;
  EXPECT_TRUE(waits);
  EXPECT_EQ(gathers, 2 * w.layers);  // one bucket each: the small layer fits in 1 MiB
}

}  // namespace
}  // namespace wallfacer
