// The interface between the executor and a machine. A backend owns one rank's view of the world:
// its memory (host memory for the CPU backends, device memory for a CUDA backend), point-to-point
// messages between world ranks, non-blocking collectives over the plan's communication groups,
// and the attention kernels. The executor (executor.hpp) drives any backend the same way, so the
// in-process backend (local_backend.hpp), the MPI backend (mpi/mpi_backend.hpp) and a later
// CUDA/NCCL backend run the same schedules.
//
// Conventions. Pointers named `data`/`send`/`recv`/`dst`/`src` point into backend memory (from
// allocate()); pointers named `host` point into ordinary host memory, and so do the kernels'
// position arrays (a device backend uploads them). Counts are in elements of `type`, per group
// member in group order. A posted operation returns a RequestId; its buffers must stay untouched
// until test() reports it complete. Entries marked (optional) have a default the executor can
// fall back on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/attention_kernels.hpp>

namespace wallfacer::runtime {

enum class ElemType : uint8_t { F32, F64 };
inline size_t elem_size(ElemType type) {
  return type == ElemType::F32 ? 4 : 8;
}
template <typename T>
constexpr ElemType elem_type_of();
template <>
constexpr ElemType elem_type_of<float>() {
  return ElemType::F32;
}
template <>
constexpr ElemType elem_type_of<double>() {
  return ElemType::F64;
}

using RequestId = int64_t;
using Counts = std::vector<int64_t>;

// Where a backend runs work asynchronously (a GPU), what its device spent one program on:
// compute busy time (kernels and the copies that pack and unpack buffers) and communication busy
// time, as measured on the device's streams. valid is false for backends that run synchronously.
struct DeviceTimes {
  bool valid = false;
  double compute_seconds = 0;
  double comm_seconds = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- identity -----------------------------------------------------------------------------
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // e.g. "local (4 threads)", "mpi (Open MPI v4.1.4)"

  // ---- communication groups: called by every rank with the plan's groups (in plan order)
  // before the first collective. Collective over all ranks.
  virtual void set_groups(const std::vector<CommGroup>& groups) = 0;

  // ---- memory -------------------------------------------------------------------------------
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* data) = 0;
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* src, size_t bytes) = 0;
  // `rows` rows of `row_bytes` from src (pitch src_pitch) to dst (pitch dst_pitch), like cudaMemcpy2D.
  virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                       size_t rows) = 0;
  virtual void fill(void* dst, ElemType type, size_t count, double value) = 0;
  // dst[i] += src[i] for i < count.
  virtual void accumulate(void* dst, const void* src, size_t count, ElemType type) = 0;

  // ---- point-to-point between world ranks, matched by (source, destination, tag) in post order.
  virtual RequestId isend(int peer, int tag, const void* data, size_t bytes) = 0;
  virtual RequestId irecv(int peer, int tag, void* data, size_t bytes) = 0;

  // ---- collectives over plan group `group`. Received blocks are packed in member order.
  // All-gather: every member contributes send_count elements; recv holds recv_counts[i] from member i.
  virtual RequestId iallgatherv(int group, const void* send, int64_t send_count, void* recv, const Counts& recv_counts,
                                ElemType type) = 0;
  // All-to-all: send holds send_counts[j] elements for member j, packed in member order.
  virtual RequestId ialltoallv(int group, const void* send, const Counts& send_counts, void* recv,
                               const Counts& recv_counts, ElemType type) = 0;
  // (optional) Reduce-scatter with sum: send holds recv_counts[j] elements for member j, packed
  // in member order, identical in structure on every member; recv gets the sum of the blocks for
  // this member. When has_reduce_scatter() is false the executor exchanges blocks with
  // ialltoallv and sums locally.
  virtual bool has_reduce_scatter() const { return false; }
  virtual RequestId ireduce_scatter(int group, const void* send, void* recv, const Counts& recv_counts, ElemType type) {
    throw std::logic_error(name() + " has no reduce-scatter");
  }
  // All-reduce with sum, in place.
  virtual RequestId iallreduce(int group, void* data, int64_t count, ElemType type) = 0;

  // (optional) Called by the executor before it posts anything of a program, every time it starts
  // one (a trainer starts the step's program once per step). A backend that issues its calls from
  // a per-program plan (the NCCL transport's device plan) starts that plan over here.
  virtual void program_begins() {}

  // ---- completion ---------------------------------------------------------------------------
  // True once the operation is complete; the id is then retired and must not be tested again.
  virtual bool test(RequestId request) = 0;
  // Blocks until at least one of `pending` (not yet retired) is complete. Throws when no progress
  // is possible (a deadlock the backend can prove, or a stall past its watchdog).
  virtual void wait_any(const std::vector<RequestId>& pending) = 0;
  // (optional) Lets posted operations advance while the caller computes; the executor calls it
  // between slices of long compute ops. Backends that progress on their own ignore it.
  virtual void progress() {}
  // (optional) Called when a rank's executor unwinds from an error, before its buffers are
  // freed: posted transfers must no longer read or write them. Backends whose transfers copy
  // through their own memory ignore it.
  virtual void abandon() noexcept {}
  // (optional) Returns once everything the backend has enqueued is complete. Backends that run
  // ops asynchronously (the CUDA backend enqueues kernels and copies on device streams and
  // returns at once) finish here; the executor calls it at the end of a program, before it stops
  // the clock. With it, device_times() covers the program since the last call.
  virtual void synchronize() {}
  virtual DeviceTimes device_times() { return {}; }

  // ---- attention kernels (attention_kernels.hpp semantics; pointers into backend memory) ----
  virtual void attention_forward(const kernels::QueryBlock<float>& q, const kernels::KeyBlock<float>& kv,
                                 const kernels::AttnShape& shape, float* acc_o, float* acc_lse, int64_t acc_row_stride,
                                 int64_t lse_stride) = 0;
  virtual void attention_forward(const kernels::QueryBlock<double>& q, const kernels::KeyBlock<double>& kv,
                                 const kernels::AttnShape& shape, double* acc_o, double* acc_lse,
                                 int64_t acc_row_stride, int64_t lse_stride) = 0;
  virtual void attention_backward(const kernels::QueryBlock<float>& q, const kernels::KeyBlock<float>& kv,
                                  const kernels::BackwardInputs<float>& in, const kernels::AttnShape& shape, float* dq,
                                  float* dk, float* dv) = 0;
  virtual void attention_backward(const kernels::QueryBlock<double>& q, const kernels::KeyBlock<double>& kv,
                                  const kernels::BackwardInputs<double>& in, const kernels::AttnShape& shape,
                                  double* dq, double* dk, double* dv) = 0;
  virtual void backward_prep(const float* o, const float* dO, int64_t rows, int heads, int head_dim, int64_t row_stride,
                             float* D, int64_t lse_stride) = 0;
  virtual void backward_prep(const double* o, const double* dO, int64_t rows, int heads, int head_dim,
                             int64_t row_stride, double* D, int64_t lse_stride) = 0;
  virtual void merge_partial(float* o_a, float* lse_a, const float* o_b, const float* lse_b, int64_t rows, int heads,
                             int head_dim, int64_t row_stride, int64_t lse_stride) = 0;
  virtual void merge_partial(double* o_a, double* lse_a, const double* o_b, const double* lse_b, int64_t rows,
                             int heads, int head_dim, int64_t row_stride, int64_t lse_stride) = 0;

  // ---- host-side control for the driver (blocking, every rank calls them in the same order) --
  // Logical AND of `ok` over all ranks.
  virtual bool all_ok(bool ok) = 0;
  // Rank 0 receives every rank's bytes in rank order; other ranks receive an empty list.
  virtual std::vector<std::string> gather_to_root(const std::string& bytes) = 0;
  virtual double max_over_ranks(double value) = 0;
  virtual void barrier() = 0;
};

}  // namespace wallfacer::runtime
