// The CUDA/NCCL backend of the executor, without CUDA or NCCL headers (its users are compiled by
// the host compiler alone). Two transports share one device backend (device memory, the device
// attention kernels, a compute and a communication stream per rank, events for the schedule's
// dependencies; docs/cuda.md):
//   - local: several ranks as threads of this process on one GPU, each with its own streams,
//     buffers exchanged by device copies, so every strategy runs on a single GPU;
//   - NCCL: one process per GPU, point-to-point in group calls and collectives on communicators
//     split per plan group, issued in the order of the device plan (device_plan.hpp), with the
//     unique id passed over a host control channel (the MPI backend under mpirun or srun, or the
//     TCP rendezvous of rendezvous.hpp under srun without MPI).
// Every CUDA and NCCL call is checked; a failure throws CudaError naming the file, line, rank,
// the call and the library's message.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/runtime/device_plan.hpp>
#include <wallfacer/runtime/layer_runner.hpp>
#include <wallfacer/runtime/rendezvous.hpp>
#include <wallfacer/runtime/step_kernels.hpp>

namespace wallfacer::runtime {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether a usable GPU is present; `description` names it ("NVIDIA H200, sm_90, 139.8 GiB;
// driver 13.0, runtime 13.0, NCCL 2.27.3") or says why not ("no CUDA device: ...").
struct CudaDeviceInfo {
  bool available = false;
  int devices = 0;
  std::string description;
};
CudaDeviceInfo cuda_device_info(int device = 0);

struct CudaLocalOptions {
  int device = 0;
};

// Runs body(backend) on `ranks` threads sharing GPU `device`, one backend (with its own compute
// and communication streams) per rank. Rethrows the first rank's failure; a deadlock (every rank
// waiting, nothing able to complete) is a ScheduleError naming what each rank waits on.
void run_cuda_local_ranks(int ranks, const std::function<void(Backend&)>& body, const CudaLocalOptions& options = {});

// run_layer over every rank of the plan with the local transport on one GPU; rank 0's result.
LayerRunResult run_layer_cuda_local(const Plan& plan, const Schedule& schedule, const LayerInputs& inputs,
                                    const LayerRunOptions& options, const CudaLocalOptions& local = {});

// One rank of an NCCL run. `control` is the host channel of this process's rank among all of
// them (the MPI backend): it carries the NCCL unique id from rank 0 and serves the driver's
// control calls (all_ok, gather_to_root, ...). `plan` is this rank's part of the device plan of
// the schedule the executor will run. The GPU is `device`, or when negative the local rank
// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID) modulo the devices present.
std::unique_ptr<Backend> make_nccl_backend(Backend& control, const RankDevicePlan& plan, int device = -1);
// The same over any control channel: the TCP rendezvous of a start without MPI (srun alone).
std::unique_ptr<Backend> make_nccl_backend(ControlChannel& control, const RankDevicePlan& plan, int device = -1);

// The GPU this process uses under a launcher: its local rank modulo the devices present.
int cuda_process_device();

// Free and total memory of a GPU (cudaMemGetInfo; creates the context); -1 when unknown.
struct CudaMemoryInfo {
  int64_t free = -1, total = -1;
};
CudaMemoryInfo cuda_memory_info(int device);

// The whole-step program's kernels on the GPU of a CUDA backend (one made by run_cuda_local_ranks
// or make_nccl_backend): GEMMs through cuBLASLt, the pointwise ops and AdamW as CUDA kernels, on
// the backend's compute stream. bf16_gemm (fp32 training only): GEMM inputs rounded to bf16,
// accumulation and outputs in fp32; otherwise fp32 GEMMs in true fp32 (not TF32), fp64 for
// double. Throws CudaError for a backend that is not a CUDA backend.
struct CudaStepKernelsOptions {
  bool bf16_gemm = false;
};
template <typename T>
std::unique_ptr<StepKernels<T>> make_cuda_step_kernels(Backend& backend, const CudaStepKernelsOptions& options = {});

}  // namespace wallfacer::runtime
