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

// Offsets of batch element b inside packed vector and per-row scalar fields.
int64_t vec_at(const Storage& s, Field f, int b) {
  return int64_t(b) * s.capacity * s.heads_of(f).size() * s.head_dim;
}
int64_t row_at(const Storage& s, Field f, int b) {
  return int64_t(b) * s.capacity * s.heads_of(f).size();
}

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

template <typename T>
void forward_batches(Backend& backend, const Storage& q, const Storage& kv, const Storage& acc,
                     const std::vector<int64_t>& q_pos, const std::vector<int64_t>& k_pos,
                     const kernels::AttnShape& shape) {
  for (int b = 0; b < q.batches; ++b) {
    kernels::QueryBlock<T> qb{q.ptr<T>(Field::Q) + vec_at(q, Field::Q, b), q_pos.data(), q.capacity};
    kernels::KeyBlock<T> kb{kv.ptr<T>(Field::K) + vec_at(kv, Field::K, b),
                            kv.ptr<T>(Field::V) + vec_at(kv, Field::V, b), k_pos.data(), kv.capacity};
    backend.attention_forward(qb, kb, shape, acc.ptr<T>(Field::O) + vec_at(acc, Field::O, b),
                              acc.ptr<T>(Field::Lse) + row_at(acc, Field::Lse, b), 0, 0);
  }
}

template <typename T>
void backward_batches(Backend& backend, const Storage& q, const Storage& kv, const Storage& dq, const Storage& dkv,
                      const std::vector<int64_t>& q_pos, const std::vector<int64_t>& k_pos,
                      const kernels::AttnShape& shape) {
  for (int b = 0; b < q.batches; ++b) {
    kernels::QueryBlock<T> qb{q.ptr<T>(Field::Q) + vec_at(q, Field::Q, b), q_pos.data(), q.capacity};
    kernels::KeyBlock<T> kb{kv.ptr<T>(Field::K) + vec_at(kv, Field::K, b),
                            kv.ptr<T>(Field::V) + vec_at(kv, Field::V, b), k_pos.data(), kv.capacity};
    kernels::BackwardInputs<T> in;
    in.dO = q.ptr<T>(Field::dO) + vec_at(q, Field::dO, b);
    in.lse = q.ptr<T>(Field::Lse) + row_at(q, Field::Lse, b);
    in.D = q.ptr<T>(Field::D) + row_at(q, Field::D, b);
    backend.attention_backward(qb, kb, in, shape, dq.ptr<T>(Field::dQ) + vec_at(dq, Field::dQ, b),
                               dkv.ptr<T>(Field::dK) + vec_at(dkv, Field::dK, b),
                               dkv.ptr<T>(Field::dV) + vec_at(dkv, Field::dV, b));
  }
}

template <typename T>
void prep_batches(Backend& backend, const Storage& in, const Storage& out) {
  const int heads = in.heads_of(Field::O).size();
  for (int b = 0; b < in.batches; ++b)
    backend.backward_prep(in.ptr<T>(Field::O) + vec_at(in, Field::O, b),
                          in.ptr<T>(Field::dO) + vec_at(in, Field::dO, b), in.capacity, heads, in.head_dim, 0,
                          out.ptr<T>(Field::D) + row_at(out, Field::D, b), 0);
}

}  // namespace

void Executor::run_compute(int32_t op_index) {
  const Op& op = program.ops[size_t(op_index)];
  const auto start = std::chrono::steady_clock::now();
  switch (op.kind) {
    case OpKind::AttnFwd:
      attention_forward(op, op_index);
      break;
    case OpKind::AttnBwd:
      attention_backward(op, op_index);
      break;
    case OpKind::BwdPrep:
      backward_prep(op, op_index);
      break;
    case OpKind::Copy:
      copy(op, op_index);
      break;
    default:
      throw ScheduleError(fmt::format("{}: not a compute op but on the compute stream", where(op_index)));
  }
  stats_.compute_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.flops += op.flops;
}

void Executor::attention_forward(const Op& op, int32_t i) {
  BufferState& qb = buffer(op.buf[0], i);
  BufferState& kvb = buffer(op.buf[1], i);
  BufferState& acc = buffer(op.buf[2], i);
  const TokenSet& q_set = tokens(op.tok[0], i);
  const TokenSet& k_set = tokens(op.tok[1], i);
  readable(qb, q_set, kQ, i);
  RowRuns k_runs = readable(kvb, k_set, kKV, i);
  prepare_write(acc, q_set, kOLse, &qb.tokens, i);
  const HeadRange heads = op.heads;
  PackedBlock kv = pack(kvb, k_runs, kKV, token_count(k_set), heads, true);
  const auto k_pos = positions(k_set);
  const kernels::AttnShape shape = shape_of(op, kv.shape, head_dim, group);
  const auto slices = split_tokens(q_set, options.progress_rows > 0 ? options.progress_rows : INT64_MAX);
  for (const TokenSet& slice : slices) {
    const int64_t n = token_count(slice);
    RowRuns acc_runs = *map_rows(acc.tokens, slice);
    PackedBlock q = pack(qb, *map_rows(qb.tokens, slice), kQ, n, heads, true);
    PackedBlock o = pack(acc, acc_runs, kOLse, n, heads, true);
    const auto q_pos = positions(slice);
    if (type == ElemType::F32)
      forward_batches<float>(backend, q.shape, kv.shape, o.shape, q_pos, k_pos, shape);
    else
      forward_batches<double>(backend, q.shape, kv.shape, o.shape, q_pos, k_pos, shape);
    copy_rows(backend, o.shape, identity_runs(n), acc.storage, acc_runs, kOLse, heads, true);
    if (slices.size() > 1) backend.progress();
  }
}

void Executor::attention_backward(const Op& op, int32_t i) {
  BufferState& qb = buffer(op.buf[0], i);
  BufferState& kvb = buffer(op.buf[1], i);
  BufferState& dqb = buffer(op.buf[2], i);
  BufferState& dkvb = buffer(op.buf[3], i);
  const TokenSet& q_set = tokens(op.tok[0], i);
  const TokenSet& k_set = tokens(op.tok[1], i);
  readable(qb, q_set, kBundle, i);
  RowRuns k_runs = readable(kvb, k_set, kKV, i);
  prepare_write(dqb, q_set, kDQ, &qb.tokens, i);
  RowRuns dkv_runs = prepare_write(dkvb, k_set, kDKV, &kvb.tokens, i);
  const HeadRange heads = op.heads;
  const int64_t nk = token_count(k_set);
  PackedBlock kv = pack(kvb, k_runs, kKV, nk, heads, true);
  PackedBlock dkv = pack(dkvb, dkv_runs, kDKV, nk, heads, true);
  const auto k_pos = positions(k_set);
  const kernels::AttnShape shape = shape_of(op, kv.shape, head_dim, group);
  const auto slices = split_tokens(q_set, options.progress_rows > 0 ? options.progress_rows : INT64_MAX);
  for (const TokenSet& slice : slices) {
    const int64_t n = token_count(slice);
    RowRuns dq_runs = *map_rows(dqb.tokens, slice);
    PackedBlock q = pack(qb, *map_rows(qb.tokens, slice), kBundle, n, heads, true);
    PackedBlock dq = pack(dqb, dq_runs, kDQ, n, heads, true);
    const auto q_pos = positions(slice);
    if (type == ElemType::F32)
      backward_batches<float>(backend, q.shape, kv.shape, dq.shape, dkv.shape, q_pos, k_pos, shape);
    else
      backward_batches<double>(backend, q.shape, kv.shape, dq.shape, dkv.shape, q_pos, k_pos, shape);
    copy_rows(backend, dq.shape, identity_runs(n), dqb.storage, dq_runs, kDQ, heads, true);
    if (slices.size() > 1) backend.progress();
  }
  copy_rows(backend, dkv.shape, identity_runs(nk), dkvb.storage, dkv_runs, kDKV, heads, true);
}

void Executor::backward_prep(const Op& op, int32_t i) {
  BufferState& buf = buffer(op.buf[0], i);
  const TokenSet& set = tokens(op.tok[0], i);
  const HeadRange heads = op_heads(op, buf);
  const int64_t n = token_count(set);
  RowRuns runs = readable(buf, set, field_mask({Field::O, Field::dO}), i);
  PackedBlock in = pack(buf, runs, field_mask({Field::O, Field::dO}), n, heads, true);
  PackedBlock out = make_packed(backend, field_mask({Field::D}), n, heads, true, batches, head_dim, group, type);
  if (type == ElemType::F32)
    prep_batches<float>(backend, in.shape, out.shape);
  else
    prep_batches<double>(backend, in.shape, out.shape);
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
