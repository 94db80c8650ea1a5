// Collectives of the executor, by the semantics of CollectiveSpec (schedule.hpp):
//   AllGather      every member's input block, gathered in member order into the output.
//   AllToAll       member i sends j the intersection of in_i and out_j (tokens and heads).
//   ReduceScatter  the same exchange, then out_j = the reduction of the received blocks: Sum, or
//                  LseMerge (the stable merge of partial (O, lse) pairs, applied in member order).
//                  A Sum whose inputs are identical on every member uses the backend's
//                  reduce-scatter when it has one.
//   AllReduce      in place, WeightGrad (flat) or the buffer's current rows of the fields.
// Head ranges of a collective are stated in query heads when its fields include a query-class
// field and in kv heads otherwise.
#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/core/errors.hpp>
#include "executor_impl.hpp"

namespace wallfacer::runtime::detail {
namespace {

HeadRange heads_or_empty(HeadRange a, HeadRange b) {
  HeadRange h = intersect(a, b);
  return h.size() > 0 ? h : HeadRange{0, 0};
}

// Whether every member gives the same tokens and heads, so that all pack the same structure.
bool identical_inputs(const CollectiveSpec& spec) {
  for (size_t i = 1; i < spec.in_tokens.size(); ++i)
    if (spec.in_tokens[i] != spec.in_tokens[0] || spec.in_heads[i] != spec.in_heads[0]) return false;
  return true;
}

}  // namespace

int Executor::member_index(const CollectiveSpec& spec, int32_t op_index) const {
  if (spec.group < 0 || size_t(spec.group) >= plan.groups.size())
    throw ScheduleError(fmt::format("{}: collective on unknown group {}", where(op_index), spec.group));
  const auto& ranks = plan.groups[size_t(spec.group)].ranks;
  auto it = std::find(ranks.begin(), ranks.end(), program.rank);
  if (it == ranks.end())
    throw ScheduleError(
        fmt::format("{}: rank is not a member of group '{}'", where(op_index), plan.groups[size_t(spec.group)].name));
  const size_t n = ranks.size();
  if (spec.kind != OpKind::AllReduce && (spec.in_tokens.size() != n || spec.out_tokens.size() != n ||
                                         spec.in_heads.size() != n || spec.out_heads.size() != n))
    throw ScheduleError(fmt::format("{}: collective spec does not list every member of its group", where(op_index)));
  return int(it - ranks.begin());
}

void Executor::post_collective(InFlight& flight) {
  const Op& op = program.ops[size_t(flight.op)];
  if (op.coll < 0 || size_t(op.coll) >= program.collectives.size())
    throw ScheduleError(fmt::format("{}: collective index {} out of range", where(flight.op), op.coll));
  const CollectiveSpec& spec = program.collectives[size_t(op.coll)];
  const int me = member_index(spec, flight.op);
  if (spec.kind == OpKind::AllReduce) {
    all_reduce_post(flight, op, spec);
    return;
  }
  BufferState& in = buffer(op.buf[0], flight.op);
  readable(in, tokens(spec.in_tokens[size_t(me)], flight.op), spec.fields, flight.op);
  if (spec.kind == OpKind::AllGather)
    all_gather_post(flight, spec, me, in);
  else
    exchange_post(flight, spec, me, in);
}

Storage Executor::collective_shape(const CollectiveSpec& spec, const TokenSet& set, HeadRange heads) const {
  return packed_shape(spec.fields, token_count(set), heads, mask_has_query_field(spec.fields), batches, head_dim, group,
                      type);
}

Storage Executor::placed_shape(const CollectiveSpec& spec, const Piece& piece, const DeviceBlock& block) const {
  Storage shape = collective_shape(spec, piece.tokens, piece.heads);
  place_packed(shape, block.data() + size_t(piece.offset) * elem_size(type));
  return shape;
}

Executor::Layout Executor::lay_out(const CollectiveSpec& spec, const std::function<Piece(size_t)>& extent) const {
  Layout layout;
  for (size_t i = 0; i < spec.in_tokens.size(); ++i) {
    Piece piece = extent(i);
    piece.offset = layout.elements;
    piece.elements = packed_elements(collective_shape(spec, piece.tokens, piece.heads));
    layout.counts.push_back(piece.elements);
    layout.elements += piece.elements;
    layout.pieces.push_back(std::move(piece));
  }
  return layout;
}

// At least one byte: a backend need not hand out memory for nothing, and an empty block still
// needs an address to post.
DeviceBlock Executor::elements_block(int64_t elements) {
  return DeviceBlock(backend, std::max<size_t>(size_t(elements) * elem_size(type), 1));
}

void Executor::all_gather_post(InFlight& flight, const CollectiveSpec& spec, int me, const BufferState& in) {
  const size_t n = spec.in_tokens.size();
  const TokenSet& my_in = tokens(spec.in_tokens[size_t(me)], flight.op);
  PackedBlock block = pack(in, *map_rows(in.tokens, my_in), spec.fields, token_count(my_in), spec.in_heads[size_t(me)],
                           mask_has_query_field(spec.fields));
  Layout recv = lay_out(spec, [&](size_t i) {
    return Piece{0, 0, tokens(spec.in_tokens[i], flight.op), spec.in_heads[i]};
  });
  flight.pieces = std::move(recv.pieces);
  flight.recv = elements_block(recv.elements);
  flight.send = std::move(block.memory);
  flight.request =
      backend.iallgatherv(spec.group, flight.send.data(), block.elements, flight.recv.data(), recv.counts, type);
  stats_.bytes_sent += block.elements * int64_t(elem_size(type)) * int64_t(n - 1);
}

// AllToAll and ReduceScatter: block j of the send buffer is in_me restricted to out_j.
void Executor::exchange_post(InFlight& flight, const CollectiveSpec& spec, int me, const BufferState& in) {
  const size_t es = elem_size(type);
  const TokenSet& my_in = tokens(spec.in_tokens[size_t(me)], flight.op);
  const HeadRange my_in_heads = spec.in_heads[size_t(me)];
  Layout send = lay_out(spec, [&](size_t j) {
    const HeadRange h = heads_or_empty(my_in_heads, spec.out_heads[j]);
    return Piece{0, 0, h.size() > 0 ? intersect(my_in, tokens(spec.out_tokens[j], flight.op)) : TokenSet{}, h};
  });
  stats_.bytes_sent += (send.elements - send.counts[size_t(me)]) * int64_t(es);
  flight.send = elements_block(send.elements);
  for (const Piece& part : send.pieces)
    copy_rows(backend, in.storage, *map_rows(in.tokens, part.tokens), placed_shape(spec, part, flight.send),
              identity_runs(token_count(part.tokens)), spec.fields, part.heads, mask_has_query_field(spec.fields));
  if (spec.kind == OpKind::ReduceScatter && spec.reduction == Reduction::Sum && identical_inputs(spec) &&
      backend.has_reduce_scatter()) {
    // Every member packed the same structure, so the backend can sum the blocks itself.
    Piece mine = send.pieces[size_t(me)];
    mine.offset = 0;
    flight.pieces.push_back(mine);
    flight.recv = elements_block(mine.elements);
    flight.request = backend.ireduce_scatter(spec.group, flight.send.data(), flight.recv.data(), send.counts, type);
    return;
  }
  const TokenSet& my_out = tokens(spec.out_tokens[size_t(me)], flight.op);
  const HeadRange my_out_heads = spec.out_heads[size_t(me)];
  Layout recv = lay_out(spec, [&](size_t i) {
    const HeadRange h = heads_or_empty(spec.in_heads[i], my_out_heads);
    return Piece{0, 0, h.size() > 0 ? intersect(tokens(spec.in_tokens[i], flight.op), my_out) : TokenSet{}, h};
  });
  flight.pieces = std::move(recv.pieces);
  flight.recv = elements_block(recv.elements);
  flight.request =
      backend.ialltoallv(spec.group, flight.send.data(), send.counts, flight.recv.data(), recv.counts, type);
}

void Executor::all_reduce_post(InFlight& flight, const Op& op, const CollectiveSpec& spec) {
  BufferState& buf = buffer(op.buf[0], flight.op);
  const size_t es = elem_size(type);
  if (spec.fields == field_bit(Field::WeightGrad)) {
    readable(buf, buf.tokens, spec.fields, flight.op);
    if (spec.elements > buf.storage.weight_elements)
      throw ScheduleError(
          fmt::format("{}: all-reduce of {} elements exceeds the buffer", where(flight.op), spec.elements));
    flight.request = backend.iallreduce(spec.group, buf.storage.base[size_t(Field::WeightGrad)], spec.elements, type);
    stats_.bytes_sent += spec.elements * int64_t(es);
    return;
  }
  RowRuns runs = readable(buf, buf.tokens, spec.fields, flight.op);
  PackedBlock block =
      pack(buf, runs, spec.fields, token_count(buf.tokens), buf.storage.heads, buf.storage.heads_are_query);
  flight.send = std::move(block.memory);
  flight.request = backend.iallreduce(spec.group, flight.send.data(), block.elements, type);
  stats_.bytes_sent += block.elements * int64_t(es);
}

void Executor::finish_collective(InFlight& flight) {
  const Op& op = program.ops[size_t(flight.op)];
  const CollectiveSpec& spec = program.collectives[size_t(op.coll)];
  const int me = member_index(spec, flight.op);
  if (spec.kind == OpKind::AllReduce) {
    if (spec.fields == field_bit(Field::WeightGrad)) return;
    BufferState& buf = buffer(op.buf[0], flight.op);
    const int64_t n = token_count(buf.tokens);
    Storage shape =
        packed_shape(spec.fields, n, buf.storage.heads, buf.storage.heads_are_query, batches, head_dim, group, type);
    place_packed(shape, flight.send.data());
    copy_rows(backend, shape, identity_runs(n), buf.storage, identity_runs(n), spec.fields, buf.storage.heads,
              buf.storage.heads_are_query);
    return;
  }
  if (spec.kind == OpKind::ReduceScatter) {
    reduce_pieces(flight, op, spec, me);
    return;
  }
  BufferState& out = buffer(op.buf[1], flight.op);
  const TokenSet& my_out = tokens(spec.out_tokens[size_t(me)], flight.op);
  prepare_write(out, my_out, spec.fields, nullptr, flight.op);
  for (const Piece& piece : flight.pieces) {
    if (piece.elements == 0) continue;
    auto runs = map_rows(out.tokens, piece.tokens);
    if (!runs)
      throw ScheduleError(fmt::format("{}: received tokens {} are not among the output tokens {}", where(flight.op),
                                      describe(piece.tokens), describe(out.tokens)));
    copy_rows(backend, placed_shape(spec, piece, flight.recv), identity_runs(token_count(piece.tokens)), out.storage,
              *runs, spec.fields, piece.heads, mask_has_query_field(spec.fields));
  }
}

// Reduces the received pieces into an output-shaped block that starts at the identity (zero;
// lse = -inf for LseMerge), in member order, then writes it to the output buffer.
void Executor::reduce_pieces(InFlight& flight, const Op& op, const CollectiveSpec& spec, int me) {
  const bool query = mask_has_query_field(spec.fields);
  const bool merge = spec.reduction == Reduction::LseMerge;
  if (merge && spec.fields != (field_bit(Field::O) | field_bit(Field::Lse)))
    throw ScheduleError(fmt::format("{}: LseMerge needs exactly the fields O|Lse", where(flight.op)));
  const TokenSet& my_out = tokens(spec.out_tokens[size_t(me)], flight.op);
  const HeadRange out_heads = spec.out_heads[size_t(me)];
  const int64_t n = token_count(my_out);
  PackedBlock acc = make_packed(backend, spec.fields, n, out_heads, query, batches, head_dim, group, type);
  PackedBlock scratch = make_packed(backend, spec.fields, n, out_heads, query, batches, head_dim, group, type);
  reset_to_identity(acc.shape);
  for (const Piece& piece : flight.pieces) {
    if (piece.elements == 0) continue;
    const Storage shape = placed_shape(spec, piece, flight.recv);
    const Storage* src = &shape;
    if (piece.tokens != my_out || piece.heads != out_heads) {
      // A piece covering part of the output reaches it through a scratch block at the identity.
      reset_to_identity(scratch.shape);
      auto runs = map_rows(my_out, piece.tokens);
      if (!runs)
        throw ScheduleError(fmt::format("{}: reduce-scatter piece outside the output tokens", where(flight.op)));
      copy_rows(backend, shape, identity_runs(shape.capacity), scratch.shape, *runs, spec.fields, piece.heads, query);
      src = &scratch.shape;
    }
    reduce_into(acc.shape, *src, merge);
  }
  BufferState& out = buffer(op.buf[1], flight.op);
  RowRuns runs = prepare_write(out, my_out, spec.fields, nullptr, flight.op);
  copy_rows(backend, acc.shape, identity_runs(n), out.storage, runs, spec.fields, out_heads, query);
}

void Executor::reset_to_identity(const Storage& block) {
  for (int f = 0; f < kNumFields; ++f)
    if (block.has(Field(f))) fill_identity(block, Field(f));
}

// acc += src field by field for a Sum; for LseMerge the stable merge of the partial (O, lse) of
// src into acc, per batch element. Both are packed blocks of the same shape.
void Executor::reduce_into(const Storage& acc, const Storage& src, bool merge) {
  if (!merge) {
    for (int f = 0; f < kNumFields; ++f)
      if (acc.has(Field(f)))
        backend.accumulate(acc.base[size_t(f)], src.base[size_t(f)], size_t(acc.elements(Field(f))), type);
    return;
  }
  const int heads = acc.heads_of(Field::O).size();
  for (int b = 0; b < batches; ++b)
    with_elem_type(type, [&](auto t) {
      using T = decltype(t);
      backend.merge_partial(acc.batch_ptr<T>(Field::O, b), acc.batch_ptr<T>(Field::Lse, b),
                            src.batch_ptr<T>(Field::O, b), src.batch_ptr<T>(Field::Lse, b), acc.capacity, heads,
                            head_dim, 0, 0);
    });
}

}  // namespace wallfacer::runtime::detail
