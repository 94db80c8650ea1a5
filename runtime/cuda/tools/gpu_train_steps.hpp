// wallfacer_gpu_step_kernels' training check (gpu_train_steps.cpp): losses of the gpt-tiny
// decoder trained with the GPU kernels against the same steps with the CPU kernels.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>

#include <wallfacer/runtime/cuda/cuda_backend.hpp>

namespace wallfacer::gpu_check {

// The kernels under test, with fp32 GEMMs or bf16-input GEMMs, on `device`'s memory.
using DeviceKernels = std::function<std::unique_ptr<runtime::StepKernels<float>>(bool bf16_gemm)>;

// Trains with the CPU kernels, then with `make`'s kernels staged through `device` (a CUDA backend;
// a host backend with the CPU kernels checks the staging itself, which must then agree exactly).
// Clears `ok` when a step's loss differs from the CPU run's by more than the tolerance
// (relative), fp32 GEMMs and bf16-input GEMMs each.
nlohmann::json check_training(runtime::Backend& device, const DeviceKernels& make, int64_t steps, double fp32_tolerance,
                              double bf16_tolerance, bool& ok);

}  // namespace wallfacer::gpu_check
