// The device attention kernels on 16-bit inputs, checked and timed on their own (what
// scripts/gpu-check reports): random bf16 or fp16 inputs, the forward and backward on the GPU
// with fp32 accumulation, the errors against the fp64 naive reference on the same rounded
// inputs, and the kernels' time per call measured with CUDA events. No CUDA headers.
#pragma once

#include <cstdint>
#include <string>

namespace wallfacer::runtime {

struct KernelCase {
  int64_t seq = 1024;
  int heads = 8, kv_heads = 8, head_dim = 128;
  bool causal = true;
  bool bf16 = true;       // else fp16
  bool reference = true;  // compare with the fp64 reference (seq x seq scores per head: small seq only)
  int reps = 3;           // timed repetitions after one warm-up
  // The forward: "tensor-cores" (mma.sync, head_dim 64 or 128, else CUDA cores), "wmma" (the
  // earlier WMMA forward, same head dims) or "cuda-cores"; the backward: "tensor-cores" or "cuda-cores".
  std::string forward = "tensor-cores", backward = "tensor-cores";
  uint64_t seed = 1;
};

struct KernelReport {
  // Relative errors max|gpu - ref| / max|ref| per tensor (when KernelCase::reference).
  double o = 0, lse = 0, dq = 0, dk = 0, dv = 0;
  bool checked = false;
  std::string forward_kernel, backward_kernel;  // which kernels ran: "tensor cores (mma.sync)", "tensor
                                                // cores (WMMA)" or "CUDA cores"
  double forward_ms = 0, backward_ms = 0;       // per call, mean over reps
  // (the backward's time includes zeroing dQ, dK and dV, which it adds into)
  double forward_tflops = 0, backward_tflops = 0;  // 4 N^2 h d (halved when causal), backward 2.5x
};

// Throws CudaError when no GPU is usable.
KernelReport run_kernel_case(const KernelCase& c);

}  // namespace wallfacer::runtime
