// The trainer on memory the host cannot touch (shadow_backend.hpp), as it runs on a GPU: every
// tensor it keeps, every pointer its kernels and collectives are handed, and every attention
// binding must be the backend's memory, reached only through the backend. Training on it gives
// the host backend's losses, parameters and moments bit for bit, for every ZeRO stage,
// checkpointing mode and position encoding; a host read of such memory faults, and a pointer
// from elsewhere is refused.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <csignal>
#include <optional>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "train/shadow_backend.hpp"
#include "train/train_fixtures.hpp"

namespace wallfacer::test {
namespace {

using runtime::Backend;
using train::Positions;
using train::Trainer;
using train::TrainerOptions;

TEST(ShadowBackend, HoldsValuesButRefusesHostPointersAndOverruns) {
  runtime::run_local_ranks(1, [](Backend& inner) {
    ShadowBackend shadow(inner);
    auto* p = static_cast<float*>(shadow.allocate(4 * sizeof(float)));
    const std::vector<float> in{1, 2, 3, 4};
    shadow.upload(p, in.data(), 4 * sizeof(float));
    shadow.copy_2d(p + 2, sizeof(float), p, sizeof(float), sizeof(float), 2);  // column copy: 1, 2 -> [2], [3]
    std::vector<float> out(4);
    shadow.download(out.data(), p, 4 * sizeof(float));
    EXPECT_EQ(out, (std::vector<float>{1, 2, 1, 2}));
    EXPECT_THROW(shadow.real(in.data(), 4, "test"), std::logic_error);               // host memory
    EXPECT_THROW(shadow.real(p + 1, 4 * sizeof(float), "test"), std::logic_error);   // past the end
    EXPECT_THROW(shadow.fill(p, runtime::ElemType::F32, 5, 0.0), std::logic_error);  // past the end
    shadow.release(p);
    EXPECT_THROW(shadow.download(out.data(), p, sizeof(float)), std::logic_error);  // released
  });
}

TEST(ShadowBackendDeathTest, HostReadOfItsMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto host_read = [] {
    runtime::run_local_ranks(1, [](Backend& inner) {
      ShadowBackend shadow(inner);
      const auto* p = static_cast<const volatile float*>(shadow.allocate(64));
      std::printf("%f\n", double(*p));
    });
  };
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer catches the fault itself, reports it and aborts (scripts/sanitize.sh).
  EXPECT_DEATH(host_read(), "AddressSanitizer: SEGV");
#else
  EXPECT_EXIT(host_read(), ::testing::KilledBySignal(SIGSEGV), "");
#endif
}

struct Case {
  const char* name;
  StrategyKind kind;
  int sequence_parallel, data_parallel, zero_stage;
  Checkpointing checkpointing;
  Positions positions;
  bool fp64;
};

// What one run leaves: rank 0's losses, every rank's parameters and moments at the end.
struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<double>> params, m, v;
  int64_t kernel_calls = 0, translations = 0;
};

template <typename T>
Outcome train_on(const Plan& plan, const TrainerOptions& base, bool shadow, int steps) {
  Outcome out;
  out.params.resize(size_t(plan.num_ranks()));
  out.m.resize(size_t(plan.num_ranks()));
  out.v.resize(size_t(plan.num_ranks()));
  std::vector<int64_t> calls(size_t(plan.num_ranks()), 0), translations(calls);
  runtime::run_local_ranks(plan.num_ranks(), [&](Backend& inner) {
    const size_t r = size_t(inner.rank());
    std::unique_ptr<ShadowBackend> wrapped = shadow ? std::make_unique<ShadowBackend>(inner) : nullptr;
    Backend& backend = shadow ? static_cast<Backend&>(*wrapped) : inner;
    TrainerOptions options = base;
    if (shadow) {
      int64_t* counter = &calls[r];
      options.kernels_f32 = [counter](Backend& b) {
        return make_shadow_kernels<float>(dynamic_cast<ShadowBackend&>(b), counter);
      };
      options.kernels_f64 = [counter](Backend& b) {
        return make_shadow_kernels<double>(dynamic_cast<ShadowBackend&>(b), counter);
      };
    }
    {
      Trainer<T> trainer(plan, backend, options);
      const train::BatchSource batches = pseudo_text_batches(plan.workload.seq);
      for (int s = 0; s < steps; ++s) {
        const double loss = trainer.step(s, batches).loss;
        if (r == 0) out.losses.push_back(loss);
      }
      const std::vector<T> params = trainer.parameters_to_host();
      const train::AdamState<T> adam = trainer.adam_to_host();
      out.params[r].assign(params.begin(), params.end());
      out.m[r].assign(adam.m.begin(), adam.m.end());
      out.v[r].assign(adam.v.begin(), adam.v.end());
    }
    if (wrapped) translations[r] = wrapped->translations();
  });
  for (size_t r = 0; r < calls.size(); ++r) {
    out.kernel_calls += calls[r];
    out.translations += translations[r];
  }
  return out;
}

class OnShadowMemory : public ::testing::TestWithParam<Case> {};

TEST_P(OnShadowMemory, TrainsBitForBitAsOnHostMemory) {
  const Case c = GetParam();
  Workload w = tiny_decoder(32, 2, true);
  w.zero_stage = c.zero_stage;
  w.checkpointing = c.checkpointing;
  // The strategy's first feasible parameters of that shape (its knobs included).
  const int P = c.sequence_parallel * c.data_parallel;
  std::optional<StrategyParams> p;
  for (const StrategyParams& q : enumerate_params(c.kind, w, P))
    if (!p && q.sequence_parallel == c.sequence_parallel && q.data_parallel == c.data_parallel &&
        q.tensor_parallel == 1 && q.pipeline_parallel == 1 && check_feasible(c.kind, q, w, P).ok)
      p = q;
  ASSERT_TRUE(p.has_value());
  const Plan plan = tiny_plan(c.kind, *p, w);
  TrainerOptions options;
  options.positions = c.positions;
  constexpr int kSteps = 3;
  const Outcome host =
      c.fp64 ? train_on<double>(plan, options, false, kSteps) : train_on<float>(plan, options, false, kSteps);
  const Outcome shadow =
      c.fp64 ? train_on<double>(plan, options, true, kSteps) : train_on<float>(plan, options, true, kSteps);
  ASSERT_EQ(host.losses.size(), size_t(kSteps));
  EXPECT_EQ(shadow.losses, host.losses);
  EXPECT_NE(host.losses.front(), host.losses.back());  // the steps changed the weights
  for (int r = 0; r < plan.num_ranks(); ++r) {
    EXPECT_EQ(shadow.params[size_t(r)], host.params[size_t(r)]) << "rank " << r;
    EXPECT_EQ(shadow.m[size_t(r)], host.m[size_t(r)]) << "rank " << r;
    EXPECT_EQ(shadow.v[size_t(r)], host.v[size_t(r)]) << "rank " << r;
  }
  // Every kernel operand and every backend call went through the shadow's checks.
  EXPECT_GT(shadow.kernel_calls, int64_t(kSteps) * plan.num_ranks() * 40);
  EXPECT_GT(shadow.translations, shadow.kernel_calls);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OnShadowMemory,
    ::testing::Values(
        Case{"ring1", StrategyKind::Ring, 1, 1, 0, Checkpointing::None, Positions::Rotary, false},
        Case{"ring2_zero0", StrategyKind::Ring, 2, 1, 0, Checkpointing::None, Positions::Rotary, false},
        Case{"zigzag2x2_zero1_full", StrategyKind::Zigzag, 2, 2, 1, Checkpointing::Full, Positions::Rotary, false},
        Case{"ulysses2x2_zero2_selective_learned", StrategyKind::Ulysses, 2, 2, 2, Checkpointing::Selective,
             Positions::Learned, false},
        Case{"lss2x2_zero1_fp64", StrategyKind::Lss, 2, 2, 1, Checkpointing::None, Positions::Rotary, true},
        Case{"usp4_selective", StrategyKind::Usp, 4, 1, 0, Checkpointing::Selective, Positions::Rotary, false}),
    [](const auto& info) { return std::string(info.param.name); });

// The host copies a checkpoint uses, on shadow memory: what goes in comes back, and a step from
// restored state is the step the original state takes.
TEST(OnShadowMemory, HostCopiesOfParametersAndMomentsRoundTrip) {
  const Plan plan = tiny_plan(StrategyKind::Ring, {}, tiny_decoder(16, 1, false));
  runtime::run_local_ranks(1, [&](Backend& inner) {
    ShadowBackend shadow(inner);
    TrainerOptions options;
    int64_t calls = 0;
    options.kernels_f32 = [&calls](Backend& b) {
      return make_shadow_kernels<float>(dynamic_cast<ShadowBackend&>(b), &calls);
    };
    const train::BatchSource batches = pseudo_text_batches(plan.workload.seq);
    Trainer<float> a(plan, shadow, options), b(plan, shadow, options);
    options.seed = 9;
    Trainer<float> other(plan, shadow, options);
    a.step(0, batches);
    other.parameters_from_host(a.parameters_to_host());
    other.adam_from_host(a.adam_to_host());
    EXPECT_EQ(other.parameters_to_host(), a.parameters_to_host());
    EXPECT_EQ(other.adam_to_host().m, a.adam_to_host().m);
    EXPECT_EQ(other.adam_to_host().steps, 1);
    EXPECT_EQ(other.step(1, batches).loss, a.step(1, batches).loss);
    EXPECT_EQ(other.parameters_to_host(), a.parameters_to_host());
    EXPECT_NE(b.parameters_to_host(), a.parameters_to_host());  // b never stepped
    EXPECT_THROW(other.parameters_from_host(std::vector<float>(3)), InputError);
  });
}

}  // namespace
}  // namespace wallfacer::test
