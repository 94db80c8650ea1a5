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

void Executor::all_gather_post(InFlight& flight, const CollectiveSpec& spec, int me, const BufferState& in) {
  const size_t es = elem_size(type);
  const size_t n = spec.in_tokens.size();
  const TokenSet& my_in = tokens(spec.in_tokens[size_t(me)], flight.op);
  PackedBlock block = pack(in, *map_rows(in.tokens, my_in), spec.fields, token_count(my_in), spec.in_heads[size_t(me)],
                           mask_has_query_field(spec.fields));
  Counts recv_counts;
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    const TokenSet& set = tokens(spec.in_tokens[i], flight.op);
    int64_t count = packed_elements(collective_shape(spec, set, spec.in_heads[i]));
    flight.pieces.push_back({total, count, set, spec.in_heads[i]});
    recv_counts.push_back(count);
    total += count;
  }
  flight.recv = DeviceBlock(backend, std::max<size_t>(size_t(total) * es, 1));
  flight.send = std::move(block.memory);
  flight.request =
      backend.iallgatherv(spec.group, flight.send.data(), block.elements, flight.recv.data(), recv_counts, type);
  stats_.bytes_sent += block.elements * int64_t(es) * int64_t(n - 1);
}

// AllToAll and ReduceScatter: block j of the send buffer is in_me restricted to out_j.
void Executor::exchange_post(InFlight& flight, const CollectiveSpec& spec, int me, const BufferState& in) {
  const size_t es = elem_size(type);
  const size_t n = spec.in_tokens.size();
  const TokenSet& my_in = tokens(spec.in_tokens[size_t(me)], flight.op);
  Counts send_counts;
  std::vector<Piece> parts;
  int64_t send_total = 0;
  for (size_t j = 0; j < n; ++j) {
    HeadRange h = heads_or_empty(spec.in_heads[size_t(me)], spec.out_heads[j]);
    TokenSet set = h.size() > 0 ? intersect(my_in, tokens(spec.out_tokens[j], flight.op)) : TokenSet{};
    send_counts.push_back(packed_elements(collective_shape(spec, set, h)));
    parts.push_back({send_total, send_counts.back(), set, h});
    send_total += send_counts.back();
    if (int(j) != me) stats_.bytes_sent += send_counts.back() * int64_t(es);
  }
  flight.send = DeviceBlock(backend, std::max<size_t>(size_t(send_total) * es, 1));
  for (const Piece& part : parts) {
    Storage shape = collective_shape(spec, part.tokens, part.heads);
    place_packed(shape, flight.send.data() + size_t(part.offset) * es);
    copy_rows(backend, in.storage, *map_rows(in.tokens, part.tokens), shape, identity_runs(shape.capacity), spec.fields,
              part.heads, mask_has_query_field(spec.fields));
  }
  bool identical_inputs = true;
  for (size_t i = 1; i < n; ++i)
    identical_inputs =
        identical_inputs && spec.in_tokens[i] == spec.in_tokens[0] && spec.in_heads[i] == spec.in_heads[0];
  if (spec.kind == OpKind::ReduceScatter && spec.reduction == Reduction::Sum && identical_inputs &&
      backend.has_reduce_scatter()) {
    // Every member packed the same structure, so the backend can sum the blocks itself.
    Piece mine = parts[size_t(me)];
    mine.offset = 0;
    flight.pieces.push_back(mine);
    flight.recv = DeviceBlock(backend, std::max<size_t>(size_t(mine.elements) * es, 1));
    flight.request = backend.ireduce_scatter(spec.group, flight.send.data(), flight.recv.data(), send_counts, type);
    return;
  }
  const TokenSet& my_out = tokens(spec.out_tokens[size_t(me)], flight.op);
  Counts recv_counts;
  int64_t recv_total = 0;
  for (size_t i = 0; i < n; ++i) {
    HeadRange h = heads_or_empty(spec.in_heads[i], spec.out_heads[size_t(me)]);
    TokenSet set = h.size() > 0 ? intersect(tokens(spec.in_tokens[i], flight.op), my_out) : TokenSet{};
    int64_t count = packed_elements(collective_shape(spec, set, h));
    flight.pieces.push_back({recv_total, count, set, h});
    recv_counts.push_back(count);
    recv_total += count;
  }
  flight.recv = DeviceBlock(backend, std::max<size_t>(size_t(recv_total) * es, 1));
  flight.request =
      backend.ialltoallv(spec.group, flight.send.data(), send_counts, flight.recv.data(), recv_counts, type);
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
  const bool query = mask_has_query_field(spec.fields);
  const size_t es = elem_size(type);
  BufferState& out = buffer(op.buf[1], flight.op);
  const TokenSet& my_out = tokens(spec.out_tokens[size_t(me)], flight.op);
  prepare_write(out, my_out, spec.fields, nullptr, flight.op);
  for (const Piece& piece : flight.pieces) {
    if (piece.elements == 0) continue;
    Storage shape =
        packed_shape(spec.fields, token_count(piece.tokens), piece.heads, query, batches, head_dim, group, type);
    place_packed(shape, flight.recv.data() + size_t(piece.offset) * es);
    auto runs = map_rows(out.tokens, piece.tokens);
    if (!runs)
      throw ScheduleError(fmt::format("{}: received tokens {} are not among the output tokens {}", where(flight.op),
                                      describe(piece.tokens), describe(out.tokens)));
    copy_rows(backend, shape, identity_runs(shape.capacity), out.storage, *runs, spec.fields, piece.heads, query);
  }
}

// Reduces the received pieces into an output-shaped block that starts at the identity (zero;
// lse = -inf for LseMerge), in member order, then writes it to the output buffer.
void Executor::reduce_pieces(InFlight& flight, const Op& op, const CollectiveSpec& spec, int me) {
  const bool query = mask_has_query_field(spec.fields);
  const bool merge = spec.reduction == Reduction::LseMerge;
  if (merge && spec.fields != (field_bit(Field::O) | field_bit(Field::Lse)))
    throw ScheduleError(fmt::format("{}: LseMerge needs exactly the fields O|Lse", where(flight.op)));
  const size_t es = elem_size(type);
  const TokenSet& my_out = tokens(spec.out_tokens[size_t(me)], flight.op);
  const HeadRange out_heads = spec.out_heads[size_t(me)];
  const int64_t n = token_count(my_out);
  PackedBlock acc = make_packed(backend, spec.fields, n, out_heads, query, batches, head_dim, group, type);
  PackedBlock scratch = make_packed(backend, spec.fields, n, out_heads, query, batches, head_dim, group, type);
  auto reset = [&](const Storage& s) {
    for (int f = 0; f < kNumFields; ++f)
      if (s.has(Field(f))) fill_identity(s, Field(f));
  };
  reset(acc.shape);
  for (const Piece& piece : flight.pieces) {
    if (piece.elements == 0) continue;
    Storage shape =
        packed_shape(spec.fields, token_count(piece.tokens), piece.heads, query, batches, head_dim, group, type);
    place_packed(shape, flight.recv.data() + size_t(piece.offset) * es);
    const Storage* src = &shape;
    if (piece.tokens != my_out || piece.heads != out_heads) {
      reset(scratch.shape);
      auto runs = map_rows(my_out, piece.tokens);
      if (!runs)
        throw ScheduleError(fmt::format("{}: reduce-scatter piece outside the output tokens", where(flight.op)));
      copy_rows(backend, shape, identity_runs(shape.capacity), scratch.shape, *runs, spec.fields, piece.heads, query);
      src = &scratch.shape;
    }
    if (!merge) {
      for (int f = 0; f < kNumFields; ++f)
        if (acc.shape.has(Field(f)))
          backend.accumulate(acc.shape.base[size_t(f)], src->base[size_t(f)], size_t(acc.shape.elements(Field(f))),
                             type);
      continue;
    }
    const int heads = acc.shape.heads_of(Field::O).size();
    const int64_t vec = n * heads * head_dim, row = n * heads;
    for (int b = 0; b < batches; ++b) {
      if (type == ElemType::F32)
        backend.merge_partial(acc.shape.ptr<float>(Field::O) + b * vec, acc.shape.ptr<float>(Field::Lse) + b * row,
                              src->ptr<float>(Field::O) + b * vec, src->ptr<float>(Field::Lse) + b * row, n, heads,
                              head_dim, 0, 0);
      else
        backend.merge_partial(acc.shape.ptr<double>(Field::O) + b * vec, acc.shape.ptr<double>(Field::Lse) + b * row,
                              src->ptr<double>(Field::O) + b * vec, src->ptr<double>(Field::Lse) + b * row, n, heads,
                              head_dim, 0, 0);
    }
  }
  BufferState& out = buffer(op.buf[1], flight.op);
  RowRuns runs = prepare_write(out, my_out, spec.fields, nullptr, flight.op);
  copy_rows(backend, acc.shape, identity_runs(n), out.storage, runs, spec.fields, out_heads, query);
}

}  // namespace wallfacer::runtime::detail
