// Whole-step programs on the executor (step_session.hpp): the flat collectives whose memory the
// caller provides, and the session around the executor.
#include <wallfacer/runtime/step_session.hpp>

#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/core/errors.hpp>
#include "executor_impl.hpp"

namespace wallfacer::runtime {
namespace detail {

bool Executor::flat_hooked(const Op& op) const {
  if (!hooks || !hooks->flat || !is_collective(op.kind) || op.coll < 0) return false;
  return is_flat_collective(program.collectives[size_t(op.coll)]);
}

void Executor::flat_post(InFlight& flight) {
  const Op& op = program.ops[size_t(flight.op)];
  const CollectiveSpec& spec = program.collectives[size_t(op.coll)];
  const auto& ranks = plan.groups.at(size_t(spec.group)).ranks;
  const int me = int(std::find(ranks.begin(), ranks.end(), program.rank) - ranks.begin());
  if (me == int(ranks.size()))
    throw ScheduleError(
        fmt::format("{}: rank is not a member of group '{}'", where(flight.op), plan.groups[size_t(spec.group)].name));
  flight.flat = hooks->flat(flight.op);
  FlatCall& call = flight.flat;
  const size_t es = elem_size(type);
  if (spec.kind != OpKind::AllReduce && call.recv_counts.size() != ranks.size())
    throw ScheduleError(fmt::format("{}: {} receive counts for a group of {}", where(flight.op),
                                    call.recv_counts.size(), ranks.size()));
  switch (spec.kind) {
    case OpKind::AllReduce:
      flight.request = backend.iallreduce(spec.group, call.send, call.count, type);
      stats_.bytes_sent += call.count * int64_t(es);
      return;
    case OpKind::AllGather:
      flight.request = backend.iallgatherv(spec.group, call.send, call.count, call.recv, call.recv_counts, type);
      stats_.bytes_sent += call.count * int64_t(ranks.size() - 1) * int64_t(es);
      return;
    case OpKind::ReduceScatter: {
      stats_.bytes_sent += (call.count - call.recv_counts[size_t(me)]) * int64_t(es);
      if (backend.has_reduce_scatter()) {
        flight.request = backend.ireduce_scatter(spec.group, call.send, call.recv, call.recv_counts, type);
        return;
      }
      // Every member's part for this one, summed on completion in member order (deterministic).
      const int64_t mine = call.recv_counts[size_t(me)];
      flight.recv = elements_block(mine * int64_t(ranks.size()));
      flight.request = backend.ialltoallv(spec.group, call.send, call.recv_counts, flight.recv.data(),
                                          Counts(ranks.size(), mine), type);
      return;
    }
    default:
      throw ScheduleError(fmt::format("{}: a flat {} the trainer cannot bind", where(flight.op), to_string(op.kind)));
  }
}

void Executor::flat_finish(InFlight& flight) {
  const Op& op = program.ops[size_t(flight.op)];
  const CollectiveSpec& spec = program.collectives[size_t(op.coll)];
  if (spec.kind == OpKind::ReduceScatter && flight.recv.data()) {
    const auto& ranks = plan.groups.at(size_t(spec.group)).ranks;
    const int me = int(std::find(ranks.begin(), ranks.end(), program.rank) - ranks.begin());
    const int64_t mine = flight.flat.recv_counts[size_t(me)];
    const size_t bytes = size_t(mine) * elem_size(type);
    backend.copy_2d(flight.flat.recv, bytes, flight.recv.data(), bytes, bytes, 1);
    for (size_t j = 1; j < ranks.size(); ++j)
      backend.accumulate(flight.flat.recv, flight.recv.data() + j * bytes, size_t(mine), type);
  }
  if (hooks->finished) hooks->finished(flight.op);
}

namespace {

// The caller's tensor as a Storage of one field: every head of the field's class, rows_per_batch
// rows per sequence.
Storage row_tensor_storage(const RowTensor& tensor, Field field, int heads_total, int batches, int head_dim, int group,
                           ElemType type) {
  Storage s;
  s.fields = field_bit(field);
  s.heads = HeadRange{0, heads_total};
  s.heads_are_query = is_query_class(field);
  s.batches = batches;
  s.capacity = tensor.rows_per_batch;
  s.head_dim = head_dim;
  s.group = group;
  s.type = type;
  s.base[size_t(field)] = static_cast<char*>(tensor.data);
  return s;
}

// The rows of `set`'s tokens (in set order) in the caller's tensor, consecutive rows merged.
RowRuns row_tensor_runs(const RowTensor& tensor, const TokenSet& set) {
  RowRuns runs;
  for (int64_t t : positions(set)) {
    const int32_t row = t < int64_t(tensor.row_of->size()) ? (*tensor.row_of)[size_t(t)] : -1;
    if (row < 0 || row >= tensor.rows_per_batch)
      throw ScheduleError(fmt::format("token {} has no row in the caller's tensor", t));
    if (!runs.empty() && runs.back().row + runs.back().count == row)
      ++runs.back().count;
    else
      runs.push_back({row, 1});
  }
  return runs;
}

}  // namespace

void Executor::bind_rows(const Binding& binding, const RowTensor& source, bool in_place) {
  BufferState& buf = buffer(binding.buf, -1);
  const bool query = is_query_class(binding.field);
  const int heads_total = query ? schedule.dims.heads : schedule.dims.kv_heads;
  const TokenSet& set = tokens(binding.tokens, -1);
  if (binding.heads.begin < 0 || binding.heads.end > heads_total)
    throw ScheduleError(fmt::format("{}: input {} out of range", where(-1), describe(binding.heads)));
  const bool holds_data = std::any_of(buf.valid.begin(), buf.valid.end(), [](bool v) { return v; });
  if (in_place && holds_data && !map_rows(buf.tokens, set))
    throw ScheduleError(fmt::format("{}: {} binds tokens {} into buffer '{}', which holds {} after the forward",
                                    where(-1), to_string(binding.field), describe(set), buf.name,
                                    describe(buf.tokens)));
  const Storage src = row_tensor_storage(source, binding.field, heads_total, batches, head_dim, group, type);
  const RowRuns src_runs = row_tensor_runs(source, set);
  const RowRuns runs = prepare_write(buf, set, field_bit(binding.field), nullptr, -1);
  copy_rows(backend, src, src_runs, buf.storage, runs, field_bit(binding.field), binding.heads, query);
}

int64_t Executor::collect_rows(const Binding& binding, const RowTensor& sink) {
  if (binding.field == Field::WeightGrad || is_per_row_scalar(binding.field))
    throw ScheduleError(fmt::format("{}: {} is not a [token][head][d] field", where(-1), to_string(binding.field)));
  const BufferState& buf = buffer(binding.buf, -1);
  const bool query = is_query_class(binding.field);
  const int heads_total = query ? schedule.dims.heads : schedule.dims.kv_heads;
  const TokenSet& set = tokens(binding.tokens, -1);
  const RowRuns runs = readable(buf, set, field_bit(binding.field), -1);
  const Storage dst = row_tensor_storage(sink, binding.field, heads_total, batches, head_dim, group, type);
  copy_rows(backend, buf.storage, runs, dst, row_tensor_runs(sink, set), field_bit(binding.field), binding.heads,
            query);
  return int64_t(batches) * token_count(set) * binding.heads.size() * head_dim;
}

}  // namespace detail

namespace {

ExecutorOptions step_options(ExecutorOptions options) {
  options.skip_weight_grad = false;  // a step program has no attention weight-gradient all-reduce
  return options;
}

}  // namespace

StepSession::StepSession(const Schedule& schedule, const RankProgram& program, const Plan& plan, Backend& backend,
                         ElemType type, const ExecutorOptions& options, StepHooks hooks)
    : hooks_(std::move(hooks)),
      executor_(std::make_unique<detail::Executor>(schedule, program, plan, backend, step_options(options), type)) {
  if (!hooks_.compute || !hooks_.flat)
    throw ScheduleError("a whole-step session needs the caller's compute and flat-collective hooks");
  executor_->hooks = &hooks_;
}

StepSession::~StepSession() = default;

void StepSession::run(int64_t op_limit) {
  executor_->run(op_limit);
}

void StepSession::bind(const Binding& binding, const SliceSource& source, bool in_place) {
  executor_->bind_values(
      binding, [&](int b, int64_t t, int h, int d) { return source(binding.field, b, t, h, d); }, in_place);
}

void StepSession::collect(const Binding& binding, const SliceSink& sink) {
  detail::deliver({executor_->collect_output(binding)}, executor_->head_dim, sink);
}

void StepSession::bind_rows(const Binding& binding, const RowTensor& source, bool in_place) {
  executor_->bind_rows(binding, source, in_place);
}

int64_t StepSession::collect_rows(const Binding& binding, const RowTensor& sink) {
  return executor_->collect_rows(binding, sink);
}

void StepSession::restart(int32_t buffer, FieldMask fields) {
  executor_->restart_fields(buffer, fields);
}

const ExecutionStats& StepSession::stats() const {
  return executor_->stats();
}

}  // namespace wallfacer::runtime
