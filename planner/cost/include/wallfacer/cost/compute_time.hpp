// How long one compute op runs on a GPU, shared by the cost model and the simulator so that both
// price the same op the same way: attention blocks from the calibrated kernel curves (causal
// diagonal blocks from their own curve where measured), GEMMs from a measured grid of shapes or
// else the GPU's large-GEMM ceiling and the size curve, memory-bound ops from their measured rates
// where the calibration has them (`pointwise:`) and else from the achieved HBM bandwidth
// (docs/calibration.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include <wallfacer/cost/calibration.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {

class ComputeTimer {
 public:
  ComputeTimer(const GpuModel& gpu, const Calibration& calibration, const Workload& workload);
  // The timer keeps a reference to the calibration: a temporary would dangle.
  ComputeTimer(const GpuModel& gpu, Calibration&& calibration, const Workload& workload) = delete;
  // Seconds of a compute-stream op (AttnFwd, AttnBwd, BwdPrep, Copy, Gemm, Pointwise); 0 for
  // the other kinds. Throws InputError when the calibration gives no positive throughput.
  double seconds(const Op& op, const TokenSetPool& tokens);
  double peak_tflops() const { return peak_tflops_; }
  // Whether some priced op fell back to an assumed efficiency (no calibration for this GPU).
  bool used_gemm_fallback() const { return gemm_fallback_; }

 private:
  double attention_seconds(const Op& op, const TokenSetPool& tokens);
  double gemm_seconds(const Op& op);
  double pointwise_seconds(const Op& op);

  std::string gpu_name_;
  const Calibration& calibration_;
  double peak_tflops_ = 0, hbm_bytes_per_s = 0, pointwise_bytes_per_s_ = 0;
  double fp8_peak_tflops_ = 0;  // > 0 when the layers' GEMMs run in fp8 (Workload::fp8_linear)
  DType dtype_ = DType::BF16;
  KernelCurve forward_, backward_, causal_forward_, causal_backward_;
  bool gemm_fallback_ = false;
  bool measured_pointwise_ = false;  // the calibration has `pointwise:` rates for this GPU and dtype
  // Seconds per byte of the measured pointwise ops, by (label, backward, bytes): programs repeat them.
  std::map<std::tuple<StepOp, bool, int64_t>, double> pointwise_per_byte_;
  struct LastShape {  // programs repeat shapes: remember the last one asked for
    OpKind kind = OpKind::Copy;
    int64_t a = -1, b = -1, c = -1;
    bool fp8 = false;
    bool causal = false;
    double per_unit = 0;
  } last_attention_, last_gemm_;
};

}  // namespace wallfacer
