// Rank-local execution of a whole-step program (wallfacer/schedule/step.hpp) for training: the
// executor runs the program's four streams, its attention ops and point-to-point transfers
// itself, and hands the rest to the caller through StepHooks: every Gemm and Pointwise op (the
// caller's kernels, wallfacer/runtime/step_kernels.hpp, on its named weights and activations)
// and the memory of every flat collective (the gradient buckets' all-reduces and reduce-scatters, the
// ZeRO parameter gathers), which the executor then posts on the collective stream like any other
// collective. The caller binds an attention layer's Q, K, V and dO when the op producing them has
// run and takes O, dQ, dK and dV back once the attention's dependencies say they are complete
// (docs/training.md, "How the step runs").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <wallfacer/runtime/executor.hpp>

namespace wallfacer::runtime {

// The memory of one flat collective, in backend memory: AllReduce sums `count` values of `send`
// in place (recv unused); ReduceScatter sums every member's `send` (recv_counts[j] values for
// member j, back to back) and leaves this member's part in `recv`; AllGather concatenates every
// member's `count` values of `send` into `recv` (recv_counts per member).
struct FlatCall {
  void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  Counts recv_counts;
};

// A tensor of the caller's in backend memory laid out as the trainer keeps its activations:
// [sequence][row][heads][head_dim] with every head of the field's class (query heads for Q, O,
// dO, dQ; kv heads for K, V, dK, dV), `rows_per_batch` rows per sequence of the rank, and the
// row of every global token position in `row_of` (-1: not held).
struct RowTensor {
  void* data = nullptr;
  int64_t rows_per_batch = 0;
  const std::vector<int32_t>* row_of = nullptr;
};

struct StepHooks {
  std::function<void(int32_t op)> started;   // every op, as it starts (posted or computed); optional
  std::function<void(int32_t op)> compute;   // Gemm and Pointwise ops
  std::function<FlatCall(int32_t op)> flat;  // flat collectives (fields WeightGrad or Weight)
  std::function<void(int32_t op)> finished;  // flat collectives, once complete; optional
};

class StepSession {
 public:
  // `type` chooses the precision of every buffer, message and kernel of the attention. Throws
  // ScheduleError when the program cannot run (broken semantics) and whatever the hooks throw.
  StepSession(const Schedule& schedule, const RankProgram& program, const Plan& plan, Backend& backend, ElemType type,
              const ExecutorOptions& options, StepHooks hooks);
  ~StepSession();
  StepSession(const StepSession&) = delete;
  StepSession& operator=(const StepSession&) = delete;

  // Runs ops [0, op_limit) (all by default); may be called again with a larger limit.
  void run(int64_t op_limit = INT64_MAX);
  // Writes input binding `binding` of the program from `source`. in_place: the buffer already
  // holds the binding's tokens and keeps its other fields (dO after the forward).
  void bind(const Binding& binding, const SliceSource& source, bool in_place);
  // Hands the values of output binding `binding` to `sink`.
  void collect(const Binding& binding, const SliceSink& sink);
  // The same two from and into a tensor in backend memory, by device copies alone (a device
  // backend's memory is not the host's): bind_rows writes the binding's tokens and heads from
  // `source`; collect_rows writes them into `sink` and returns the elements it wrote.
  void bind_rows(const Binding& binding, const RowTensor& source, bool in_place);
  int64_t collect_rows(const Binding& binding, const RowTensor& sink);
  // Marks `fields` of buffer `buffer` as never written: the next accumulation into them starts
  // from their identity (a recomputation's attention starting its accumulators over).
  void restart(int32_t buffer, FieldMask fields);
  const ExecutionStats& stats() const;

 private:
  StepHooks hooks_;
  std::unique_ptr<detail::Executor> executor_;
};

}  // namespace wallfacer::runtime
