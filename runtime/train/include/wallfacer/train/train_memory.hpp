// What `wallfacer train` will hold, known before it allocates anything. Each rank's trainer is
// built and runs two steps on a MeasuringBackend (wallfacer/runtime/measuring_backend.hpp: memory
// as bookkeeping, transfers that complete at once, no kernels) with kernels that do nothing: the
// trainer's and the executor's control flow does not depend on the values, so the peak of what
// they hold in backend memory is the real run's, to the byte. Around that measured peak, what the
// backends add on their own is counted from stated rules (docs/training.md, "Memory").
#pragma once

#include <cstdint>
#include <vector>

#include <wallfacer/plan/plan.hpp>

namespace wallfacer::train {

struct RankTrainMemory {
  int rank = 0;
  int64_t backend_peak = 0;       // bytes the trainer and the executor hold in backend memory at their peak,
                                  // transfers in flight included (MeasuringBackend::in_flight_bytes)
  int64_t measured_peak = 0;      // the peak as measured, every transfer complete at once
  int64_t gemm_operands = 0;      // elements of the two inputs of the rank's largest GEMM
  int64_t rows = 0;               // the rank's token rows (sequences x own tokens)
  int64_t largest_reduction = 0;  // bytes of its largest reduce-scatter or all-reduce
};

struct TrainMemory {
  std::vector<RankTrainMemory> ranks;  // the ranks measured, ascending
  int64_t parameters = 0;
  int element_bytes = 4;  // fp32, or 8 with fp64
  // Host bytes a rank's trainer holds while it is built: the initial values in fp64 and their copy
  // in the training precision.
  int64_t init_host_bytes() const { return parameters * (8 + element_bytes); }
};

// `ranks`: the ranks to measure (all when empty). `reduce_scatter`: whether the backend that will
// run has a reduce-scatter (without one the executor's fallback holds more). Throws what the
// trainer throws for a plan it cannot run.
TrainMemory measure_train_memory(const Plan& plan, bool fp64, bool reduce_scatter, const std::vector<int>& ranks = {});

// What the CUDA backend adds per rank on the device beyond the measured peak: the cuBLASLt
// workspace, the bf16 copies of the largest GEMM's inputs (--bf16-gemm), the cross-entropy's
// per-row scratch and the uploaded index arrays, the GEMMs that measure the peak rate at start
// (three 2048 x 2048 matrices) unless a peak is given, and with the local transport (ranks as
// threads on one GPU) the sum of its largest reduction.
int64_t cuda_kernel_scratch_bytes(const RankTrainMemory& rank, const TrainMemory& memory, bool bf16_gemm,
                                  bool measures_peak, bool local_transport);
inline constexpr int64_t kCublasLtWorkspaceBytes = int64_t{32} << 20;

}  // namespace wallfacer::train
