// What `wallfacer train` checks before it allocates (train_memory.hpp): the peak that a run
// computing nothing measures is the real run's. For every strategy, ZeRO stage, checkpointing mode
// and precision, a real run of two steps on the threads backend, its memory counted through a
// shadow backend, peaks within the transfers in flight (the margin the measurement adds) of the
// measured peak, and never above the bound; the largest GEMM and the rows match the model's shapes.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/runtime/measuring_backend.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/train/train_memory.hpp>
#include "train/shadow_backend.hpp"
#include "train/train_fixtures.hpp"

namespace wallfacer::test {
namespace {

using runtime::Backend;
using train::Trainer;
using train::TrainerOptions;

struct Case {
  const char* name;
  StrategyKind kind;
  int sequence_parallel, data_parallel, zero_stage;
  Checkpointing checkpointing;
  bool fp64;
};

Plan case_plan(const Case& c) {
  Workload w = tiny_decoder(32, 2, true);
  w.zero_stage = c.zero_stage;
  w.checkpointing = c.checkpointing;
  return first_feasible_plan(c.kind, c.sequence_parallel, c.data_parallel, w);
}

// Every rank's peak bytes of a real run of two steps, counted by a shadow backend.
template <typename T>
std::vector<int64_t> real_peaks(const Plan& plan) {
  std::vector<int64_t> peaks(size_t(plan.num_ranks()), 0);
  runtime::run_local_ranks(plan.num_ranks(), [&](Backend& inner) {
    ShadowBackend shadow(inner);
    TrainerOptions options;
    int64_t calls = 0;
    options.kernels_f32 = [&calls](Backend& b) {
      return make_shadow_kernels<float>(dynamic_cast<ShadowBackend&>(b), &calls);
    };
    options.kernels_f64 = [&calls](Backend& b) {
      return make_shadow_kernels<double>(dynamic_cast<ShadowBackend&>(b), &calls);
    };
    {
      Trainer<T> trainer(plan, shadow, options);
      const train::BatchSource batches = pseudo_text_batches(plan.workload.seq);
      trainer.step(0, batches);
      trainer.step(1, batches);
    }
    peaks[size_t(inner.rank())] = shadow.peak_bytes();
  });
  return peaks;
}

class TrainMemoryCases : public ::testing::TestWithParam<Case> {};

TEST_P(TrainMemoryCases, MeasuredPeakBoundsTheRealRun) {
  const Case c = GetParam();
  const Plan plan = case_plan(c);
  const train::TrainMemory m = train::measure_train_memory(plan, c.fp64, true);
  const std::vector<int64_t> real = c.fp64 ? real_peaks<double>(plan) : real_peaks<float>(plan);
  ASSERT_EQ(m.ranks.size(), real.size());
  const train::ModelShape shape =
      train::model_shape(plan.workload, train::Positions::Rotary, train::kDefaultRotaryBase);
  const int64_t rows = plan.workload.seq * plan.workload.batch / plan.num_ranks();
  for (size_t r = 0; r < real.size(); ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    const train::RankTrainMemory& rank = m.ranks[r];
    // What both runs hold apart from message blocks is the same at every point of the compute
    // stream (after the first step every persistent array exists); blocks in flight differ by at
    // most the margin, either way.
    const int64_t margin = rank.backend_peak - rank.measured_peak;
    EXPECT_GE(margin, 0);
    EXPECT_GE(rank.backend_peak, real[r]);
    EXPECT_LE(rank.measured_peak - margin, real[r]);
    EXPECT_GT(rank.measured_peak, 0);
    EXPECT_EQ(rank.rows, rows);
    // The LM head's GEMMs are the largest (vocab 256 > MLP 64): its forward reads rows x hidden and
    // hidden x vocab, its data gradient rows x vocab and vocab x hidden, its weight gradient
    // hidden x rows and rows x vocab.
    const int64_t h = shape.hidden, v = shape.vocab;
    EXPECT_EQ(rank.gemm_operands, std::max({rows * h + h * v, rows * v + v * h, h * rows + rows * v}));
  }
  // Parameters: the model's, whose fp32 or fp64 copy, gradient and moments a rank of ZeRO 0 holds.
  EXPECT_EQ(m.element_bytes, c.fp64 ? 8 : 4);
  if (c.zero_stage == 0) {
    EXPECT_GE(m.ranks[0].measured_peak, 4 * m.parameters * m.element_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainMemoryCases,
    ::testing::Values(Case{"ring1", StrategyKind::Ring, 1, 1, 0, Checkpointing::None, false},
                      Case{"zigzag2x2_zero1_full", StrategyKind::Zigzag, 2, 2, 1, Checkpointing::Full, false},
                      Case{"ulysses2x2_zero2_selective", StrategyKind::Ulysses, 2, 2, 2, Checkpointing::Selective,
                           false},
                      Case{"usp4_zero0", StrategyKind::Usp, 4, 1, 0, Checkpointing::None, false},
                      Case{"wallfacer4_zero0_full_fp64", StrategyKind::WallFacer, 4, 1, 0, Checkpointing::Full, true},
                      Case{"lss2x2_zero1", StrategyKind::Lss, 2, 2, 1, Checkpointing::None, false}),
    [](const auto& info) { return std::string(info.param.name); });

// The measuring backend's memory is bookkeeping: a block released twice, or one it never handed
// out, is refused; what is live and the peak follow allocations and releases.
TEST(MeasuringBackend, CountsLiveAndPeakBytes) {
  runtime::MeasuringBackend b(0, 1, true);
  void* x = b.allocate(1000);
  void* y = b.allocate(24);
  EXPECT_NE(x, y);
  EXPECT_EQ(b.live_bytes(), 1024);
  b.release(x);
  EXPECT_EQ(b.live_bytes(), 24);
  EXPECT_EQ(b.peak_bytes(), 1024);
  EXPECT_THROW(b.release(x), ScheduleError);
  int host = 7;
  EXPECT_THROW(b.release(&host), ScheduleError);
  b.isend(0, 1, y, 300);
  b.irecv(0, 1, y, 200);
  b.iallreduce(0, y, 10, runtime::ElemType::F64);
  EXPECT_EQ(b.in_flight_bytes(), 300 + 200 + 80);
  EXPECT_EQ(b.largest_reduction_bytes(), 80);
}

}  // namespace
}  // namespace wallfacer::test
