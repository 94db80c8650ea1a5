// The cost and memory model against the closed forms of docs/algorithms.md §10 and §11,
// computed here from the workload and the link numbers, never from the code under test.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "cost_test_util.hpp"

namespace wallfacer {
namespace {

StrategyParams params_for(StrategyKind kind, const Workload& w, int ranks, int team = 1,
                          Placement placement = Placement::Default) {
  for (const StrategyParams& p : enumerate_params(kind, w, ranks))
    if (p.data_parallel == 1 && team_size(p) == team &&
        (kind != StrategyKind::WallFacer || placement_of(p) == placement))
      return p;
  ADD_FAILURE() << "no parameters for " << to_string(kind) << " on " << ranks << " ranks";
  return {};
}

// A calibration with one constant throughput for the test GPU, so a block's time is exact.
Calibration constant_throughput(double tflops) {
  return Calibration::parse(fmt::format(R"(keep_defaults: false
points:
  - {{gpu: TestGPU, op: forward, block_tokens: 1024, tflops: {0}}}
  - {{gpu: TestGPU, op: backward, block_tokens: 1024, tflops: {0}}}
)",
                                        tflops),
                            "constant.yaml");
}

class RingForward : public ::testing::TestWithParam<double> {};

// §10.4: with pass-KV double buffering the transfers chain at α + m/β each and block s computes
// once its K,V arrived, so T_fwd = T_block + (P-1)·max(T_block, α + m/β); compute-bound and
// communication-bound alike. Huge throughput gives the pure (P-1)(α + m/β).
TEST_P(RingForward, MatchesThePipelinedClosedForm) {
  const int P = 4;
  const Topology topology = testing::switch_nodes(1, P, 450, /*fast_compute=*/true);
  const Workload w = testing::mha_workload(4096, 8, 64, /*causal=*/false);
  const Plan plan = make_plan(StrategyKind::Ring, params_for(StrategyKind::Ring, w, P), w, topology, P);
  const CostModel model(topology, constant_throughput(GetParam()));
  const CostBreakdown cost = model.evaluate(plan, build_schedule(plan));

  const double n = double(w.seq) / P;
  const double alpha = 2 * 0.3e-6;                                 // GPU -> NVSwitch -> GPU
  const double m = 2 * w.batch * n * w.kv_heads * w.head_dim * 2;  // K and V, bf16
  const double transfer = alpha + m / 450e9;
  const double block = 4 * w.batch * n * n * w.heads * w.head_dim / (GetParam() * 1e12);
  const double expected = block + (P - 1) * std::max(block, transfer);
  EXPECT_NEAR(cost.forward_ms * 1e-3, expected, 1e-6 * expected);
  if (GetParam() > 1e6) {
    EXPECT_NEAR(cost.forward_ms * 1e-3, (P - 1) * transfer, 1e-6 * expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Throughputs, RingForward, ::testing::Values(100.0, 1000.0, 1e9));

// Paper accounting (Eqs. 4-7): per-GPU forward P2P volume, rounds and collectives.
// DeepSpeed-Ulysses computes each pass as one FlashAttention call over the whole sequence for its
// h / S heads. On a calibration whose rate grows with the block (100 TFLOP/s at 1K tokens, 400 at
// 8K) that call runs at the 8K rate, so the plan prices as on a constant 400 TFLOP/s: a pass cut
// into smaller blocks would be priced slower.
TEST(ClosedForms, UlyssesPassIsOneCallAtTheWholeSequenceRate) {
  const int S = 4;
  const Topology topology = testing::switch_nodes(1, S);
  const Workload w = testing::mha_workload(8192, 8, 64, /*causal=*/false);
  const Plan plan = make_plan(StrategyKind::Ulysses, params_for(StrategyKind::Ulysses, w, S), w, topology, S);
  const Schedule schedule = build_schedule(plan);
  const CostModel growing(topology, Calibration::parse(R"(keep_defaults: false
points:
  - {gpu: TestGPU, op: forward, block_tokens: 1024, tflops: 100}
  - {gpu: TestGPU, op: forward, block_tokens: 8192, tflops: 400}
  - {gpu: TestGPU, op: backward, block_tokens: 1024, tflops: 100}
  - {gpu: TestGPU, op: backward, block_tokens: 8192, tflops: 400}
)",
                                                       "growing.yaml"));
  const CostBreakdown cost = growing.evaluate(plan, schedule);
  const CostBreakdown at_400 = CostModel(topology, constant_throughput(400)).evaluate(plan, schedule);
  EXPECT_NEAR(cost.forward_ms, at_400.forward_ms, 1e-9 * at_400.forward_ms);
  EXPECT_NEAR(cost.backward_ms, at_400.backward_ms, 1e-9 * at_400.backward_ms);
  // The call itself: 4·N²·(h/S)·d FLOPs forward, 2.5 times as many backward, at 400 TFLOP/s.
  const double call = 4.0 * w.batch * double(w.seq) * double(w.seq) * (w.heads / S) * w.head_dim / 400e12;
  EXPECT_GE(cost.forward_ms * 1e-3, call);
  EXPECT_GE(cost.backward_ms * 1e-3, 2.5 * call);
}

TEST(ClosedForms, RingPointToPointVolumeAndRounds) {
  const int P = 8;
  const Topology topology = testing::switch_nodes(1, P);
  const Workload w = testing::mha_workload(8192);
  const Plan plan = make_plan(StrategyKind::Ring, params_for(StrategyKind::Ring, w, P), w, topology, P);
  const CommVolume v = comm_volume(build_schedule(plan));
  const double BNHs = double(w.batch) * w.seq * w.hidden * 2;
  // 2BNH over P rounds, one of which is the rank's own block: P-1 transfers.
  EXPECT_EQ(v.p2p_forward, int64_t(2 * BNHs * (P - 1) / P));
  EXPECT_EQ(v.messages_forward, P - 1);
  EXPECT_EQ(v.collective_forward, 0);
}

TEST(ClosedForms, WallFacerPointToPointCollectivesAndRounds) {
  const int P = 16;
  const Topology topology = testing::switch_nodes(2, 8);
  const Workload w = testing::mha_workload(16384);
  const double BNHs = double(w.batch) * w.seq * w.hidden * 2;
  for (int C : {2, 4}) {
    const Plan plan = make_plan(StrategyKind::WallFacer,
                                params_for(StrategyKind::WallFacer, w, P, C, Placement::CollectIntra), w, topology, P);
    const CommVolume v = comm_volume(build_schedule(plan));
    EXPECT_EQ(v.p2p_forward, int64_t(2 * BNHs / C)) << "C=" << C;
    EXPECT_EQ(v.messages_forward, P / (C * C)) << "C=" << C;
    // All-gather Q, K, V and reduce-scatter O: 4BNH(C-1)/P, plus the fp32 lse rows that travel with O.
    const double lse = (C - 1) * double(w.batch) * (w.seq / P) * w.heads * 4;
    EXPECT_EQ(v.collective_forward, int64_t(4 * BNHs * (C - 1) / P + lse)) << "C=" << C;
  }
}

// WallFacer Eq. 8-10: ring peak M + (Y+4)A, WallFacer M + (Y+3C+1)A.
TEST(ClosedForms, PaperMemoryModel) {
  const int P = 16;
  const Topology topology = testing::switch_nodes(2, 8);
  Workload w = testing::mha_workload(16384);
  w.zero_stage = 3;
  const double A = double(w.batch) * w.seq * w.hidden / P * 2;
  const double M = 16.0 * double(w.parameter_count()) / P;
  const double Y = w.layers;

  const Plan ring = make_plan(StrategyKind::Ring, params_for(StrategyKind::Ring, w, P), w, topology, P);
  const PaperMemoryTerms r = paper_memory_terms(ring, build_schedule(ring));
  EXPECT_DOUBLE_EQ(r.activation_bytes, A);
  EXPECT_DOUBLE_EQ(r.model_state_bytes, M);
  EXPECT_NEAR(r.peak_bytes(), M + (Y + 4) * A, 1e-9 * M);

  for (int C : {2, 4}) {
    const Plan wf = make_plan(StrategyKind::WallFacer,
                              params_for(StrategyKind::WallFacer, w, P, C, Placement::CollectIntra), w, topology, P);
    const PaperMemoryTerms t = paper_memory_terms(wf, build_schedule(wf));
    EXPECT_NEAR(t.peak_bytes(), M + (Y + 3 * C + 1) * A, 1e-9 * M) << "C=" << C;
  }
}

TEST(ClosedForms, ModelStateShardsByZeroStage) {
  Workload w = testing::mha_workload(1024);
  const double phi = double(w.parameter_count());
  const int P = 8;
  const double expected[] = {16 * phi, 4 * phi + 12 * phi / P, 2 * phi + 14 * phi / P, 16 * phi / P};
  for (int stage = 0; stage <= 3; ++stage) {
    w.zero_stage = stage;
    EXPECT_DOUBLE_EQ(model_state_bytes(w, P), expected[stage]) << "stage " << stage;
  }
}

TEST(ClosedForms, MfuFollowsTheFlopConvention) {
  const int P = 4;
  const Topology topology = testing::switch_nodes(1, P);
  const Workload w = testing::mha_workload(4096, 8, 64, /*causal=*/true);
  const Plan plan = make_plan(StrategyKind::Zigzag, params_for(StrategyKind::Zigzag, w, P), w, topology, P);
  const CostBreakdown cost = CostModel(topology, Calibration::defaults()).evaluate(plan, build_schedule(plan));
  const double flops = 3.5 * 4 * w.batch * double(w.seq) * w.seq * w.heads * w.head_dim / 2;
  EXPECT_DOUBLE_EQ(cost.attention_flops, flops);
  EXPECT_NEAR(cost.mfu, flops / (cost.step_ms * 1e-3 * P * 989.4e12), 1e-12);
  EXPECT_GT(cost.mfu, 0);
  EXPECT_LT(cost.mfu, 1);
}

// A contiguous causal ring is imbalanced: the last rank holds the latest tokens and the most
// work. Timing a small sample must still find it.
TEST(Sampling, FewTimedRanksStillSeeTheMostLoadedRank) {
  const int P = 32;
  const Topology topology = testing::switch_nodes(4, 8);
  const Workload w = testing::mha_workload(32768, 8, 64, /*causal=*/true);
  const Plan plan = make_plan(StrategyKind::Ring, params_for(StrategyKind::Ring, w, P), w, topology, P);
  // At full speed: with compute slowed by communication a sample's receives wait as its own ranks'
  // sends go, not as the real senders', and the slowdown differs by a few hundredths of a percent.
  CostOptions every;
  every.max_timed_ranks = 0;
  every.max_timed_ops = 0;
  every.comm_slowdown = false;
  const CostBreakdown all = CostModel(topology, Calibration::defaults(), every).evaluate(plan);
  CostOptions few;
  few.max_timed_ranks = 4;
  few.comm_slowdown = false;
  const CostModel sampled(topology, Calibration::defaults(), few);
  EXPECT_EQ(sampled.timed_ranks(plan).size(), 4u);
  const CostBreakdown some = sampled.evaluate(plan);
  EXPECT_DOUBLE_EQ(some.step_ms, all.step_ms);
  EXPECT_DOUBLE_EQ(some.compute_ms, all.compute_ms);
  // And the imbalance is real: the zigzag layout of the same work is faster.
  const Plan zigzag = make_plan(StrategyKind::Zigzag, params_for(StrategyKind::Zigzag, w, P), w, topology, P);
  EXPECT_LT(sampled.evaluate(zigzag).compute_ms, 0.75 * all.compute_ms);
}

}  // namespace
}  // namespace wallfacer
