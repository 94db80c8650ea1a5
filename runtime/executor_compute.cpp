// Compute ops of the executor: attention blocks forward and backward, BwdPrep and Copy. Every
// operand is gathered into a dense packed block (the kernels' layout per batch element), so the
// kernels never see buffer strides, and the rows a block writes are scattered back afterwards.
// The copies are O(rows) against the kernels' O(rows x keys).
#include <fmt/format.h>

#include <chrono>

#include <wallfacer/core/errors.hpp>
#include "executor_impl.hpp"

namespace wallfacer::runtime::detail {
namespace {

using namespace fieldset;
constexpr FieldMask kBundle = kQueryBundle;

kernels::AttnShape shape_of(const Op& op, const Storage& kv, int head_dim, int group) {
  kernels::AttnShape shape;
  shape.heads = op.heads.size();
  shape.kv_heads = kv.heads_of(Field::K).size();
  shape.head_dim = head_dim;
  shape.q_head_offset = op.heads.begin;
  shape.kv_head_offset = kv.heads_of(Field::K).begin;
  shape.group = group;
  shape.causal = op.mask == Mask::Causal;
  return shape;
}

// The kernels' view of batch element b of packed query and key blocks.
template <typename T>
kernels::QueryBlock<T> query_block(const Storage& q, const std::vector<int64_t>& pos, int b) {
  return {q.batch_ptr<T>(Field::Q, b), pos.data(), q.capacity};
}
template <typename T>
kernels::KeyBlock<T> key_block(const Storage& kv, const std::vector<int64_t>& pos, int b) {
  return {kv.batch_ptr<T>(Field::K, b), kv.batch_ptr<T>(Field::V, b), pos.data(), kv.capacity};
}

template <typename T>
void forward_batches(Backend& backend, const Storage& q, const Storage& kv, const Storage& acc,
                     const std::vector<int64_t>& q_pos, const std::vector<int64_t>& k_pos,
                     const kernels::AttnShape& shape) {
  for (int b = 0; b < q.batches; ++b)
    backend.attention_forward(query_block<T>(q, q_pos, b), key_block<T>(kv, k_pos, b), shape,
                              acc.batch_ptr<T>(Field::O, b), acc.batch_ptr<T>(Field::Lse, b), 0, 0);
}

template <typename T>
void backward_batches(Backend& backend, const Storage& q, const Storage& kv, const Storage& dq, const Storage& dkv,
                      const std::vector<int64_t>& q_pos, const std::vector<int64_t>& k_pos,
                      const kernels::AttnShape& shape) {
  for (int b = 0; b < q.batches; ++b) {
    kernels::BackwardInputs<T> in;
    in.dO = q.batch_ptr<T>(Field::dO, b);
    in.lse = q.batch_ptr<T>(Field::Lse, b);
    in.D = q.batch_ptr<T>(Field::D, b);
    backend.attention_backward(query_block<T>(q, q_pos, b), key_block<T>(kv, k_pos, b), in, shape,
                               dq.batch_ptr<T>(Field::dQ, b), dkv.batch_ptr<T>(Field::dK, b),
                               dkv.batch_ptr<T>(Field::dV, b));
  }
}

template <typename T>
void prep_batches(Backend& backend, const Storage& in, const Storage& out) {
  const int heads = in.heads_of(Field::O).size();
  for (int b = 0; b < in.batches; ++b)
    backend.backward_prep(in.batch_ptr<T>(Field::O, b), in.batch_ptr<T>(Field::dO, b), in.capacity, heads, in.head_dim,
                          0, out.batch_ptr<T>(Field::D, b), 0);
}

}  // namespace

void Executor::run_compute(int32_t op_index) {
  const Op& op = program.ops[size_t(op_index)];
  const auto start = std::chrono::steady_clock::now();
  compute(op, op_index);
  stats_.compute_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.flops += op.flops;
}

void Executor::compute(const Op& op, int32_t i) {
  switch (op.kind) {
    case OpKind::AttnFwd:
      return attention_forward(op, i);
    case OpKind::AttnBwd:
      return attention_backward(op, i);
    case OpKind::BwdPrep:
      return backward_prep(op, i);
    case OpKind::Copy:
      return copy(op, i);
    case OpKind::Gemm:
    case OpKind::Pointwise:
      if (hooks && hooks->compute) return hooks->compute(i);
      throw ScheduleError(fmt::format("{}: a whole-step op, which runs only with the trainer's kernels", where(i)));
    default:
      throw ScheduleError(fmt::format("{}: not a compute op but on the compute stream", where(i)));
  }
}

// In the order both ops always took: every buffer and token set looked up, the reads checked and
// the accumulators prepared before anything is packed, so that a broken op throws before any copy.
AttnOperands Executor::attention_operands(const Op& op, FieldMask q_fields, FieldMask out_fields, int32_t i) {
  AttnOperands a;
  a.q_fields = q_fields;
  a.out_fields = out_fields;
  a.q = &buffer(op.buf[0], i);
  BufferState& kvb = buffer(op.buf[1], i);
  a.out = &buffer(op.buf[2], i);
  if (op.kind == OpKind::AttnBwd) a.dkv = &buffer(op.buf[3], i);
  a.q_set = &tokens(op.tok[0], i);
  const TokenSet& k_set = tokens(op.tok[1], i);
  readable(*a.q, *a.q_set, q_fields, i);
  RowRuns k_runs = readable(kvb, k_set, kKV, i);
  prepare_write(*a.out, *a.q_set, out_fields, &a.q->tokens, i);
  if (a.dkv) a.dkv_runs = prepare_write(*a.dkv, k_set, kDKV, &kvb.tokens, i);
  a.kv = pack(kvb, k_runs, kKV, token_count(k_set), op.heads, true);
  a.k_pos = positions(k_set);
  a.shape = shape_of(op, a.kv.shape, head_dim, group);
  return a;
}

// Slices of at most options.progress_rows query rows, with a progress call between them: a long
// block would otherwise hold back the transfers in flight on the other streams until it ends.
// Each slice packs its queries and the output rows it accumulates into (read, then written back).
void Executor::query_slices(const AttnOperands& a, HeadRange heads, const SliceKernel& kernel) {
  const auto slices = split_tokens(*a.q_set, options.progress_rows > 0 ? options.progress_rows : INT64_MAX);
  for (const TokenSet& slice : slices) {
    const int64_t n = token_count(slice);
    RowRuns out_runs = *map_rows(a.out->tokens, slice);
    PackedBlock q = pack(*a.q, *map_rows(a.q->tokens, slice), a.q_fields, n, heads, true);
    PackedBlock out = pack(*a.out, out_runs, a.out_fields, n, heads, true);
    kernel(q.shape, out.shape, positions(slice));
    copy_rows(backend, out.shape, identity_runs(n), a.out->storage, out_runs, a.out_fields, heads, true);
    if (slices.size() > 1) backend.progress();
  }
}

void Executor::attention_forward(const Op& op, int32_t i) {
  const AttnOperands a = attention_operands(op, kQ, kOLse, i);
  query_slices(a, op.heads, [&](const Storage& q, const Storage& o, const std::vector<int64_t>& q_pos) {
    with_elem_type(type,
                   [&](auto t) { forward_batches<decltype(t)>(backend, q, a.kv.shape, o, q_pos, a.k_pos, a.shape); });
  });
}

void Executor::attention_backward(const Op& op, int32_t i) {
  const AttnOperands a = attention_operands(op, kBundle, kDQ, i);
  const HeadRange heads = op.heads;
  const int64_t nk = int64_t(a.k_pos.size());
  PackedBlock dkv = pack(*a.dkv, a.dkv_runs, kDKV, nk, heads, true);
  query_slices(a, heads, [&](const Storage& q, const Storage& dq, const std::vector<int64_t>& q_pos) {
    with_elem_type(type, [&](auto t) {
      backward_batches<decltype(t)>(backend, q, a.kv.shape, dq, dkv.shape, q_pos, a.k_pos, a.shape);
    });
  });
  // dK and dV accumulate over every query slice, and are written back once.
  copy_rows(backend, dkv.shape, identity_runs(nk), a.dkv->storage, a.dkv_runs, kDKV, heads, true);
}

void Executor::backward_prep(const Op& op, int32_t i) {
  BufferState& buf = buffer(op.buf[0], i);
  const TokenSet& set = tokens(op.tok[0], i);
  const HeadRange heads = op_heads(op, buf);
  const int64_t n = token_count(set);
  RowRuns runs = readable(buf, set, field_mask({Field::O, Field::dO}), i);
  PackedBlock in = pack(buf, runs, field_mask({Field::O, Field::dO}), n, heads, true);
  PackedBlock out = make_packed(backend, field_mask({Field::D}), n, heads, true, batches, head_dim, group, type);
  with_elem_type(type, [&](auto t) { prep_batches<decltype(t)>(backend, in.shape, out.shape); });
  RowRuns d_runs = prepare_write(buf, set, field_mask({Field::D}), nullptr, i);
  copy_rows(backend, out.shape, identity_runs(n), buf.storage, d_runs, field_mask({Field::D}), heads, true);
}

void Executor::copy(const Op& op, int32_t i) {
  BufferState& src = buffer(op.buf[0], i);
  BufferState& dst = buffer(op.buf[1], i);
  const TokenSet& set = tokens(op.tok[0], i);
  const HeadRange heads = op_heads(op, dst);
  const bool query = dst.storage.heads_are_query;
  const int64_t n = token_count(set);
  // Through a packed block, so that a copy inside one buffer cannot read rows it already wrote.
  PackedBlock block = pack(src, readable(src, set, op.fields, i), op.fields, n, heads, query);
  RowRuns runs = prepare_write(dst, set, op.fields, nullptr, i);
  copy_rows(backend, block.shape, identity_runs(n), dst.storage, runs, op.fields, heads, query);
}

}  // namespace wallfacer::runtime::detail
