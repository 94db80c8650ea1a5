// Internal to the executor: the per-rank execution state shared by executor.cpp (buffers,
// bindings, the stream loop, point-to-point), executor_compute.cpp (attention blocks, BwdPrep,
// Copy) and executor_collectives.cpp. The element type is a runtime value; only the kernel calls
// depend on it.
#pragma once

#include <exception>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <wallfacer/runtime/executor.hpp>
#include <wallfacer/runtime/step_session.hpp>
#include "executor_storage.hpp"

namespace wallfacer::runtime::detail {

// The one place where the runtime element type becomes a C++ type: calls `typed` with a float or
// a double, so that every typed kernel call is written once for both types.
template <typename Typed>
void with_elem_type(ElemType type, Typed&& typed) {
  if (type == ElemType::F32)
    typed(float{});
  else
    typed(double{});
}

struct BufferState {
  std::string name;
  Storage storage;
  TokenSet tokens;                       // current content, in row order
  std::array<bool, kNumFields> valid{};  // written since the token set last changed
  std::vector<DeviceBlock> memory;
};

// A received block of a collective, unpacked on completion: `elements` values from `offset` of
// the receive buffer, holding `tokens` x `heads` of the op's fields.
struct Piece {
  int64_t offset = 0, elements = 0;
  TokenSet tokens;
  HeadRange heads;
};

// A communication op posted on one stream and not yet complete.
struct InFlight {
  int32_t op = -1;
  RequestId request = -1;
  DeviceBlock send, recv;
  std::vector<Piece> pieces;  // collectives: how to read `recv`
  FlatCall flat;              // flat collectives of a whole-step program (StepHooks::flat)
};

// The operands of an attention op, checked and prepared by attention_operands(): queries in
// buf[0] at tok[0], keys and values in buf[1] at tok[1] (packed once, for every query slice), the
// query-side accumulator in buf[2] (O|Lse forward, dQ backward) and, backward only, dK|dV in buf[3].
struct AttnOperands {
  FieldMask q_fields = 0, out_fields = 0;
  BufferState* q = nullptr;
  BufferState* out = nullptr;
  BufferState* dkv = nullptr;  // backward only
  const TokenSet* q_set = nullptr;
  RowRuns dkv_runs;  // rows of the key tokens in `dkv`
  PackedBlock kv;
  std::vector<int64_t> k_pos;
  kernels::AttnShape shape;
};

// What an attention op computes on one slice of its query rows: packed queries, the packed output
// block it accumulates into, and the slice's global token positions.
using SliceKernel = std::function<void(const Storage& q, const Storage& out, const std::vector<int64_t>& q_pos)>;

class Executor {
 public:
  Executor(const Schedule& schedule, const RankProgram& program, const Plan& plan, Backend& backend,
           const ExecutorOptions& options, ElemType type);
  // Unwinding from an error: the transfers this rank posted must stop touching its buffers
  // before they are freed (Backend::abandon).
  ~Executor() {
    if (std::uncaught_exceptions() > uncaught_at_start_) backend.abandon();
  }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  void bind_inputs(const GlobalInputs& inputs);
  // One input binding, element (batch, token, head, d) from `value`. in_place: the buffer must
  // already hold the binding's tokens (a binding made after the forward ran).
  void bind_values(const Binding& binding, const std::function<double(int, int64_t, int, int)>& value, bool in_place);
  // The same from a caller's tensor in backend memory (StepSession::bind_rows), and its
  // counterpart for an output binding, which returns the elements written.
  void bind_rows(const Binding& binding, const RowTensor& source, bool in_place);
  int64_t collect_rows(const Binding& binding, const RowTensor& sink);
  // WeightGrad: the weight_grad_value contributions, or zeros with options.skip_weight_grad.
  void bind_weight_grad(const Binding& binding);
  // Runs ops [0, op_limit) (all ops by default); may be called again with a larger limit.
  void run(int64_t op_limit = INT64_MAX);
  std::vector<OutputSlice> collect_outputs(FieldMask fields = ~FieldMask(0));
  // One output binding's values.
  OutputSlice collect_output(const Binding& binding);
  // `fields` of the buffer count as never written (StepSession::restart).
  void restart_fields(int32_t index, FieldMask fields);
  // Whole-step programs: the caller's Gemm and Pointwise ops and flat collectives (null: none).
  const StepHooks* hooks = nullptr;
  const ExecutionStats& stats() const { return stats_; }

  // ---- buffers and token bookkeeping (executor.cpp) ----
  BufferState& buffer(int32_t index, int32_t op_index);
  const TokenSet& tokens(int32_t id, int32_t op_index) const;
  // Rows of `set` in `buf`; throws when a token is not held or a field was never written.
  RowRuns readable(const BufferState& buf, const TokenSet& set, FieldMask fields, int32_t op_index) const;
  // Rows for writing `set`: in place when held; otherwise the buffer's token set becomes
  // `mirror` (accumulators: the rows of the buffer they accumulate for) or `set` itself, and
  // every field is invalidated. Accumulated fields not yet valid start at their identity.
  RowRuns prepare_write(BufferState& buf, const TokenSet& set, FieldMask fields, const TokenSet* mirror,
                        int32_t op_index);
  // The op's head range (stated like the buffer's); the buffer's when the op has none.
  HeadRange op_heads(const Op& op, const BufferState& buf) const;
  std::string where(int32_t op_index) const;
  void fill_identity(const Storage& storage, Field field);

  // ---- compute ops (executor_compute.cpp) ----
  void run_compute(int32_t op_index);
  void attention_forward(const Op& op, int32_t op_index);
  void attention_backward(const Op& op, int32_t op_index);
  void backward_prep(const Op& op, int32_t op_index);
  void copy(const Op& op, int32_t op_index);

  // ---- collectives (executor_collectives.cpp) ----
  void post_collective(InFlight& flight);
  void finish_collective(InFlight& flight);
  void all_gather_post(InFlight& flight, const CollectiveSpec& spec, int me, const BufferState& in);
  void exchange_post(InFlight& flight, const CollectiveSpec& spec, int me, const BufferState& in);
  // Packed layout of `fields` of a collective over `set` x `heads`.
  Storage collective_shape(const CollectiveSpec& spec, const TokenSet& set, HeadRange heads) const;

 private:
  bool ready(int32_t op_index) const;
  // A WeightGrad all-reduce the caller synchronises itself (options.skip_weight_grad).
  bool skipped(const Op& op) const;
  bool advance_streams();
  void post(InFlight& flight);
  void post_point_to_point(InFlight& flight);
  void finish(InFlight& flight);
  void allocate_buffers();
  void compute(const Op& op, int32_t op_index);  // by kind; throws for a non-compute op
  AttnOperands attention_operands(const Op& op, FieldMask q_fields, FieldMask out_fields, int32_t op_index);
  void query_slices(const AttnOperands& operands, HeadRange heads, const SliceKernel& kernel);
  PackedBlock pack(const BufferState& buf, const RowRuns& runs, FieldMask fields, int64_t tokens, HeadRange heads,
                   bool heads_are_query);
  int member_index(const CollectiveSpec& spec, int32_t op_index) const;
  // The packed layout of `piece`, placed at its offset in `block` (a send or receive buffer).
  Storage placed_shape(const CollectiveSpec& spec, const Piece& piece, const DeviceBlock& block) const;
  // One block per member, back to back in member order, block i over the tokens and heads of
  // extent(i): the pieces with their offsets and sizes, the counts a collective call takes, and
  // the total element count.
  struct Layout {
    std::vector<Piece> pieces;
    Counts counts;
    int64_t elements = 0;
  };
  Layout lay_out(const CollectiveSpec& spec, const std::function<Piece(size_t)>& extent) const;
  // Backend memory for `elements` values of the executor's type.
  DeviceBlock elements_block(int64_t elements);
  void reduce_pieces(InFlight& flight, const Op& op, const CollectiveSpec& spec, int me);
  // Every field of a packed block at the identity of its reduction (zero; lse = -inf).
  void reset_to_identity(const Storage& block);
  void reduce_into(const Storage& acc, const Storage& src, bool merge);
  void all_reduce_post(InFlight& flight, const Op& op, const CollectiveSpec& spec);
  bool flat_hooked(const Op& op) const;
  void flat_post(InFlight& flight);
  void flat_finish(InFlight& flight);

 public:
  const Schedule& schedule;
  const RankProgram& program;
  const Plan& plan;
  Backend& backend;
  const int uncaught_at_start_ = std::uncaught_exceptions();
  const ExecutorOptions options;
  const ElemType type;
  const int batches;
  const int head_dim;
  const int group;  // query heads per kv head

 private:
  std::vector<BufferState> buffers_;
  std::vector<std::vector<int32_t>> stream_ops_;  // op indices per stream, program order
  std::array<size_t, kNumStreams> head_{};        // next op of each stream
  std::array<InFlight, kNumStreams> flight_{};    // the op in flight on each communication stream
  std::vector<char> done_;
  int64_t done_count_ = 0;
  int64_t op_limit_ = 0;  // ops at or after this index wait for a later run()
  ExecutionStats stats_;
};

// Hands every value of the slices to the sink with its batch, global token, head and
// head-dimension index (lse has one value per token and head).
void deliver(const std::vector<OutputSlice>& slices, int head_dim, const SliceSink& sink);

}  // namespace wallfacer::runtime::detail
