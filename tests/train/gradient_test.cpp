// The decoder's backward against finite differences (fp64, one rank: every layer the trainer
// writes, the attention kernels' backward included), the data x sequence parallel gradients of
// every strategy against the single-process gradient, and gradients that do not depend on the
// activation checkpointing mode; the rotary kernel against its closed form for several bases.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/train/cpu_step_kernels.hpp>
#include "train/train_fixtures.hpp"

namespace wallfacer::test {
namespace {

using train::Positions;
using train::Trainer;
using train::TrainerOptions;

// Single-process fp64 gradient and loss at the initial parameters (step 0's batch).
struct Gradient {
  double loss = 0;
  std::vector<double> values;
};

Gradient gradient_of(const Plan& plan, const TrainerOptions& options) {
  Gradient g;
  on_every_rank<double>(plan, options, [&](Trainer<double>& trainer, runtime::Backend& backend) {
    const double loss = trainer.compute_gradients(0, pseudo_text_batches(plan.workload.seq));
    if (backend.rank() != 0) return;
    g.loss = loss;
    g.values = trainer.gradient();
  });
  return g;
}

double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

struct ModelVariant {
  const char* name;
  bool gated;
  Positions positions;
  double rotary_base = train::kDefaultRotaryBase;
};

class FiniteDifferences : public ::testing::TestWithParam<ModelVariant> {};

TEST_P(FiniteDifferences, EveryTensorMatchesCentralDifferences) {
  const ModelVariant variant = GetParam();
  const Plan plan = tiny_plan(StrategyKind::Ring, {}, tiny_decoder(24, 2, variant.gated));
  TrainerOptions options;
  options.positions = variant.positions;
  options.rotary_base = variant.rotary_base;
  options.seed = 5;
  on_every_rank<double>(plan, options, [&](Trainer<double>& trainer, runtime::Backend&) {
    auto batches = pseudo_text_batches(plan.workload.seq);
    trainer.compute_gradients(0, batches);
    const std::vector<double> analytic = trainer.gradient();
    std::vector<double>& params = trainer.parameters();
    int checked = 0, nonzero = 0;
    for (const train::ParameterTensor& t : trainer.layout().tensors()) {
      // A few elements of every tensor, spread over it; embedding rows of bytes that occur.
      for (int64_t k = 0; k < 4; ++k) {
        int64_t i = t.offset + (k * 7919 + 13) % t.numel();
        if (t.name == "embed") i = t.offset + int64_t(' ') * t.shape[1] + k;
        const double saved = params[size_t(i)], h = 1e-5;
        params[size_t(i)] = saved + h;
        const double up = trainer.compute_gradients(0, batches);
        params[size_t(i)] = saved - h;
        const double down = trainer.compute_gradients(0, batches);
        params[size_t(i)] = saved;
        const double numeric = (up - down) / (2 * h);
        EXPECT_NEAR(analytic[size_t(i)], numeric, 1e-6 * std::max(1.0, std::abs(numeric)) + 1e-9)
            << t.name << " element " << i - t.offset;
        ++checked;
        nonzero += std::abs(numeric) > 1e-7 ? 1 : 0;
      }
    }
    EXPECT_GT(checked, 40);
    EXPECT_GT(nonzero, checked * 3 / 4);  // the comparison is not between zeros
  });
}

INSTANTIATE_TEST_SUITE_P(Variants, FiniteDifferences,
                         ::testing::Values(ModelVariant{"gelu_rotary", false, Positions::Rotary},
                                           ModelVariant{"swiglu_learned", true, Positions::Learned},
                                           ModelVariant{"swiglu_rotary_base_7", true, Positions::Rotary, 7.0}),
                         [](const auto& info) { return std::string(info.param.name); });

// The CPU kernel turns pair i of every head at position p by the angle p * base^(-2i / head_dim),
// checked against that rotation of unit vectors in closed form, and its inverse turns back.
TEST(Rotary, TurnsEachPairByPositionTimesAPowerOfTheBase) {
  const auto kernels = train::make_cpu_step_kernels<double>();
  const int heads = 2, head_dim = 8;
  const std::vector<int64_t> positions = {0, 3, 1500, 4095};
  for (const double base : {10000.0, 1e6, 7.0}) {
    const int64_t rows = 2 * int64_t(positions.size());  // two sequences
    std::vector<double> x(size_t(rows * heads * head_dim));
    for (size_t k = 0; k < x.size(); k += 2)
      x[k] = 1.0;  // every pair starts as (1, 0)
    std::vector<double> turned = x;
    kernels->rotary(turned.data(), positions.data(), int64_t(positions.size()), rows, heads, head_dim, base, false);
    for (int64_t r = 0; r < rows; ++r)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < head_dim / 2; ++i) {
          const double angle = double(positions[size_t(r) % positions.size()]) * std::pow(base, -2.0 * i / head_dim);
          const size_t at = size_t((r * heads + h) * head_dim + 2 * i);
          EXPECT_NEAR(turned[at], std::cos(angle), 1e-12) << "base " << base << " row " << r << " pair " << i;
          EXPECT_NEAR(turned[at + 1], std::sin(angle), 1e-12) << "base " << base << " row " << r << " pair " << i;
        }
    kernels->rotary(turned.data(), positions.data(), int64_t(positions.size()), rows, heads, head_dim, base, true);
    for (size_t k = 0; k < x.size(); ++k)
      EXPECT_NEAR(turned[k], x[k], 1e-12);
  }
  const Workload w = tiny_decoder(24, 2, true);
  EXPECT_EQ(train::model_shape(w, Positions::Rotary, 5e5).rotary_base, 5e5);
  for (const double bad : {1.0, 0.5, -3.0, std::nan(""), HUGE_VAL})
    EXPECT_THROW(train::model_shape(w, Positions::Rotary, bad), InputError) << bad;
}

struct ParallelCase {
  StrategyKind kind;
  StrategyParams params;
};

std::vector<ParallelCase> parallel_cases(const Workload& w) {
  std::vector<ParallelCase> cases;
  for (StrategyKind kind :
       {StrategyKind::Ring, StrategyKind::Zigzag, StrategyKind::Ulysses, StrategyKind::Usp, StrategyKind::WallFacer,
        StrategyKind::Lss, StrategyKind::DoubleRing, StrategyKind::AllGather})
    for (const StrategyParams& p : enumerate_params(kind, w, 4))
      if (check_feasible(kind, p, w, 4).ok && p.tensor_parallel == 1 && p.pipeline_parallel == 1)
        cases.push_back({kind, p});
  return cases;
}

TEST(DataSequenceParallel, GradientsEqualSingleProcess) {
  // 30 tokens: shards of unequal size where the strategy allows them.
  for (auto [positions, seq] :
       {std::pair{Positions::Rotary, 32}, std::pair{Positions::Learned, 32}, std::pair{Positions::Rotary, 30}}) {
    const Workload w = tiny_decoder(seq, 2, true);
    TrainerOptions options;
    options.positions = positions;
    const Gradient single = gradient_of(tiny_plan(StrategyKind::Ring, {}, w), options);
    int cases = 0;
    for (const ParallelCase& c : parallel_cases(w)) {
      SCOPED_TRACE(fmt::format("{} S={} D={} seq {} positions {}", to_string(c.kind), c.params.sequence_parallel,
                               c.params.data_parallel, seq, to_string(positions)));
      const Gradient parallel = gradient_of(tiny_plan(c.kind, c.params, w), options);
      EXPECT_NEAR(parallel.loss, single.loss, 1e-12 * single.loss);
      EXPECT_LT(relative_difference(parallel.values, single.values), 1e-10);
      ++cases;
    }
    EXPECT_GE(cases, seq == 32 ? 10 : 3);
  }
}

TEST(Checkpointing, ModesGiveTheSameGradients) {
  Workload w = tiny_decoder(32, 1, false);
  StrategyParams params;
  params.sequence_parallel = 2;
  const Gradient none = gradient_of(tiny_plan(StrategyKind::Zigzag, params, w), {});
  for (Checkpointing mode : {Checkpointing::Selective, Checkpointing::Full}) {
    w.checkpointing = mode;
    const Gradient other = gradient_of(tiny_plan(StrategyKind::Zigzag, params, w), {});
    EXPECT_EQ(other.values, none.values) << to_string(mode);
  }
}

}  // namespace
}  // namespace wallfacer::test
