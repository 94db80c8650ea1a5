// What `wallfacer run` will allocate, computed from the plan and its schedule before anything is
// allocated, and the check against the memory the machine has available. A plan that `plan`
// writes for GPUs (4M tokens on 4 ranks) can need far more host memory than a CPU run has; it
// must be refused with the figures, not killed by the kernel's out-of-memory killer.
#pragma once

#include <cstdint>
#include <string>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::runtime {

struct RunMemoryEstimate {
  int64_t inputs = 0;            // Q, K, V, dO in fp64, held once per process
  int64_t largest_rank = 0;      // the largest rank's buffers and op state (executor allocation)
  int64_t all_ranks = 0;         // every rank's buffers together
  int64_t per_thread = 0;        // stack and allocator pages per rank thread (threads backend)
  int64_t outputs = 0;           // O, lse, dQ, dK, dV in fp64, assembled on rank 0 (and gathered)
  int64_t reference = 0;         // --check: the fp64 reference's outputs and one head's scores
  int64_t total = 0;             // what this process (threads) or this node's processes (MPI) need
  std::string describe() const;  // "3.2 GiB (inputs 1.0 GiB, ranks 4 x 512 MiB, ...)"
};

// `processes_here`: 0 for the threads backend (every rank in this process); for MPI, the number
// of ranks on this node (each process holds the inputs and one rank; rank 0 also the outputs).
RunMemoryEstimate estimate_run_memory(const Plan& plan, const Schedule& schedule, bool fp64, bool check,
                                      int processes_here);

// "1.5 GiB", "320.0 MiB", ...
std::string bytes_text(int64_t bytes);

// Memory this machine can give without swapping: MemAvailable from /proc/meminfo, else
// sysconf's available pages; -1 when neither is known.
int64_t available_memory_bytes();

// Throws InputError naming `plan_source` with the estimate and the available memory when the
// estimate exceeds the available memory.
void check_run_memory(const RunMemoryEstimate& estimate, int64_t available, const std::string& plan_source);

// What `wallfacer run --backend cuda` allocates on one GPU: the buffers of the ranks that share
// it (every rank with the local transport, one under NCCL), the message blocks in flight, and an
// allowance for what the CUDA runtime and NCCL take themselves (docs/cuda.md, "Device memory").
struct DeviceMemoryEstimate {
  int ranks_here = 1;    // ranks on this GPU
  int64_t buffers = 0;   // their buffers (the executor's allocation, exact)
  int64_t messages = 0;  // send and receive blocks in flight: twice each rank's largest buffer
  int64_t runtime = 0;   // the allowance for the CUDA context, streams and NCCL
  int64_t total = 0;
  std::string describe() const;  // "1.2 GiB (4 ranks: buffers 512 MiB, messages 256 MiB, runtime 512 MiB)"
};

// The allowance per process: CUDA's context, module images and streams, NCCL's channel buffers.
// Not a measurement: an upper guess, so a plan that fits tightly is let through.
constexpr int64_t kDeviceRuntimeAllowanceBytes = int64_t{512} << 20;

// `all_ranks_on_one_device`: the local transport (every rank of the plan on one GPU); else the
// largest rank alone (one process per GPU).
DeviceMemoryEstimate estimate_device_memory(const Plan& plan, const Schedule& schedule, bool fp64,
                                            bool all_ranks_on_one_device);

// Throws InputError naming `plan_source`, the estimate and the GPU's free memory (cudaMemGetInfo,
// read by the caller) when the estimate exceeds it.
void check_device_memory(const DeviceMemoryEstimate& estimate, int64_t free_bytes, int64_t total_bytes, int device,
                         const std::string& plan_source);

}  // namespace wallfacer::runtime
