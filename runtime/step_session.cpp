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

void StepSession::restart(int32_t buffer, FieldMask fields) {
  executor_->restart_fields(buffer, fields);
}

const ExecutionStats& StepSession::stats() const {
  return executor_->stats();
}

}  // namespace wallfacer::runtime
