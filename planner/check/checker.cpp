// Schedule checker: structure, buffer contents and hazards, point-to-point matching, collective
// agreement and deadlock freedom (docs/checker.md). Layers, block and binding coverage and the
// whole-step ops are in checker_step.cpp.
#include <wallfacer/check/checker.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/schedule/per_stream.hpp>
#include "checker_impl.hpp"

namespace wallfacer::detail::check {

std::string Checker::where(int rank, int32_t i) const {
  const RankProgram& prog = sched_.ranks[size_t(rank)];
  const Op& op = prog.ops[size_t(i)];
  std::string s = fmt::format("rank {} op {} ({}", rank, i, to_string(op.kind));
  if (op.kind == OpKind::Gemm) {
    s += fmt::format(" {} {}", to_string(op.label), to_string(op.part));
  } else if (op.label != StepOp::None) {
    s += fmt::format(" {}", to_string(op.label));
  }
  if (op.kind == OpKind::Send) s += fmt::format(" to {} tag {}", op.peer, op.tag);
  if (op.kind == OpKind::Recv) s += fmt::format(" from {} tag {}", op.peer, op.tag);
  if (is_collective(op.kind) && op.coll >= 0 && size_t(op.coll) < prog.collectives.size()) {
    int32_t g = prog.collectives[size_t(op.coll)].group;
    if (g >= 0 && g < int32_t(plan_.groups.size())) s += " on " + plan_.groups[size_t(g)].name;
  }
  if (op.step >= 0) s += fmt::format(", step {}", op.step);
  if (op.flags & kOpRecompute) s += ", recomputed";
  const int layer = layer_of_buffer(rank, op.buf[0]);
  if (layer >= 0) s += ", layer " + layer_name(layer);
  return s + ")";
}

int Checker::member_index(int rank, int32_t group) const {
  for (auto [g, idx] : memberships_[size_t(rank)])
    if (g == group) return idx;
  return -1;
}

CheckReport Checker::run() {
  auto start = std::chrono::steady_clock::now();
  auto lap = [&](const char* stage) {
    auto now = std::chrono::steady_clock::now();
    WF_LOG_DEBUG("checker", "{}: {:.3f} s", stage, std::chrono::duration<double>(now - start).count());
    start = now;
  };
  if (check_structure()) {
    find_layers();
    lap("structure");
    check_coverage();
    lap("coverage");
    for (const RankProgram& prog : sched_.ranks)
      check_dataflow(prog);
    lap("buffer contents and hazards");
    size_t before = error_count_;
    check_p2p();
    check_collectives();
    lap("matching");
    if (error_count_ == before) {
      check_deadlock();
    } else {
      error("deadlock check skipped: fix the unmatched sends or collectives first");
    }
    lap("deadlock");
    check_bindings();
    lap("bindings");
  }
  if (error_count_ > report_.errors.size())
    report_.errors.push_back(fmt::format("... and {} more errors", error_count_ - report_.errors.size()));
  report_.ok = error_count_ == 0;
  return report_;
}

// ---- structure ------------------------------------------------------------------------------

void Checker::check_token_pool() {
  norm_.resize(sched_.tokens.size());
  counts_.resize(sched_.tokens.size());
  for (size_t id = 0; id < sched_.tokens.size(); ++id) {
    const TokenSet& set = sched_.tokens.get(int32_t(id));
    int64_t total = 0;
    for (const TokenRange& r : set) {
      if (r.begin < 0 || r.end > dims_.seq || r.begin >= r.end)
        error("token set #{} has range [{}, {}) outside [0, {}) or empty", id, r.begin, r.end, dims_.seq);
      total += r.size();
    }
    norm_[id] = normalize(set);
    counts_[id] = total;
    int64_t distinct = 0;
    for (const TokenRange& r : norm_[id])
      distinct += r.size();
    if (distinct != total) error("token set #{} has overlapping ranges", id);
  }
}

bool Checker::check_structure() {
  size_t before = error_count_;
  if (int(sched_.ranks.size()) != plan_.num_ranks()) {
    error("schedule holds {} ranks, the plan {}: the checker needs every rank", sched_.ranks.size(), plan_.num_ranks());
    return false;
  }
  check_token_pool();
  memberships_.assign(sched_.ranks.size(), {});
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const auto& ranks = plan_.groups[g].ranks;
    for (size_t idx = 0; idx < ranks.size(); ++idx) {
      if (ranks[idx] < 0 || ranks[idx] >= plan_.num_ranks()) {
        error("group {} names rank {} out of range", plan_.groups[g].name, ranks[idx]);
      } else {
        memberships_[size_t(ranks[idx])].push_back({int32_t(g), int32_t(idx)});
      }
    }
  }
  rv_.offset.assign(sched_.ranks.size() + 1, 0);
  for (size_t r = 0; r < sched_.ranks.size(); ++r) {
    const RankProgram& prog = sched_.ranks[r];
    if (prog.rank != int(r)) error("schedule entry {} holds rank {}", r, prog.rank);
    if (prog.batch_begin < 0 || prog.batch_end > dims_.batch || prog.batch_begin >= prog.batch_end)
      error("rank {}: batch range [{}, {}) outside [0, {})", r, prog.batch_begin, prog.batch_end, dims_.batch);
    for (int32_t i = 0; i < int32_t(prog.ops.size()); ++i)
      check_op_structure(prog, i);
    rv_.offset[r + 1] = rv_.offset[r] + int64_t(prog.ops.size());
    report_.ops += int64_t(prog.ops.size());
  }
  return error_count_ == before;
}

// How many buffer and token slots an op kind uses and the stream it must run on (Copy: any).
struct OpShape {
  int buffers = 1, tokens = 1;
  Stream stream = Stream::Compute;
};
OpShape shape_of(const RankProgram& prog, const Op& op) {
  switch (op.kind) {
    case OpKind::AttnFwd:
      return {3, 2, Stream::Compute};
    case OpKind::AttnBwd:
      return {4, 2, Stream::Compute};
    case OpKind::BwdPrep:
      return {1, 1, Stream::Compute};
    case OpKind::Copy:
      return {2, 1, op.stream};
    case OpKind::Send:
      return {1, is_stage_message(op) ? 0 : 1, Stream::Send};
    case OpKind::Recv:
      return {1, is_stage_message(op) ? 0 : 1, Stream::Recv};
    case OpKind::Gemm:
    case OpKind::Pointwise:
      return {0, 0, Stream::Compute};
    default: {  // collectives; flat ones (AllReduce included) work in place on buffer [0]
      const bool known = op.coll >= 0 && size_t(op.coll) < prog.collectives.size();
      const bool flat =
          op.kind == OpKind::AllReduce || (known && is_flat_collective(prog.collectives[size_t(op.coll)]));
      return {flat ? 1 : 2, 0, is_collective_stream(op.stream) ? op.stream : Stream::Collective};
    }
  }
}

bool Checker::check_op_structure(const RankProgram& prog, int32_t i) {
  const Op& op = prog.ops[size_t(i)];
  auto bad = [&](const std::string& what) {
    error("rank {} op {} ({}): {}", prog.rank, i, to_string(op.kind), what);
    return false;
  };
  const OpShape shape = shape_of(prog, op);
  if (op.stream != shape.stream)
    return bad(fmt::format("runs on the {} stream, expected {}", to_string(op.stream), to_string(shape.stream)));
  for (int b = 0; b < shape.buffers; ++b)
    if (op.buf[b] < 0 || op.buf[b] >= int(prog.buffers.size()))
      return bad(fmt::format("buffer slot {} is {} (rank has {})", b, op.buf[b], prog.buffers.size()));
  for (int t = 0; t < shape.tokens; ++t)
    if (op.tok[t] < 0 || size_t(op.tok[t]) >= sched_.tokens.size())
      return bad(fmt::format("token set id {} unknown", op.tok[t]));
  if (size_t(op.dep_begin) + op.dep_count > prog.deps.size()) return bad("dependency list out of range");
  for (const int32_t* d = prog.deps_begin(op); d != prog.deps_end(op); ++d)
    if (*d < 0 || *d >= i) return bad(fmt::format("depends on op {}, which is not an earlier op", *d));
  if ((op.kind == OpKind::Send || op.kind == OpKind::Recv) &&
      (op.peer < 0 || op.peer >= plan_.num_ranks() || op.peer == prog.rank))
    return bad(fmt::format("peer {} is not another rank", op.peer));
  if (is_step_compute(op.kind)) {
    ++(op.kind == OpKind::Gemm ? report_.gemms : report_.pointwise);
    const std::string problem = step_compute_problem(op);
    if (!problem.empty()) error("{}: {}", where(prog.rank, i), problem);  // sizes only: later stages can run
    return true;
  }
  if (!is_collective(op.kind)) return true;
  const std::string problem = collective_structure_problem(prog, op);
  return problem.empty() || bad(problem);
}

std::string Checker::collective_structure_problem(const RankProgram& prog, const Op& op) const {
  if (op.coll < 0 || size_t(op.coll) >= prog.collectives.size()) return "collective index out of range";
  const CollectiveSpec& spec = prog.collectives[size_t(op.coll)];
  if (spec.kind != op.kind) return fmt::format("its collective spec is a {}", to_string(spec.kind));
  if (spec.group < 0 || size_t(spec.group) >= plan_.groups.size()) return fmt::format("unknown group {}", spec.group);
  if (member_index(prog.rank, spec.group) < 0)
    return fmt::format("rank is not a member of group {}", plan_.groups[size_t(spec.group)].name);
  if (is_flat_collective(spec)) return flat_collective_problem(prog, op);
  if ((spec.fields & kFlatFields) != 0)
    return fmt::format("a {} of {} needs a positive element count, not {}", to_string(spec.kind),
                       fields_to_string(spec.fields), spec.elements);
  const size_t m = plan_.groups[size_t(spec.group)].ranks.size();
  if (spec.in_tokens.size() != m || spec.out_tokens.size() != m || spec.in_heads.size() != m ||
      spec.out_heads.size() != m)
    return fmt::format("spec lists do not have one entry per member ({})", m);
  for (size_t j = 0; j < m; ++j)
    for (int32_t id : {spec.in_tokens[j], spec.out_tokens[j]})
      if (id < 0 || size_t(id) >= sched_.tokens.size()) return fmt::format("token set id {} unknown", id);
  return "";
}

// ---- buffer contents and hazards -------------------------------------------------------------

int32_t rows_of(const std::vector<BufferRows>& bufs, int32_t buf) {
  for (int hops = 0; buf >= 0 && hops < 4; ++hops) {
    const BufferRows& b = bufs[size_t(buf)];
    if (b.list >= 0) return b.list;
    buf = b.mirror;
  }
  return -1;
}

Access reads(int32_t buf, FieldMask fields, int32_t tokens, HeadRange heads = {}) {
  return {buf, fields, tokens, Mode::Read, -1, heads};
}
Access writes(int32_t buf, FieldMask fields, int32_t tokens, HeadRange heads = {}) {
  return {buf, fields, tokens, Mode::Write, -1, heads};
}
Access accumulates(int32_t buf, FieldMask fields, int32_t tokens, int32_t layout_buf, HeadRange heads = {}) {
  return {buf, fields, tokens, Mode::Accumulate, layout_buf, heads};
}

Accesses Checker::accesses(const RankProgram& prog, int32_t i) const {
  const Op& op = prog.ops[size_t(i)];
  const FieldMask kv = field_bit(Field::K) | field_bit(Field::V);
  const FieldMask olse = field_bit(Field::O) | field_bit(Field::Lse);
  const FieldMask bundle = field_bit(Field::Q) | field_bit(Field::dO) | field_bit(Field::Lse) | field_bit(Field::D);
  const FieldMask dkv = field_bit(Field::dK) | field_bit(Field::dV);
  const int group = std::max(1, dims_.heads / std::max(1, dims_.kv_heads));
  const HeadRange qh = op.heads, kh{op.heads.begin / group, (op.heads.end + group - 1) / group};
  switch (op.kind) {
    case OpKind::AttnFwd:
      return {reads(op.buf[0], field_bit(Field::Q), op.tok[0], qh), reads(op.buf[1], kv, op.tok[1], kh),
              accumulates(op.buf[2], olse, op.tok[0], op.buf[0], qh)};
    case OpKind::AttnBwd:
      return {reads(op.buf[0], bundle, op.tok[0], qh), reads(op.buf[1], kv, op.tok[1], kh),
              accumulates(op.buf[2], field_bit(Field::dQ), op.tok[0], op.buf[0], qh),
              accumulates(op.buf[3], dkv, op.tok[1], op.buf[1], kh)};
    case OpKind::BwdPrep:
      return {reads(op.buf[0], FieldMask(field_bit(Field::O) | field_bit(Field::dO)), op.tok[0]),
              accumulates(op.buf[0], field_bit(Field::D), op.tok[0], op.buf[0])};
    case OpKind::Copy:
      return {reads(op.buf[0], op.fields, op.tok[0]),
              writes(op.buf[1], op.fields, op.tok[0], prog.buffers[size_t(op.buf[0])].heads)};
    case OpKind::Send:
      return {reads(op.buf[0], op.fields, op.tok[0])};
    case OpKind::Recv:
      return {writes(op.buf[0], op.fields, op.tok[0])};
    case OpKind::Gemm:
    case OpKind::Pointwise:
      return {};  // no attention buffer
    default: {
      const CollectiveSpec& spec = prog.collectives[size_t(op.coll)];
      // Flat collectives (AllReduce, gradient reduce-scatters, parameter gathers) read and write
      // their vector in place.
      if (is_flat_collective(spec))
        return {accumulates(op.buf[0], spec.fields ? spec.fields : field_bit(Field::WeightGrad), -1, op.buf[0])};
      size_t me = size_t(member_index(prog.rank, spec.group));
      return {reads(op.buf[0], spec.fields, spec.in_tokens[me], spec.in_heads[me]),
              writes(op.buf[1], spec.fields, spec.out_tokens[me], spec.out_heads[me])};
    }
  }
}

// Checks fields, heads and tokens of one access against the buffer and the rows it holds, then
// applies the write: an overwrite with another token list drops the fields it does not write.
void Checker::check_access(const RankProgram& prog, int32_t i, const Access& a, std::vector<BufferRows>& bufs) {
  const BufferDecl& buf = prog.buffers[size_t(a.buf)];
  if (a.heads.size() > 0 && !within(a.heads, buf.heads))
    error("{}: touches heads [{}, {}) of buffer {}, which holds [{}, {})", where(prog.rank, i), a.heads.begin,
          a.heads.end, buf.name, buf.heads.begin, buf.heads.end);
  if ((a.fields & ~buf.fields) != 0)
    return error("{}: uses fields {} that buffer {} ({}) does not have", where(prog.rank, i),
                 fields_to_string(a.fields & ~buf.fields), buf.name, fields_to_string(buf.fields));
  if (a.tokens < 0) return;
  if (count(a.tokens) > buf.capacity_tokens)
    error("{}: {} tokens exceed buffer {}'s capacity of {}", where(prog.rank, i), count(a.tokens), buf.name,
          buf.capacity_tokens);
  BufferRows& rows = bufs[size_t(a.buf)];
  if (a.mode == Mode::Write) {
    rows.valid = rows.list == a.tokens ? FieldMask(rows.valid | a.fields) : a.fields;
    rows.list = a.tokens;
    return;
  }
  if (a.mode == Mode::Accumulate && rows.list < 0 && rows.mirror < 0) rows.mirror = a.layout_buf;
  const int32_t held = rows_of(bufs, a.buf);
  const FieldMask missing = a.mode == Mode::Read ? FieldMask(a.fields & ~rows.valid) : FieldMask(0);
  if (missing != 0)
    return error("{}: reads {}.{}, which holds no data (never written, or dropped by an overwrite of other rows)",
                 where(prog.rank, i), buf.name, fields_to_string(missing));
  if (held < 0 || !is_subset(norm(a.tokens), norm(held)))
    return error("{}: reads {}.{} tokens {} that the buffer does not hold ({})", where(prog.rank, i), buf.name,
                 fields_to_string(a.fields), describe(sched_.tokens.get(a.tokens)),
                 held < 0 ? std::string("it is empty") : "it holds " + describe(sched_.tokens.get(held)));
  rows.valid |= a.mode == Mode::Accumulate ? a.fields : FieldMask(0);
}

void Checker::check_hazard(const RankProgram& prog, int32_t i, const Access& a, const Clock& clock, int32_t pos,
                           std::vector<FieldState>& states) {
  const Op& op = prog.ops[size_t(i)];
  const int s = int(op.stream);
  const std::string& name = prog.buffers[size_t(a.buf)].name;
  for (int f = 0; f < kNumFields; ++f) {
    if (!has(a.fields, Field(f))) continue;
    FieldState& st = states[size_t(a.buf) * kNumFields + size_t(f)];
    bool writer_pending = st.write_op >= 0 && st.write_op != i && clock[int(st.write_stream)] < st.write_pos;
    if (a.mode != Mode::Write) {
      if (writer_pending)
        return error("{}: reads {}.{} before {} that writes it has completed (missing dependency)", where(prog.rank, i),
                     name, to_string(Field(f)), where(prog.rank, st.write_op));
      st.read_op[size_t(s)] = i;
      st.read_pos[size_t(s)] = pos;
    }
    if (a.mode == Mode::Read) continue;
    if (writer_pending)
      return error("{}: overwrites {}.{} while {} may still write it", where(prog.rank, i), name, to_string(Field(f)),
                   where(prog.rank, st.write_op));
    for (int r = 0; r < kNumStreams; ++r) {
      if (st.read_op[size_t(r)] >= 0 && st.read_op[size_t(r)] != i && clock[size_t(r)] < st.read_pos[size_t(r)])
        return error("{}: overwrites {}.{} before {} has finished reading it", where(prog.rank, i), name,
                     to_string(Field(f)), where(prog.rank, st.read_op[size_t(r)]));
    }
    st = FieldState{};
    st.write_op = i;
    st.write_pos = pos;
    st.write_stream = op.stream;
  }
}

// Every buffer with a head axis has a head range inside the heads of its fields' class.
void Checker::check_buffer_decls(const RankProgram& prog) {
  for (const BufferDecl& b : prog.buffers) {
    if ((b.fields & ~kFlatFields) == 0) continue;  // flat vectors: no head or token axis
    bool kv =
        (b.fields & (field_bit(Field::K) | field_bit(Field::V) | field_bit(Field::dK) | field_bit(Field::dV))) != 0;
    if (b.heads.begin < 0 || b.heads.end > (kv ? dims_.kv_heads : dims_.heads) || b.heads.size() <= 0)
      error("rank {}: buffer {} has heads [{}, {}) out of range", prog.rank, b.name, b.heads.begin, b.heads.end);
  }
}

// One pass in program order. Each op's clock holds, per stream, the position of the last op of
// that stream known to have completed before it starts (deps point backwards, so one pass does).
void Checker::check_dataflow(const RankProgram& prog) {
  const size_t nb = prog.buffers.size();
  check_buffer_decls(prog);
  std::vector<BufferRows> bufs(nb);
  for (const Binding& in : prog.inputs) {
    if (in.buf < 0 || size_t(in.buf) >= nb || in.tokens >= int32_t(sched_.tokens.size())) {
      error("rank {}: input binding of {} names an unknown buffer or token set", prog.rank, to_string(in.field));
      continue;
    }
    if (in.tokens < 0) continue;
    BufferRows& rows = bufs[size_t(in.buf)];
    rows.valid = rows.list == in.tokens ? FieldMask(rows.valid | field_bit(in.field)) : field_bit(in.field);
    rows.list = in.tokens;
  }
  std::vector<FieldState> states(nb * kNumFields);
  std::vector<Clock> done(prog.ops.size());
  OpPerStream last = no_op_on_any_stream();
  std::array<int32_t, kNumStreams> pos{};
  for (int32_t i = 0; i < int32_t(prog.ops.size()); ++i) {
    const Op& op = prog.ops[size_t(i)];
    const int s = int(op.stream);
    Clock clock{};
    auto merge = [&](int32_t p) {
      for (int x = 0; x < kNumStreams; ++x)
        clock[size_t(x)] = std::max(clock[size_t(x)], done[size_t(p)][size_t(x)]);
    };
    if (last[size_t(s)] >= 0) merge(last[size_t(s)]);
    for (const int32_t* d = prog.deps_begin(op); d != prog.deps_end(op); ++d)
      merge(*d);
    const int32_t my_pos = ++pos[size_t(s)];
    for (const Access& a : accesses(prog, i)) {
      check_access(prog, i, a, bufs);
      check_hazard(prog, i, a, clock, my_pos, states);
    }
    clock[size_t(s)] = my_pos;
    done[size_t(i)] = clock;
    last[size_t(s)] = i;
  }
  check_outputs_held(prog, bufs);
}

// Outputs name fields that hold data and tokens the buffer holds after the last op.
void Checker::check_outputs_held(const RankProgram& prog, const std::vector<BufferRows>& bufs) {
  for (const Binding& out : prog.outputs) {
    if (out.buf < 0 || size_t(out.buf) >= prog.buffers.size() || out.tokens >= int32_t(sched_.tokens.size())) {
      error("rank {}: output binding of {} names an unknown buffer or token set", prog.rank, to_string(out.field));
      continue;
    }
    if (out.tokens < 0) continue;
    const int32_t held = rows_of(bufs, out.buf);
    if (held < 0 || !has(bufs[size_t(out.buf)].valid, out.field) || !is_subset(norm(out.tokens), norm(held)))
      error("rank {}: output {} of buffer {} names tokens the buffer does not hold at the end", prog.rank,
            to_string(out.field), prog.buffers[size_t(out.buf)].name);
  }
}

// ---- (b) point-to-point matching --------------------------------------------------------------

namespace {
using P2pKey = std::pair<uint64_t, int32_t>;  // ((peer, tag), op index)
uint64_t p2p_key(int32_t peer, int32_t tag) {
  return (uint64_t(uint32_t(peer)) << 32) | uint32_t(tag);
}
}  // namespace

// A tag may repeat (every unrolled layer runs the same messages): the k-th send from s to d with
// tag t in s's program order matches the k-th receive on d from s with tag t (FIFO, as in MPI).
void Checker::check_p2p() {
  // Per source rank, its sends sorted by (destination, tag, program order): receives look their
  // send up there, which keeps the work per rank and cache-friendly.
  std::vector<std::vector<P2pKey>> sends(sched_.ranks.size());
  for (const RankProgram& prog : sched_.ranks) {
    auto& list = sends[size_t(prog.rank)];
    for (int32_t i = 0; i < int32_t(prog.ops.size()); ++i)
      if (prog.ops[size_t(i)].kind == OpKind::Send)
        list.push_back({p2p_key(prog.ops[size_t(i)].peer, prog.ops[size_t(i)].tag), i});
    std::sort(list.begin(), list.end());
    report_.sends += int64_t(list.size());
  }
  rv_.partner.assign(size_t(rv_.offset.back()), -1);
  for (const RankProgram& prog : sched_.ranks)
    match_receives(prog, sends);
  for (const RankProgram& prog : sched_.ranks)
    for (const auto& [k, i] : sends[size_t(prog.rank)])
      if (rv_.partner[size_t(rv_.offset[size_t(prog.rank)] + i)] < 0)
        error("{}: no matching receive on rank {}", where(prog.rank, i), prog.ops[size_t(i)].peer);
}

// Pairs the receives of one rank, per (source, tag) in program order, with that source's sends.
void Checker::match_receives(const RankProgram& prog, const std::vector<std::vector<P2pKey>>& sends) {
  std::vector<P2pKey> recvs;
  for (int32_t i = 0; i < int32_t(prog.ops.size()); ++i)
    if (prog.ops[size_t(i)].kind == OpKind::Recv)
      recvs.push_back({p2p_key(prog.ops[size_t(i)].peer, prog.ops[size_t(i)].tag), i});
  std::sort(recvs.begin(), recvs.end());
  for (size_t first = 0, n = 0; first < recvs.size(); first += n) {
    n = 1;
    while (first + n < recvs.size() && recvs[first + n].first == recvs[first].first)
      ++n;
    const Op& op = prog.ops[size_t(recvs[first].second)];
    const auto& list = sends[size_t(op.peer)];
    const uint64_t k = p2p_key(prog.rank, op.tag);
    auto it = std::lower_bound(list.begin(), list.end(), P2pKey{k, -1});
    size_t matched = 0;
    while (matched < n && it + ptrdiff_t(matched) != list.end() && it[ptrdiff_t(matched)].first == k) {
      check_pair(op.peer, it[ptrdiff_t(matched)].second, prog.rank, recvs[first + matched].second);
      ++matched;
    }
    for (size_t j = matched; j < n; ++j)
      error("{}: no matching send (rank {} sends {} messages with tag {} to rank {}, which receives {})",
            where(prog.rank, recvs[first + j].second), op.peer, matched, op.tag, prog.rank, n);
  }
}

// A matched send (rank s, op i) and receive (rank r, op j): same payload on both sides.
void Checker::check_pair(int s, int32_t i, int r, int32_t j) {
  const RankProgram& sp = sched_.ranks[size_t(s)];
  const RankProgram& rp = sched_.ranks[size_t(r)];
  const Op& so = sp.ops[size_t(i)];
  const Op& ro = rp.ops[size_t(j)];
  const BufferDecl& sb = sp.buffers[size_t(so.buf[0])];
  const BufferDecl& rb = rp.buffers[size_t(ro.buf[0])];
  if (so.bytes != ro.bytes) error("{}: sends {} bytes, {} receives {}", where(s, i), so.bytes, where(r, j), ro.bytes);
  if (so.tok[0] != ro.tok[0] || so.fields != ro.fields || !(sb.heads == rb.heads))
    error("{}: tokens, fields or heads differ from {}", where(s, i), where(r, j));
  if (sp.batch_begin != rp.batch_begin || sp.batch_end != rp.batch_end)
    error("{}: peers work on different batch ranges", where(s, i));
  if (is_stage_message(so) || is_stage_message(ro)) return check_stage_pair(s, i, r, j);
  int64_t expect = 0;
  for (int f = 0; f < kNumFields; ++f) {
    if (!has(so.fields, Field(f))) continue;
    const bool scalar = Field(f) == Field::Lse || Field(f) == Field::D;
    expect += (scalar ? 1 : dims_.head_dim) * ((sb.fp32 || scalar) ? 4 : dims_.elem_bytes);
  }
  expect *= count(so.tok[0]) * sb.heads.size() * (sp.batch_end - sp.batch_begin);
  if (so.bytes != expect) error("{}: {} bytes, but the payload is {} bytes", where(s, i), so.bytes, expect);
  rv_.partner[size_t(rv_.offset[size_t(s)] + i)] = rv_.offset[size_t(r)] + j;
  rv_.partner[size_t(rv_.offset[size_t(r)] + j)] = rv_.offset[size_t(s)] + i;
}

// ---- (c) collectives ------------------------------------------------------------------------

bool same_spec(const CollectiveSpec& a, const CollectiveSpec& b) {
  return a.kind == b.kind && a.group == b.group && a.fields == b.fields && a.reduction == b.reduction &&
         a.in_tokens == b.in_tokens && a.out_tokens == b.out_tokens && a.in_heads == b.in_heads &&
         a.out_heads == b.out_heads && a.elements == b.elements;
}

void Checker::check_collectives() {
  // ops[g][member] = that member's collective ops on group g, in program order.
  std::vector<std::vector<std::vector<int32_t>>> ops(plan_.groups.size());
  for (size_t g = 0; g < plan_.groups.size(); ++g)
    ops[g].resize(plan_.groups[g].ranks.size());
  for (const RankProgram& prog : sched_.ranks)
    for (int32_t i = 0; i < int32_t(prog.ops.size()); ++i)
      if (is_collective(prog.ops[size_t(i)].kind)) {
        int32_t g = prog.collectives[size_t(prog.ops[size_t(i)].coll)].group;
        ops[size_t(g)][size_t(member_index(prog.rank, g))].push_back(i);
      }
  rv_.instance_of.assign(size_t(rv_.offset.back()), -1);
  rv_.instances.clear();
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const CommGroup& group = plan_.groups[g];
    if (group.ranks.empty()) continue;
    const size_t calls = ops[g][0].size();
    for (size_t m = 1; m < group.ranks.size(); ++m)
      if (ops[g][m].size() != calls)
        error("group {}: rank {} calls {} collectives, rank {} calls {}", group.name, group.ranks[0], calls,
              group.ranks[m], ops[g][m].size());
    for (size_t k = 0; k < calls; ++k) {
      const RankProgram& first = sched_.ranks[size_t(group.ranks[0])];
      const CollectiveSpec& spec = first.collectives[size_t(first.ops[size_t(ops[g][0][k])].coll)];
      std::string label = where(group.ranks[0], ops[g][0][k]);
      std::vector<int64_t> members;
      for (size_t m = 0; m < group.ranks.size() && k < ops[g][m].size(); ++m) {
        const RankProgram& prog = sched_.ranks[size_t(group.ranks[m])];
        int32_t i = ops[g][m][k];
        const CollectiveSpec& mine = prog.collectives[size_t(prog.ops[size_t(i)].coll)];
        if (!same_spec(mine, spec))
          error("group {}: call {} differs between members: {} vs {}", group.name, k, label, where(prog.rank, i));
        // A group's calls are matched in program order: on two streams they could be posted in
        // another order than they are written, and partners would disagree on which call is which.
        const Stream stream = prog.ops[size_t(i)].stream, first_stream = prog.ops[size_t(ops[g][m][0])].stream;
        if (stream != first_stream)
          error(
              "group {}: {} runs on the {} stream but the group's first call on rank {} on the {} stream; a group's "
              "collectives must share one stream",
              group.name, where(prog.rank, i), to_string(stream), prog.rank, to_string(first_stream));
        if (is_flat_collective(mine)) check_flat_bytes(prog, i);
        rv_.instance_of[size_t(rv_.offset[size_t(prog.rank)] + i)] = int32_t(rv_.instances.size());
        members.push_back(rv_.offset[size_t(prog.rank)] + i);
      }
      rv_.instances.push_back(std::move(members));
      check_collective_semantics(spec, label);
      report_.flat_collectives += is_flat_collective(spec) ? 1 : 0;
    }
    report_.collectives += int64_t(calls);
  }
}

void Checker::check_collective_semantics(const CollectiveSpec& spec, const std::string& label) {
  if (is_flat_collective(spec)) {  // no token lists: a vector of `elements` values
    if (spec.elements <= 0) error("{}: all-reduce of {} elements", label, spec.elements);
    return;
  }
  const std::string problem = collective_spec_problem(spec, sched_.tokens, norm_);
  if (!problem.empty()) error("{}: {}", label, problem);
}

// ---- (d) deadlock -----------------------------------------------------------------------------

void Checker::check_deadlock() {
  std::vector<int32_t> started_members;
  std::vector<BlockedOp> blocked = run_blocking(sched_, rv_, started_members);
  if (blocked.empty()) return;
  size_t waiting = 0;
  for (const BlockedOp& b : blocked) {
    if (!b.started) continue;  // behind another blocked op; the started ones show the cycle
    ++waiting;
    const int64_t x = rv_.offset[size_t(b.rank)] + b.op;
    std::string why;
    if (is_collective(sched_.ranks[size_t(b.rank)].ops[size_t(b.op)].kind)) {
      int32_t inst = rv_.instance_of[size_t(x)];
      why = fmt::format("only {} of {} members start it", started_members[size_t(inst)],
                        rv_.instances[size_t(inst)].size());
    } else {
      int64_t p = rv_.partner[size_t(x)];
      size_t pr = size_t(std::upper_bound(rv_.offset.begin(), rv_.offset.end(), p) - rv_.offset.begin() - 1);
      why = fmt::format("its partner {} never starts", where(int(pr), int32_t(p - rv_.offset[pr])));
    }
    error("deadlock: {} waits forever: {}", where(b.rank, b.op), why);
  }
  if (waiting == 0)
    error("deadlock: {} never becomes ready (its dependencies wait on each other)",
          where(blocked[0].rank, blocked[0].op));
}

}  // namespace wallfacer::detail::check

namespace wallfacer {

CheckReport check_schedule(const Plan& plan, const Schedule& schedule) {
  CheckReport report = detail::check::Checker(plan, schedule).run();
  WF_LOG_DEBUG("checker", "{} ops, {} sends, {} collectives, {}+{}+{} blocks, {} layers: {}", report.ops, report.sends,
               report.collectives, report.forward_blocks, report.backward_blocks, report.recomputed_blocks,
               report.layers, report.ok ? "ok" : "FAILED");
  return report;
}

void check_or_throw(const Plan& plan, const Schedule& schedule) {
  CheckReport report = check_schedule(plan, schedule);
  if (report.ok) return;
  throw ScheduleError(fmt::format("schedule of {} on {} ranks is broken:\n  {}", to_string(plan.strategy),
                                  plan.num_ranks(), fmt::join(report.errors, "\n  ")));
}

}  // namespace wallfacer