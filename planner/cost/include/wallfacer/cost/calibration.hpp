// Achieved attention-kernel throughput per (GPU model, operation, block shape, dtype), shared by
// the cost model and the simulator. Defaults are sourced (docs/calibration.md); a YAML file can
// replace them (--calibration FILE). Throughput between calibrated block sizes is interpolated
// in log2(tokens); beyond the ends it is clamped.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <wallfacer/plan/workload.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer {

enum class KernelOp { AttnFwd, AttnBwd };

struct CalibrationPoint {
  std::string gpu;  // GPU model name prefix, e.g. "H100" matches "H100-SXM5-80GB"
  KernelOp op = KernelOp::AttnFwd;
  DType dtype = DType::BF16;
  int head_dim = 128;
  int64_t block_tokens = 0;  // query tokens = key tokens of the block
  double tflops = 0;         // achieved, dense FLOP convention of docs/algorithms.md §1.3
  // Measured on blocks on the diagonal of a causal mask (their live pairs counted): priced for
  // blocks with the causal mask. Without causal points for a GPU, causal blocks use the others.
  bool causal = false;
  std::string source;
};

// A measured GEMM rate of one shape (m x n x k, 2mnk FLOPs per product). The shapes of one GPU
// and dtype form a grid (every combination of their distinct m, n and k); a GEMM is priced by
// interpolating the rate linearly in log2 of each side, clamped at the grid's ends.
struct GemmShapePoint {
  std::string gpu;
  DType dtype = DType::FP32;
  int64_t m = 0, n = 0, k = 0;
  double tflops = 0;
  std::string source;
};

// A measured rate of one kind of memory-bound op (the whole-step program's Pointwise ops: norms,
// rotary, residual adds, activations, the loss, the embedding, the optimizer) at one size, in
// bytes of the op's `Op::bytes` per second: the program's byte count is the unit, whatever the
// kernel really moves, so a kernel bound by arithmetic (exp, tanh, sin) is priced at its measured
// pace. `backward`: the op's backward kernel (a recomputation runs the forward one). Points of one
// GPU, dtype, op and pass are interpolated linearly in log2(bytes), clamped at the ends.
struct PointwisePoint {
  std::string gpu;
  DType dtype = DType::FP32;
  StepOp op = StepOp::Norm;
  bool backward = false;
  int64_t bytes = 0;
  double GBps = 0;
  std::string source;
};

// One resolved throughput curve (GPU, op, dtype, head_dim), for pricing many blocks quickly.
class KernelCurve {
 public:
  // Achieved TFLOP/s of a q_tokens x k_tokens block (log2 interpolation, clamped at the ends and
  // at the peak).
  double tflops(int64_t q_tokens, int64_t k_tokens) const;
  bool is_fallback() const { return fallback_; }  // no point matched: fallback efficiency x peak

 private:
  friend class Calibration;
  std::vector<std::pair<double, double>> points_;  // (log2 block tokens, TFLOP/s), sorted
  double peak_tflops_ = 0;
  bool fallback_ = false;
};

// Share of the dense peak a large, aligned GEMM reaches on a GPU model (prefix match), and share
// of the HBM bandwidth memory-bound kernels reach (docs/calibration.md).
struct EfficiencyPoint {
  std::string gpu;
  double efficiency = 0;
  std::string source;
};

class Calibration {
 public:
  static Calibration defaults();
  static Calibration parse(const std::string& yaml_text, const std::string& source);  // throws InputError
  static Calibration load(const std::string& path);

  // Achieved TFLOP/s for a q_tokens x k_tokens block. Falls back to `fallback_efficiency` x
  // peak_tflops when no point matches the GPU.
  double tflops(const std::string& gpu, KernelOp op, DType dtype, int head_dim, int64_t q_tokens, int64_t k_tokens,
                double peak_tflops) const;
  // `causal`: the curve of causal diagonal blocks where the GPU has one, else the ordinary curve.
  KernelCurve curve(const std::string& gpu, KernelOp op, DType dtype, int head_dim, double peak_tflops,
                    bool causal = false) const;
  double fallback_efficiency() const { return fallback_efficiency_; }
  // Fraction of compute speed kept while communication kernels run, 1 = none lost (defaults:
  // 1 / 1.189, docs/calibration.md). Applied with the simulator's --comm-slowdown and the cost
  // model's CostOptions::comm_slowdown.
  double compute_slowdown_under_comm() const { return comm_slowdown_; }
  const std::vector<CalibrationPoint>& points() const { return points_; }

  // Achieved share of the dense peak of an m x n x k GEMM: the GPU's large-GEMM ceiling times the
  // size curve of docs/calibration.md (small products leave SMs idle), times the misalignment
  // factor when n or k is not a multiple of 64. `fallback` is set when no ceiling matches the GPU.
  // `fp8`: the ceiling of fp8 GEMMs (share of the fp8 peak).
  double gemm_efficiency(const std::string& gpu, int64_t m, int64_t n, int64_t k, bool* fallback = nullptr,
                         bool fp8 = false) const;
  // The measured TFLOP/s of an m x n x k GEMM from the file's `gemm_shapes:` grid of this GPU
  // (longest prefix) and dtype, interpolated; 0 when there is none (then gemm_efficiency prices it).
  double gemm_shape_tflops(const std::string& gpu, DType dtype, int64_t m, int64_t n, int64_t k) const;
  bool has_gemm_shapes(const std::string& gpu, DType dtype) const;
  const std::vector<GemmShapePoint>& gemm_shapes() const { return gemm_shapes_; }
  // The measured rate (GB/s of Op::bytes) of a memory-bound op from the file's `pointwise:` points
  // of this GPU (longest prefix), dtype, op and pass, interpolated in log2(bytes); 0 when there is
  // none (then the HBM bandwidth times hbm_efficiency prices it).
  double pointwise_GBps(const std::string& gpu, DType dtype, StepOp op, bool backward, int64_t bytes) const;
  bool has_pointwise(const std::string& gpu, DType dtype) const;
  const std::vector<PointwisePoint>& pointwise() const { return pointwise_; }
  // Achieved share of the HBM bandwidth for memory-bound kernels.
  double hbm_efficiency(const std::string& gpu, bool* fallback = nullptr) const;
  const std::vector<EfficiencyPoint>& gemm_ceilings() const { return gemm_; }
  const std::vector<EfficiencyPoint>& gemm_fp8_ceilings() const { return gemm_fp8_; }
  const std::vector<EfficiencyPoint>& hbm_efficiencies() const { return hbm_; }

 private:
  std::vector<CalibrationPoint> points_;
  std::vector<GemmShapePoint> gemm_shapes_;
  std::vector<PointwisePoint> pointwise_;
  std::vector<EfficiencyPoint> gemm_, gemm_fp8_, hbm_;
  double fallback_efficiency_ = 0.5;
  double comm_slowdown_ = 1.0;
};

}  // namespace wallfacer
