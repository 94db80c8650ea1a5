// Calibration: sourced defaults, log2 interpolation, fallbacks and the YAML override's errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <yaml-cpp/yaml.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/cost/calibration.hpp>
#include <wallfacer/cost/compute_time.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/topology/topology.hpp>
#include "common/text_mutations.hpp"

namespace wallfacer {
namespace {

constexpr double kH100Peak = 989.4;

TEST(Calibration, DefaultsCarryTheSourcedLargeBlockFigures) {
  const Calibration c = Calibration::defaults();
  // FlashAttention-3 on H100, BF16, head dim 128: 648 TF/s forward at 16K tokens, 616 with the
  // causal mask (arXiv 2407.08608, Figure 5c/5d); the backward at FlashAttention-3's measured
  // backward/forward ratio at 8K (553.9/659.1, 531.6/630.0).
  EXPECT_DOUBLE_EQ(c.tflops("H100-SXM5-80GB", KernelOp::AttnFwd, DType::BF16, 128, 16384, 16384, kH100Peak), 648.0);
  EXPECT_NEAR(c.tflops("H100-SXM5-80GB", KernelOp::AttnBwd, DType::BF16, 128, 16384, 16384, kH100Peak),
              648.0 * 553.9 / 659.1, 1e-9);
  EXPECT_DOUBLE_EQ(c.curve("H100-SXM5-80GB", KernelOp::AttnFwd, DType::BF16, 128, kH100Peak, true).tflops(8192, 8192),
                   602.0);
  EXPECT_NEAR(c.curve("H100-SXM5-80GB", KernelOp::AttnBwd, DType::BF16, 128, kH100Peak, true).tflops(8192, 8192),
              602.0 * 531.6 / 630.0, 1e-9);
  // FlashAttention-2 on A100 with the causal mask: the full-mask curve x 189/203 at 16K
  // (arXiv 2307.08691, Figure 4d over 4b).
  EXPECT_NEAR(c.curve("A100-SXM4-80GB", KernelOp::AttnFwd, DType::BF16, 128, 312, true).tflops(16384, 16384),
              228.0 * 189 / 203, 1e-9);
  // FlashAttention-2 on A100: 73 % of 312 TF/s forward.
  EXPECT_NEAR(c.tflops("A100-SXM4-80GB", KernelOp::AttnFwd, DType::BF16, 128, 16384, 16384, 312), 0.73 * 312, 0.5);
  for (const auto& p : c.points())
    EXPECT_FALSE(p.source.empty()) << p.gpu;
}

TEST(Calibration, SmallBlocksRunBelowLargeOnes) {
  const Calibration c = Calibration::defaults();
  for (KernelOp op : {KernelOp::AttnFwd, KernelOp::AttnBwd}) {
    double previous = 0;
    for (int64_t tokens : {64, 128, 512, 2048, 16384, 65536}) {
      const double t = c.tflops("H100", op, DType::BF16, 128, tokens, tokens, kH100Peak);
      EXPECT_GE(t, previous) << tokens;
      previous = t;
    }
  }
}

TEST(Calibration, InterpolatesLinearlyInLog2Tokens) {
  const std::string text = R"(keep_defaults: false
points:
  - {gpu: X1, op: forward, dtype: bf16, head_dim: 128, block_tokens: 1024, tflops: 100}
  - {gpu: X1, op: forward, dtype: bf16, head_dim: 128, block_tokens: 16384, tflops: 300}
)";
  const Calibration c = Calibration::parse(text, "cal.yaml");
  // 4096 is 2/4 of the way from 2^10 to 2^14 in log2.
  EXPECT_NEAR(c.tflops("X1", KernelOp::AttnFwd, DType::BF16, 128, 4096, 4096, 1000), 200.0, 1e-9);
  // 2048 x 8192 sits at its geometric mean, 4096.
  EXPECT_NEAR(c.tflops("X1", KernelOp::AttnFwd, DType::BF16, 128, 2048, 8192, 1000), 200.0, 1e-9);
  // Clamped beyond the ends and at the peak.
  EXPECT_DOUBLE_EQ(c.tflops("X1", KernelOp::AttnFwd, DType::BF16, 128, 64, 64, 1000), 100.0);
  EXPECT_DOUBLE_EQ(c.tflops("X1", KernelOp::AttnFwd, DType::BF16, 128, 1 << 20, 1 << 20, 1000), 300.0);
  EXPECT_DOUBLE_EQ(c.tflops("X1", KernelOp::AttnFwd, DType::BF16, 128, 1 << 20, 1 << 20, 250), 250.0);
}

TEST(Calibration, FallsBackToEfficiencyTimesPeak) {
  const Calibration c = Calibration::parse("fallback_efficiency: 0.4\n", "cal.yaml");
  EXPECT_DOUBLE_EQ(c.tflops("MI300X", KernelOp::AttnFwd, DType::BF16, 128, 4096, 4096, 1000), 400.0);
  EXPECT_TRUE(c.curve("MI300X", KernelOp::AttnBwd, DType::BF16, 128, 1000).is_fallback());
  // FP32 has no calibrated point either.
  EXPECT_DOUBLE_EQ(c.tflops("H100", KernelOp::AttnFwd, DType::FP32, 128, 4096, 4096, 100), 40.0);
}

TEST(Calibration, SixteenBitTypesShareACurveAndNearestHeadDimIsUsed) {
  const Calibration c = Calibration::defaults();
  const double bf16 = c.tflops("H100", KernelOp::AttnFwd, DType::BF16, 128, 4096, 4096, kH100Peak);
  EXPECT_DOUBLE_EQ(c.tflops("H100", KernelOp::AttnFwd, DType::FP16, 128, 4096, 4096, kH100Peak), bf16);
  EXPECT_DOUBLE_EQ(c.tflops("H100", KernelOp::AttnFwd, DType::BF16, 64, 4096, 4096, kH100Peak), bf16);
}

TEST(Calibration, FileCurvesReplaceMatchingDefaultsOnly) {
  const std::string text = R"(points:
  - {gpu: H100, op: forward, block_tokens: 4096, tflops: 123, source: "measured"}
)";
  const Calibration c = Calibration::parse(text, "cal.yaml");
  EXPECT_DOUBLE_EQ(c.tflops("H100", KernelOp::AttnFwd, DType::BF16, 128, 16384, 16384, kH100Peak), 123.0);
  const Calibration d = Calibration::defaults();
  EXPECT_DOUBLE_EQ(c.tflops("H100", KernelOp::AttnBwd, DType::BF16, 128, 16384, 16384, kH100Peak),
                   d.tflops("H100", KernelOp::AttnBwd, DType::BF16, 128, 16384, 16384, kH100Peak));
}

TEST(Calibration, FileThatKeepsDefaultsKeepsTheGemmCeilings) {
  // A file with only an attention curve leaves the GEMM ceilings as built in, fp8 ones included
  // (0.71 of the fp8 peak on H100, the MAMF table); keep_defaults: false drops them all.
  const std::string points = "points:\n  - {gpu: H100, op: forward, block_tokens: 4096, tflops: 123}\n";
  const Calibration d = Calibration::defaults();
  const Calibration kept = Calibration::parse(points, "cal.yaml");
  const int64_t n = 8192;
  for (bool fp8 : {false, true}) {
    bool fallback = true;
    EXPECT_DOUBLE_EQ(kept.gemm_efficiency("H100-SXM5-80GB", n, n, n, &fallback, fp8),
                     d.gemm_efficiency("H100-SXM5-80GB", n, n, n, nullptr, fp8))
        << fp8;
    EXPECT_FALSE(fallback) << fp8;
  }
  EXPECT_DOUBLE_EQ(kept.gemm_efficiency("H100-SXM5-80GB", n, n, n, nullptr, true), 0.71);
  const Calibration dropped = Calibration::parse("keep_defaults: false\n" + points, "cal.yaml");
  bool fallback = false;
  dropped.gemm_efficiency("H100-SXM5-80GB", n, n, n, &fallback, true);
  EXPECT_TRUE(fallback);
}

// A 2 x 2 x 2 grid of measured rates: a shape on the grid gets its own rate, one between grid
// sides the trilinear mean in log2 of each side (a closed form here), one beyond clamps.
TEST(Calibration, GemmShapeGridInterpolatesInLog2OfEachSide) {
  std::string text = "gemm_shapes:\n";
  auto rate = [](int64_t m, int64_t n, int64_t k) { return 0.001 * double(m / 64 + 2 * (n / 64) + 4 * (k / 64)); };
  for (int64_t m : {64, 256})
    for (int64_t n : {64, 256})
      for (int64_t k : {64, 256})
        text += "  - {gpu: CPU-X, dtype: fp32, m: " + std::to_string(m) + ", n: " + std::to_string(n) +
                ", k: " + std::to_string(k) + ", tflops: " + std::to_string(rate(m, n, k)) + "}\n";
  const Calibration c = Calibration::parse(text, "cal.yaml");
  EXPECT_TRUE(c.has_gemm_shapes("CPU-X-core", DType::FP32));
  EXPECT_FALSE(c.has_gemm_shapes("CPU-X-core", DType::BF16));
  EXPECT_FALSE(c.has_gemm_shapes("H100", DType::FP32));
  EXPECT_NEAR(c.gemm_shape_tflops("CPU-X-core", DType::FP32, 256, 64, 256), rate(256, 64, 256), 1e-12);
  // m = 128 is halfway between 64 and 256 in log2: the mean of the two m faces.
  EXPECT_NEAR(c.gemm_shape_tflops("CPU-X-core", DType::FP32, 128, 64, 64), 0.5 * (rate(64, 64, 64) + rate(256, 64, 64)),
              1e-12);
  const double centre = c.gemm_shape_tflops("CPU-X-core", DType::FP32, 128, 128, 128);
  double mean = 0;
  for (int64_t m : {64, 256})
    for (int64_t n : {64, 256})
      for (int64_t k : {64, 256})
        mean += rate(m, n, k) / 8;
  EXPECT_NEAR(centre, mean, 1e-12);
  EXPECT_NEAR(c.gemm_shape_tflops("CPU-X-core", DType::FP32, 4096, 16, 4096), rate(256, 64, 256), 1e-12);
  EXPECT_EQ(c.gemm_shape_tflops("H100", DType::FP32, 128, 128, 128), 0.0);
}

TEST(Calibration, CausalPointsPriceCausalBlocksOnly) {
  const std::string text = R"(points:
  - {gpu: CPU-X, op: forward, dtype: fp32, head_dim: 16, block_tokens: 512, tflops: 0.02}
  - {gpu: CPU-X, op: forward, dtype: fp32, head_dim: 16, block_tokens: 512, causal: true, tflops: 0.01}
)";
  const Calibration c = Calibration::parse(text, "cal.yaml");
  EXPECT_DOUBLE_EQ(c.curve("CPU-X", KernelOp::AttnFwd, DType::FP32, 16, 1.0).tflops(512, 512), 0.02);
  EXPECT_DOUBLE_EQ(c.curve("CPU-X", KernelOp::AttnFwd, DType::FP32, 16, 1.0, true).tflops(512, 512), 0.01);
  // No causal backward points: causal backward blocks use the ordinary curve (here the fallback).
  EXPECT_EQ(c.curve("CPU-X", KernelOp::AttnBwd, DType::FP32, 16, 1.0, true).is_fallback(),
            c.curve("CPU-X", KernelOp::AttnBwd, DType::FP32, 16, 1.0).is_fallback());
  // V100 has no causal points: its causal curve is its ordinary one.
  EXPECT_DOUBLE_EQ(c.curve("V100", KernelOp::AttnFwd, DType::FP16, 128, 125, true).tflops(4096, 4096),
                   c.curve("V100", KernelOp::AttnFwd, DType::FP16, 128, 125).tflops(4096, 4096));
  // A causal diagonal block runs below a full block of its size on the default GPUs.
  for (const char* gpu : {"A100", "H100", "H200"})
    for (KernelOp op : {KernelOp::AttnFwd, KernelOp::AttnBwd})
      for (int64_t tokens : {128, 512, 2048, 16384, 65536})
        EXPECT_LT(c.curve(gpu, op, DType::BF16, 128, 1000, true).tflops(tokens, tokens),
                  c.curve(gpu, op, DType::BF16, 128, 1000).tflops(tokens, tokens))
            << gpu << " " << tokens;
}

// A file that calibrates a GPU's kernel without causal points drops the defaults' causal curves of
// that GPU and op: causal blocks then run on the file's own curve, not on the default kernel's.
TEST(Calibration, AFileKernelWithoutCausalPointsPricesCausalBlocksOnItsOwnCurve) {
  const std::string text = R"(points:
  - {gpu: H100, op: forward, dtype: bf16, head_dim: 128, block_tokens: 4096, tflops: 300}
)";
  const Calibration c = Calibration::parse(text, "cal.yaml");
  EXPECT_DOUBLE_EQ(c.curve("H100", KernelOp::AttnFwd, DType::BF16, 128, kH100Peak, true).tflops(4096, 4096), 300.0);
  // The backward, not in the file, keeps both default curves, causal included.
  const Calibration d = Calibration::defaults();
  EXPECT_DOUBLE_EQ(c.curve("H100", KernelOp::AttnBwd, DType::BF16, 128, kH100Peak, true).tflops(4096, 4096),
                   d.curve("H100", KernelOp::AttnBwd, DType::BF16, 128, kH100Peak, true).tflops(4096, 4096));
  EXPECT_LT(d.curve("H100", KernelOp::AttnBwd, DType::BF16, 128, kH100Peak, true).tflops(4096, 4096),
            d.curve("H100", KernelOp::AttnBwd, DType::BF16, 128, kH100Peak).tflops(4096, 4096));
  // Other GPUs keep theirs.
  EXPECT_DOUBLE_EQ(c.curve("A100", KernelOp::AttnFwd, DType::BF16, 128, 312, true).tflops(4096, 4096),
                   d.curve("A100", KernelOp::AttnFwd, DType::BF16, 128, 312, true).tflops(4096, 4096));
}

// A GPU without bf16 tensor cores (a V100) prices a bf16 workload at its fp16 peak, and the
// warning about its missing calibration names that peak, not a bf16 one it does not have.
TEST(Calibration, AGapNamesThePeakItPricesAt) {
  const Topology v100 = Topology::load("dgx-1v", 1);
  ASSERT_LE(v100.gpu().peak_bf16_tflops, 0);
  Workload w = load_workload("llama-3-8b");
  ASSERT_EQ(w.dtype, DType::BF16);
  const std::string gap = calibration_gap(Calibration::defaults(), v100.gpu(), w, true);
  EXPECT_NE(gap.find(fmt::format("the {:.0f} TFLOP/s fp16 peak", v100.gpu().peak_fp16_tflops)), std::string::npos)
      << gap;
  EXPECT_EQ(gap.find("bf16 peak"), std::string::npos) << gap;
  w.dtype = DType::FP16;
  EXPECT_EQ(calibration_gap(Calibration::defaults(), v100.gpu(), w, true), gap);
}

// The CPU topology and its measured calibration (docs/calibration.md, "A CPU"): fp32 work is priced
// against the fp32 peak, a GEMM on the grid at the rate the file gives for its shape (read here
// with yaml-cpp, apart from the loader), 16-bit workloads refused, and nothing falls back.
TEST(Calibration, CpuTopologyPricesGemmsFromItsMeasuredGrid) {
  const std::string dir = WALLFACER_SOURCE_DIR;
  const Topology cpu = Topology::load(dir + "/topologies/cpu-epyc-2core.yaml");
  const Calibration c = Calibration::load(dir + "/bench/cpu-epyc-2core-calibration.yaml");
  EXPECT_EQ(cpu.num_gpus(), 2);
  EXPECT_DOUBLE_EQ(kernel_peak_tflops(cpu.gpu(), DType::FP32), cpu.gpu().peak_fp32_tflops);
  EXPECT_GT(cpu.gpu().peak_fp32_tflops, 0);
  EXPECT_NE(dtype_issue(cpu.gpu(), DType::BF16).find("--dtype fp32"), std::string::npos);
  EXPECT_NE(dtype_issue(cpu.gpu(), DType::FP16).find("--dtype fp32"), std::string::npos);
  EXPECT_EQ(dtype_issue(cpu.gpu(), DType::FP32), "");
  Workload w = load_workload("gpt-tiny");
  EXPECT_EQ(calibration_gap(c, cpu.gpu(), w, true), "");
  double rate = 0;
  for (const YAML::Node& e : YAML::LoadFile(dir + "/bench/cpu-epyc-2core-calibration.yaml")["gemm_shapes"])
    if (e["m"].as<int>() == 2048 && e["n"].as<int>() == 64 && e["k"].as<int>() == 64) rate = e["tflops"].as<double>();
  ASSERT_GT(rate, 0);
  ComputeTimer timer(cpu.gpu(), c, w);
  Op gemm;
  gemm.kind = OpKind::Gemm;
  gemm.gemm[0] = 2048;
  gemm.gemm[1] = 64;
  gemm.gemm[2] = 64;
  gemm.flops = 2.0 * 2048 * 64 * 64;
  EXPECT_NEAR(timer.seconds(gemm, TokenSetPool{}), gemm.flops / (rate * 1e12), 1e-15);
  EXPECT_FALSE(timer.used_gemm_fallback());
}

// Measured pointwise rates: interpolated in log2(bytes) per op and pass, clamped at the ends, the
// longest GPU prefix winning; the timer prices a backward op at its backward rate, a
// recomputation at the forward one, and ops without points at the HBM bandwidth.
TEST(Calibration, PointwiseRatesPriceMemoryBoundOpsByOpAndPass) {
  const std::string text = R"(pointwise:
  - {gpu: CPU-X, op: norm, bytes: 1024, GBps: 2}
  - {gpu: CPU-X, op: norm, bytes: 4096, GBps: 6}
  - {gpu: CPU-X, op: norm, pass: backward, bytes: 1024, GBps: 1}
  - {gpu: CPU-X-core, dtype: fp32, op: activation, pass: forward, bytes: 1000, GBps: 0.5}
  - {gpu: CPU-X, op: activation, bytes: 1000, GBps: 9}
)";
  const Calibration c = Calibration::parse(text, "cal.yaml");
  EXPECT_TRUE(c.has_pointwise("CPU-X-core", DType::FP32));
  EXPECT_FALSE(c.has_pointwise("CPU-X-core", DType::BF16));
  EXPECT_FALSE(c.has_pointwise("H100", DType::FP32));
  EXPECT_DOUBLE_EQ(c.pointwise_GBps("CPU-X-core", DType::FP32, StepOp::Norm, false, 1024), 2);
  EXPECT_DOUBLE_EQ(c.pointwise_GBps("CPU-X-core", DType::FP32, StepOp::Norm, false, 2048), 4);  // log2 midpoint
  EXPECT_DOUBLE_EQ(c.pointwise_GBps("CPU-X-core", DType::FP32, StepOp::Norm, false, 64), 2);
  EXPECT_DOUBLE_EQ(c.pointwise_GBps("CPU-X-core", DType::FP32, StepOp::Norm, false, 1 << 20), 6);
  EXPECT_DOUBLE_EQ(c.pointwise_GBps("CPU-X-core", DType::FP32, StepOp::Norm, true, 1 << 20), 1);
  EXPECT_DOUBLE_EQ(c.pointwise_GBps("CPU-X-core", DType::FP32, StepOp::Activation, false, 1000), 0.5);
  EXPECT_DOUBLE_EQ(c.pointwise_GBps("CPU-X-9", DType::FP32, StepOp::Activation, false, 1000), 9);
  EXPECT_EQ(c.pointwise_GBps("CPU-X-core", DType::FP32, StepOp::Loss, false, 1000), 0.0);

  GpuModel gpu;
  gpu.name = "CPU-X-core";
  gpu.hbm_GBps = 100;
  gpu.peak_fp32_tflops = 1;
  Workload w = load_workload("gpt-tiny");
  w.dtype = DType::FP32;
  ComputeTimer timer(gpu, c, w);
  Op op;
  op.kind = OpKind::Pointwise;
  op.label = StepOp::Norm;
  op.bytes = 2048;
  EXPECT_NEAR(timer.seconds(op, TokenSetPool{}), 2048 / 4e9, 1e-18);
  op.phase = Phase::Backward;
  EXPECT_NEAR(timer.seconds(op, TokenSetPool{}), 2048 / 1e9, 1e-18);
  op.flags = kOpRecompute;
  EXPECT_NEAR(timer.seconds(op, TokenSetPool{}), 2048 / 4e9, 1e-18);
  op.label = StepOp::Loss;  // no points: the HBM bandwidth times the default efficiency
  EXPECT_NEAR(timer.seconds(op, TokenSetPool{}), 2048 / (100e9 * c.hbm_efficiency(gpu.name)), 1e-18);
}

struct BadFile {
  std::string text;
  std::string expected;  // substring of what()
};

class CalibrationErrors : public ::testing::TestWithParam<BadFile> {};

TEST_P(CalibrationErrors, NameFileAndLine) {
  try {
    Calibration::parse(GetParam().text, "cal.yaml");
    FAIL() << "accepted: " << GetParam().text;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().expected), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Files, CalibrationErrors,
    ::testing::Values(
        BadFile{"points:\n  - {gpu: H100, op: forward, block_tokens: 512, tflops: -3}\n", "cal.yaml:2: error"},
        BadFile{"points:\n  - {gpu: H100, op: sideways, block_tokens: 512, tflops: 3}\n",
                "cal.yaml:2: error: unknown op"},
        BadFile{"points:\n  - {gpu: H100, op: forward, dtype: int4, block_tokens: 512, tflops: 3}\n", "cal.yaml:2"},
        BadFile{"points:\n  - {gpu: H100, op: forward, block_tokens: 0, tflops: 3}\n", "block_tokens"},
        BadFile{"points:\n  - {gpu: H100, op: forward, tflops: 3}\n", "cal.yaml:2: error: missing required field"},
        BadFile{"fallback_efficiency: 0.5\nbogus: 1\n", "cal.yaml:2: error: unknown key 'bogus'"},
        BadFile{"fallback_efficiency: 1.5\n", "cal.yaml:1: error"},
        BadFile{"points:\n  - {gpu: H100, op: forward, block_tokens: 512, tflops: 3}\n"
                "  - {gpu: H100, op: forward, block_tokens: 512, tflops: 4}\n",
                "cal.yaml:3: error: duplicate"},
        BadFile{"points:\n  - {gpu: H100, [op]: forward, block_tokens: 512, tflops: 3}\n",
                "cal.yaml:2: error: a key must be a plain name, not a list"},
        BadFile{"points: [1, 2\n", "cal.yaml:"},
        BadFile{"gemm_shapes:\n  - {gpu: C, m: 64, n: 64, k: 64, tflops: 1}\n  - {gpu: C, m: 128, n: 128, k: 64, "
                "tflops: 1}\n",
                "do not form a grid"},
        BadFile{"gemm_shapes:\n  - {gpu: C, m: 64, n: 64, k: 64, tflops: 1}\n  - {gpu: C, m: 64, n: 64, k: 64, "
                "tflops: 2}\n",
                "cal.yaml:3: error: duplicate gemm_shapes entry"},
        BadFile{"gemm_shapes:\n  - {gpu: C, m: 0, n: 64, k: 64, tflops: 1}\n", "cal.yaml:2: error: 'm' must be"},
        BadFile{"pointwise:\n  - {gpu: C, op: q_proj, bytes: 64, GBps: 1}\n",
                "cal.yaml:2: error: unknown pointwise op 'q_proj' (one of embedding, norm"},
        BadFile{"pointwise:\n  - {gpu: C, op: norm, pass: sideways, bytes: 64, GBps: 1}\n",
                "cal.yaml:2: error: 'pass' must be forward or backward"},
        BadFile{"pointwise:\n  - {gpu: C, op: norm, bytes: 0, GBps: 1}\n", "cal.yaml:2: error: 'bytes' must be"},
        BadFile{"pointwise:\n  - {gpu: C, op: norm, bytes: 64, GBps: 0}\n", "cal.yaml:2: error"},
        BadFile{"pointwise:\n  - {gpu: C, op: norm, bytes: 64}\n", "cal.yaml:2: error: missing required field"},
        BadFile{"pointwise:\n  - {gpu: C, op: norm, bytes: 64, GBps: 1, speed: 2}\n",
                "cal.yaml:2: error: unknown key 'speed'"},
        BadFile{"pointwise:\n  - {gpu: C, op: norm, bytes: 64, GBps: 1}\n  - {gpu: c, op: norm, pass: forward, "
                "bytes: 64, GBps: 2}\n",
                "cal.yaml:3: error: duplicate pointwise entry"}));

// The compute slowdown beside communication: 1 / 1.189 by default (Lee et al.'s 18.9 % average),
// kept by a file that keeps the defaults, 1 in one that does not, and the file's own value first.
TEST(Calibration, ComputeSlowdownUnderCommFollowsKeepDefaults) {
  EXPECT_DOUBLE_EQ(Calibration::defaults().compute_slowdown_under_comm(), 1 / 1.189);
  EXPECT_DOUBLE_EQ(Calibration::parse("fallback_efficiency: 0.5\n", "cal.yaml").compute_slowdown_under_comm(),
                   1 / 1.189);
  EXPECT_DOUBLE_EQ(Calibration::parse("keep_defaults: false\n", "cal.yaml").compute_slowdown_under_comm(), 1);
  EXPECT_DOUBLE_EQ(Calibration::parse("keep_defaults: false\ncompute_slowdown_under_comm: 0.7\n", "cal.yaml")
                       .compute_slowdown_under_comm(),
                   0.7);
  EXPECT_DOUBLE_EQ(Calibration::parse("compute_slowdown_under_comm: 1\n", "cal.yaml").compute_slowdown_under_comm(), 1);
}

// Edited calibration files (tests/common/text_mutations.hpp): accepted ones give finite positive
// rates for every block, the rest are InputErrors.
TEST(CalibrationMutations, EveryEditIsAcceptedOrAnInputError) {
  const std::string text =
      "keep_defaults: true\n"
      "fallback_efficiency: 0.5\n"
      "compute_slowdown_under_comm: 0.9\n"
      "points:\n"
      "  - {gpu: H100-SXM5-80GB, op: forward, dtype: bf16, head_dim: 128, block_tokens: 1024, tflops: 410, source: "
      "\"bench\"}\n"
      "  - {gpu: H100-SXM5-80GB, op: forward, dtype: bf16, head_dim: 128, block_tokens: 16384, tflops: 640}\n"
      "  - {gpu: H100-SXM5-80GB, op: backward, dtype: fp16, head_dim: 64, block_tokens: 4096, tflops: 480}\n";
  const int rejected = testing::rejected_edits(text, 5000, 300, [](const std::string& edited) {
    const Calibration c = Calibration::parse(edited, "cal.yaml");
    for (KernelOp op : {KernelOp::AttnFwd, KernelOp::AttnBwd})
      for (int64_t tokens : {int64_t(1), int64_t(512), int64_t(1) << 20}) {
        const double rate = c.tflops("H100-SXM5-80GB", op, DType::BF16, 128, tokens, tokens, kH100Peak);
        EXPECT_TRUE(std::isfinite(rate) && rate > 0) << rate;
      }
  });
  EXPECT_GT(rejected, 100);  // the edits reach the checks
}

}  // namespace
}  // namespace wallfacer
