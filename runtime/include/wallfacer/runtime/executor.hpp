// Runs one rank's RankProgram (wallfacer/schedule/schedule.hpp) through a Backend: allocates its buffers,
// binds its slices of the global inputs, progresses the four streams (compute ops run
// synchronously; sends, receives and collectives are posted non-blocking and tested, so
// communication overlaps compute), tracks which tokens every buffer holds, performs collectives
// by their CollectiveSpec, and returns the rank's output slices. docs/runtime.md states the
// executor's reading of the schedule semantics (which write replaces a buffer's token set, how
// accumulators start, how head ranges of mixed buffers are read).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/runtime/tensor.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::runtime {

struct ExecutorOptions {
  // Splits compute ops into slices of at most this many query rows and calls Backend::progress()
  // between slices, so that backends that progress only inside library calls (MPI) keep their
  // transfers moving during long kernels. 0: whole ops.
  int64_t progress_rows = 0;
  // Fills rows a buffer does not hold with NaN, so that a schedule reading them shows up in the
  // checked outputs instead of passing silently.
  bool poison = true;
  // WeightGrad starts at zero and its all-reduces complete at once without communicating: for
  // callers that synchronise real weight gradients themselves (the trainer, runtime/train/).
  bool skip_weight_grad = false;
};

// The global inputs every rank reads its slices from: q, dO [B, N, h, d]; k, v [B, N, h_kv, d].
// Values must be representable in the execution type (rounded to fp32 for fp32 runs).
struct GlobalInputs {
  const Tensor<double>* q = nullptr;
  const Tensor<double>* k = nullptr;
  const Tensor<double>* v = nullptr;
  const Tensor<double>* dO = nullptr;
};

// One output Binding's values: [batch][token][head][d] for vector fields, [batch][head][token] for
// Lse, flat for WeightGrad; batches [batch_begin, batch_end), tokens in `tokens` order.
struct OutputSlice {
  Field field = Field::O;
  TokenSet tokens;
  HeadRange heads;
  int batch_begin = 0, batch_end = 1;
  std::vector<double> values;
};

struct ExecutionStats {
  double seconds = 0;          // the program, from the first op to the last
  double cpu_seconds = 0;      // CPU time of the executing thread over the same span
  double compute_seconds = 0;  // inside compute ops
  double wait_seconds = 0;     // blocked on communication with nothing to compute
  // Asynchronous (GPU) backends: compute_seconds is the device's compute busy time, wait_seconds
  // the rest of the program's time (the compute stream idle), comm_seconds the communication
  // busy time; comm_seconds is 0 for synchronous backends.
  double comm_seconds = 0;
  int64_t ops = 0;
  double flops = 0;        // sum of the compute ops' flops (schedule convention)
  int64_t bytes_sent = 0;  // point-to-point and collective payload this rank posted
};

struct RankResult {
  std::vector<OutputSlice> outputs;
  ExecutionStats stats;
};

// Deterministic WeightGrad contribution of `rank` at `index`: small integers, so sums over ranks
// are exact in fp32 and the all-reduce check can demand equality.
double weight_grad_value(int rank, int64_t index);
// The value depends on the rank only through its class (one of kWeightGradClasses), so a check
// can count contributions per class instead of per rank: memory and time independent of P.
constexpr int kWeightGradClasses = 61;
int weight_grad_class(int rank);
double weight_grad_class_value(int value_class, int64_t index);

// Executes `program` (one rank of `schedule`, built from `plan`) in precision T (float or
// double). The backend's set_groups(plan.groups) must have been called. Throws ScheduleError when
// the program breaks the schedule semantics (reads tokens a buffer does not hold, a stream that
// can never advance) and whatever the backend throws.
template <typename T>
RankResult execute_program(const Schedule& schedule, const RankProgram& program, const Plan& plan,
                           const GlobalInputs& inputs, Backend& backend, const ExecutorOptions& options = {});

namespace detail {
class Executor;
}

// Rank-local execution of an attention program, for training: the rank provides the elements of
// its own input slices and receives its own output slices, never a global tensor. The forward
// (every op of Phase::Forward, a prefix of the program) runs first; its O and lse stay in the
// rank's buffers, with Q, K, V and whatever the strategy keeps, until backward() binds dO and
// runs the rest. WeightGrad is not used (ExecutorOptions::skip_weight_grad is forced on): the
// caller synchronises its real weight gradients. `batch` in the callbacks is the global sequence
// index (RankProgram::batch_begin ..), `token` the global position, `head` the global head
// (kv heads for K, V, dK, dV), `d` the element within the head (0 for Lse).
using SliceSource = std::function<double(Field field, int batch, int64_t token, int head, int d)>;
using SliceSink = std::function<void(Field field, int batch, int64_t token, int head, int d, double value)>;

class RankSession {
 public:
  // `type` chooses the precision of every buffer, message and kernel. Throws ScheduleError when
  // the program's forward ops are not a prefix of it.
  RankSession(const Schedule& schedule, const RankProgram& program, const Plan& plan, Backend& backend, ElemType type,
              const ExecutorOptions& options = {});
  ~RankSession();
  RankSession(const RankSession&) = delete;
  RankSession& operator=(const RankSession&) = delete;

  // Binds Q, K and V from `source`, runs the forward and hands O and Lse to `sink`.
  void forward(const SliceSource& source, const SliceSink& sink);
  // Binds dO from `source`, runs the backward and hands dQ, dK and dV to `sink`. Once per forward.
  void backward(const SliceSource& source, const SliceSink& sink);
  const ExecutionStats& stats() const;

 private:
  std::unique_ptr<detail::Executor> executor_;
  int64_t forward_ops_ = 0;
};

}  // namespace wallfacer::runtime
