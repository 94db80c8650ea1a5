// One attention layer, forward and backward, over every rank of a plan: the driver behind
// `wallfacer run`, the runtime tests and the benchmark. Every rank calls run_layer with its
// backend (SPMD); rank 0 gathers O, lse, dQ, dK and dV in global token order and, when asked,
// compares them with the fp64 naive reference (reference_attention.hpp). Each rank checks its
// WeightGrad all-reduce result against the sum the schedule's all-reduces imply.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/runtime/executor.hpp>
#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/runtime/tensor.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::runtime {

// Global tensors: q, dO [B, N, h, d]; k, v [B, N, h_kv, d].
struct LayerInputs {
  Tensor<double> q, k, v, dO;
};
// Global results: o, dq [B, N, h, d]; lse [B, h, N]; dk, dv [B, N, h_kv, d].
struct LayerOutputs {
  Tensor<double> o, lse, dq, dk, dv;
};

// Shapes the inputs must have for a workload.
std::vector<int64_t> query_shape(const Workload& workload);
std::vector<int64_t> kv_shape(const Workload& workload);

// Deterministic from the seed and independent of the rank count; rounded to fp32 unless fp64.
LayerInputs seeded_inputs(const Workload& workload, uint64_t seed, bool fp64);
// Reads q.npy, k.npy, v.npy and do.npy from `dir`. Throws InputError naming the file and the
// expected against the actual shape or dtype. Values are rounded to fp32 unless fp64.
LayerInputs load_inputs(const std::string& dir, const Workload& workload, bool fp64);
// Writes o.npy, dq.npy, dk.npy, dv.npy ([B, N, heads, d]) and lse.npy ([B, h, N]) to `dir`
// (created when missing), float32 unless fp64.
void save_outputs(const std::string& dir, const LayerOutputs& outputs, bool fp64);

struct TensorCheck {
  std::string name;  // "o", "lse", "dq", "dk", "dv"
  ErrorStats stats;
  double tolerance = 0;
  bool ok = false;
};

struct WeightGradCheck {
  bool present = false;  // the schedule has a WeightGrad all-reduce
  bool ok = true;
  int64_t elements = 0;    // per rank
  int64_t mismatches = 0;  // over all ranks
  std::string first_mismatch;
};

struct LayerRunOptions {
  bool fp64 = false;
  bool check = false;    // compare with the fp64 reference on rank 0
  double tolerance = 0;  // relative (max|a-b| / max|ref|); 0 picks 1e-4 (fp32) or 1e-10 (fp64)
  ExecutorOptions executor;
};

struct LayerRunResult {
  int ranks = 0;
  std::string backend;
  bool fp64 = false;
  double seconds = 0;               // max over ranks of the program's wall time
  double cpu_seconds = 0;           // max over ranks of the executing thread's CPU time
  double compute_seconds = 0;       // max over ranks
  double wait_seconds = 0;          // max over ranks
  double comm_seconds = 0;          // max over ranks; device communication busy time (GPU backends)
  double flops = 0;                 // sum over ranks (schedule convention, docs/algorithms.md §1.3)
  int64_t bytes_sent = 0;           // sum over ranks
  LayerOutputs outputs;             // rank 0 only
  std::vector<TensorCheck> checks;  // rank 0 only, when options.check
  WeightGradCheck weight_grad;      // rank 0 only
  bool ok = true;                   // every check passed (rank 0)
};

double default_tolerance(bool fp64);

// Collective over all ranks of `backend`: each executes its program of `schedule` (which holds
// every rank). Throws InputError when the backend's rank count differs from the plan's, and
// ScheduleError when the schedule breaks its semantics or outputs are missing or duplicated.
LayerRunResult run_layer(Backend& backend, const Plan& plan, const Schedule& schedule, const LayerInputs& inputs,
                         const LayerRunOptions& options);

// All ranks of the plan as threads of this process (local backend); returns rank 0's result.
LayerRunResult run_layer_local(const Plan& plan, const Schedule& schedule, const LayerInputs& inputs,
                               const LayerRunOptions& options, const LocalOptions& local = {});

// The checks of run_layer, usable on their own: each tensor against the fp64 reference.
std::vector<TensorCheck> check_against_reference(const Workload& workload, const LayerInputs& inputs,
                                                 const LayerOutputs& outputs, double tolerance);

}  // namespace wallfacer::runtime
