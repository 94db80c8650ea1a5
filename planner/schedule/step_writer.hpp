// Appends whole-step ops to a step template (step.cpp): GEMMs, memory-bound ops, flat
// collectives over plan groups and pipeline stage messages, with explicit dependencies (stream
// order is implicit). Private to the schedule stage.
#pragma once

#include <cstdint>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/per_stream.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include "strategies/common.hpp"

namespace wallfacer::detail {

class TemplateWriter {
 public:
  TemplateWriter(const Plan& plan, RankProgram& program, TokenSetPool& pool, ScheduleDims dims)
      : plan_(plan), program_(program), pool_(pool), dims_(dims) {}

  void set_phase(Phase phase) { phase_ = phase; }
  void set_flags(uint8_t flags) { flags_ = flags; }
  uint32_t size() const { return uint32_t(program_.ops.size()); }

  // The last op on the compute stream so far (-1: none).
  int32_t last_compute() const { return last_compute_; }

  int32_t gemm(StepOp label, GemmPart part, int64_t m, int64_t n, int64_t k, const std::vector<int32_t>& deps = {}) {
    Op op = base(OpKind::Gemm, Stream::Compute, label);
    op.part = part;
    op.gemm[0] = int32_t(m);
    op.gemm[1] = int32_t(n);
    op.gemm[2] = int32_t(k);
    op.flops = 2.0 * double(m) * double(n) * double(k);
    op.bytes = int64_t(dims_.elem_bytes) * (m * k + k * n + m * n);
    return last_compute_ = program_.add(op, deps);
  }

  int32_t pointwise(StepOp label, int64_t bytes, const std::vector<int32_t>& deps = {}) {
    Op op = base(OpKind::Pointwise, Stream::Compute, label);
    op.bytes = bytes;
    return last_compute_ = program_.add(op, deps);
  }

  // A flat collective of `elements` values of `field` over plan group `group`, on `stream`.
  int32_t flat(OpKind kind, int32_t group, Field field, int64_t elements, StepOp label,
               const std::vector<int32_t>& deps, Stream stream = Stream::Collective) {
    CollectiveSpec spec;
    spec.kind = kind;
    spec.group = group;
    spec.fields = field_bit(field);
    spec.elements = elements;
    spec.algorithm = plan_.groups[size_t(group)].all_reduce;
    const int p = int(plan_.groups[size_t(group)].ranks.size());
    Op op = base(kind, stream, label);
    op.fields = spec.fields;
    op.buf[0] = flat_buffer(field);
    op.bytes = detail::collective_send_bytes(dims_, spec, 0, p, pool_, dims_.batch, field == Field::WeightGrad);
    op.coll = int32_t(program_.collectives.size());
    program_.collectives.push_back(std::move(spec));
    return program_.add(op, deps);
  }

  // A pipeline stage message of `elements` activations (or their gradients) to or from rank
  // `peer`: a Send or Recv of the flat activation buffer in flow set `flow_set`.
  int32_t stage_message(OpKind kind, int peer, int32_t tag, int32_t flow_set, int64_t elements,
                        const std::vector<int32_t>& deps) {
    Op op = base(kind, kind == OpKind::Send ? Stream::Send : Stream::Recv, StepOp::StageTransfer);
    op.peer = peer;
    op.tag = tag;
    op.flow_set = flow_set;
    op.fields = fieldset::kActivation;
    op.buf[0] = stage_buffer(kind == OpKind::Send, tag == 0);
    op.bytes = int64_t(dims_.elem_bytes) * elements;
    return program_.add(op, deps);
  }

  // The last op of each stream among ops [begin, end).
  std::vector<int32_t> last_per_stream(uint32_t begin, uint32_t end) const {
    OpPerStream last = no_op_on_any_stream();
    for (uint32_t i = begin; i < end; ++i)
      last[size_t(program_.ops[i].stream)] = int32_t(i);
    std::vector<int32_t> out;
    for (int32_t l : last)
      if (l >= 0) out.push_back(l);
    return out;
  }

  RankProgram& program() { return program_; }

 private:
  Op base(OpKind kind, Stream stream, StepOp label) const {
    Op op;
    op.kind = kind;
    op.stream = stream;
    op.phase = phase_;
    op.label = label;
    op.flags = flags_;
    return op;
  }
  // One buffer per flat field (no rows), declared on first use.
  int32_t flat_buffer(Field field) {
    const int slot = field == Field::WeightGrad ? 0 : field == Field::Weight ? 1 : 2;
    static constexpr const char* kNames[] = {"wgrads", "weights", "activations"};
    int32_t& b = flat_buffers_[slot];
    if (b < 0) {
      b = int32_t(program_.buffers.size());
      program_.buffers.push_back(
          {kNames[slot], field_bit(field), {}, 0, field == Field::WeightGrad && dims_.grad_elem_bytes == 4});
    }
    return b;
  }

  // Stage messages have buffers of their own, one per direction and content, so that a receive
  // for the next micro-batch never overwrites what a send still reads.
  int32_t stage_buffer(bool send, bool activations) {
    static constexpr const char* kNames[] = {"stage.grad_in", "stage.act_in", "stage.grad_out", "stage.act_out"};
    const int slot = (send ? 2 : 0) + (activations ? 1 : 0);
    int32_t& b = stage_buffers_[slot];
    if (b < 0) {
      b = int32_t(program_.buffers.size());
      program_.buffers.push_back({kNames[slot], fieldset::kActivation, {}, 0, false});
    }
    return b;
  }

  const Plan& plan_;
  RankProgram& program_;
  TokenSetPool& pool_;
  ScheduleDims dims_;
  Phase phase_ = Phase::Forward;
  uint8_t flags_ = 0;
  int32_t flat_buffers_[3] = {-1, -1, -1};
  int32_t stage_buffers_[4] = {-1, -1, -1, -1};
  int32_t last_compute_ = -1;
};

}  // namespace wallfacer::detail
