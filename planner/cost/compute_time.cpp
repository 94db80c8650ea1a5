// Compute-op durations (compute_time.hpp).
#include <wallfacer/cost/compute_time.hpp>

#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/cost/cost_model.hpp>

namespace wallfacer {

ComputeTimer::ComputeTimer(const GpuModel& gpu, const Calibration& calibration, const Workload& workload)
    : gpu_name_(gpu.name),
      calibration_(calibration),
      peak_tflops_(kernel_peak_tflops(gpu, workload.dtype)),
      hbm_bytes_per_s(gpu.hbm_GBps * 1e9),
      pointwise_bytes_per_s_(gpu.hbm_GBps * 1e9 * calibration.hbm_efficiency(gpu.name)),
      dtype_(workload.dtype),
      forward_(calibration.curve(gpu.name, KernelOp::AttnFwd, workload.dtype, workload.head_dim, peak_tflops_)),
      backward_(calibration.curve(gpu.name, KernelOp::AttnBwd, workload.dtype, workload.head_dim, peak_tflops_)),
      causal_forward_(
          calibration.curve(gpu.name, KernelOp::AttnFwd, workload.dtype, workload.head_dim, peak_tflops_, true)),
      causal_backward_(
          calibration.curve(gpu.name, KernelOp::AttnBwd, workload.dtype, workload.head_dim, peak_tflops_, true)),
      measured_pointwise_(calibration.has_pointwise(gpu.name, workload.dtype)) {
  if (!workload.fp8_linear) return;
  if (gpu.peak_fp8_tflops <= 0)
    throw InputError(fmt::format("{} has no fp8 peak in its topology (peak_fp8_tflops); drop fp8_linear", gpu.name));
  fp8_peak_tflops_ = gpu.peak_fp8_tflops;
}

double ComputeTimer::attention_seconds(const Op& op, const TokenSetPool& tokens) {
  if (op.flops <= 0) return 0;
  const int64_t q = token_count(tokens.get(op.tok[0])), k = token_count(tokens.get(op.tok[1]));
  LastShape& last = last_attention_;
  const bool causal = op.mask == Mask::Causal;
  if (op.kind != last.kind || q != last.a || k != last.b || causal != last.causal) {
    const KernelCurve& curve =
        op.kind == OpKind::AttnFwd ? (causal ? causal_forward_ : forward_) : (causal ? causal_backward_ : backward_);
    const double tflops = curve.tflops(q, k);
    if (!(tflops > 0)) throw InputError(fmt::format("calibration gives {} TFLOP/s for a {}x{} block", tflops, q, k));
    last = LastShape{
        .kind = op.kind, .a = q, .b = k, .c = -1, .fp8 = false, .causal = causal, .per_unit = 1.0 / (tflops * 1e12)};
  }
  return op.flops * last.per_unit;
}

double ComputeTimer::gemm_seconds(const Op& op) {
  LastShape& last = last_gemm_;
  // Transformer Engine runs the layers' linear layers in fp8 and keeps the LM head in 16 bits.
  const bool fp8 = fp8_peak_tflops_ > 0 && op.label != StepOp::LmHead;
  if (op.gemm[0] != last.a || op.gemm[1] != last.b || op.gemm[2] != last.c || fp8 != last.fp8) {
    // A measured rate of this shape's neighbours when the calibration has a grid for the GPU.
    double tflops = fp8 ? 0 : calibration_.gemm_shape_tflops(gpu_name_, dtype_, op.gemm[0], op.gemm[1], op.gemm[2]);
    if (tflops <= 0) {
      bool fallback = false;
      const double efficiency =
          calibration_.gemm_efficiency(gpu_name_, op.gemm[0], op.gemm[1], op.gemm[2], &fallback, fp8);
      gemm_fallback_ = gemm_fallback_ || fallback;
      tflops = efficiency * (fp8 ? fp8_peak_tflops_ : peak_tflops_);
    }
    if (!(tflops > 0))
      throw InputError(fmt::format("calibration gives {} TFLOP/s for a GEMM on {}", tflops, gpu_name_));
    last = LastShape{.kind = OpKind::Gemm,
                     .a = op.gemm[0],
                     .b = op.gemm[1],
                     .c = op.gemm[2],
                     .fp8 = fp8,
                     .per_unit = 1.0 / (tflops * 1e12)};
  }
  return op.flops * last.per_unit;
}

// A recomputation inside the backward runs the forward kernel: it is priced as one.
double ComputeTimer::pointwise_seconds(const Op& op) {
  if (measured_pointwise_) {
    const bool backward = op.phase == Phase::Backward && !(op.flags & kOpRecompute);
    const auto key = std::tuple{op.label, backward, op.bytes};
    auto it = pointwise_per_byte_.find(key);
    if (it == pointwise_per_byte_.end()) {
      const double GBps = calibration_.pointwise_GBps(gpu_name_, dtype_, op.label, backward, op.bytes);
      it = pointwise_per_byte_.emplace(key, GBps > 0 ? 1.0 / (GBps * 1e9) : 0.0).first;
    }
    if (it->second > 0) return double(op.bytes) * it->second;
  }
  return pointwise_bytes_per_s_ > 0 ? double(op.bytes) / pointwise_bytes_per_s_ : 0;
}

double ComputeTimer::seconds(const Op& op, const TokenSetPool& tokens) {
  switch (op.kind) {
    case OpKind::AttnFwd:
    case OpKind::AttnBwd:
      return attention_seconds(op, tokens);
    case OpKind::Gemm:
      return gemm_seconds(op);
    case OpKind::Pointwise:
      return pointwise_seconds(op);
    case OpKind::BwdPrep:
    case OpKind::Copy:
      // BwdPrep reads its rows once (op.bytes), Copy reads and writes them.
      if (hbm_bytes_per_s <= 0) return 0;
      return (op.kind == OpKind::Copy ? 2.0 : 1.0) * double(op.bytes) / hbm_bytes_per_s;
    default:
      return 0;
  }
}

}  // namespace wallfacer
