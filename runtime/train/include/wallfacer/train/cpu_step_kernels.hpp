// The CPU implementation of the whole-step program's kernels (wallfacer/runtime/step_kernels.hpp):
// the trainer's layers (layers.hpp, GEMMs through OpenBLAS) on host memory, in float or double.
// What `wallfacer train` runs with the local and MPI backends.
#pragma once

#include <memory>

#include <wallfacer/runtime/step_kernels.hpp>

namespace wallfacer::train {

template <typename T>
std::unique_ptr<runtime::StepKernels<T>> make_cpu_step_kernels();

}  // namespace wallfacer::train
