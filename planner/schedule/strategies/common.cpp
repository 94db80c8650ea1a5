// The strategy toolkit (see common.hpp): replicas, layouts, heads, tags, collective sizes and
// ProgramBuilder with automatic buffer-hazard dependencies.
#include "strategies/common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <map>
#include <numeric>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/schedule/per_stream.hpp>

namespace wallfacer::detail {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) out.push_back(i);
  return out;
}

int64_t gcd64(int64_t a, int64_t b) {
  return std::gcd(a, b);
}

Replica replica_of(const StrategyParams& params, int rank, int batch) {
  Replica r;
  r.size = std::max(1, params.sequence_parallel);
  r.count = std::max(1, params.data_parallel);
  r.index = rank / r.size;
  r.local = rank % r.size;
  r.batch_begin = int(int64_t(r.index) * batch / r.count);
  r.batch_end = int(int64_t(r.index + 1) * batch / r.count);
  return r;
}

Feasibility generic_feasibility(const StrategyParams& params, const Workload& w, int ranks) {
  const int S = params.sequence_parallel, D = params.data_parallel;
  auto no = [](std::string why) { return Feasibility{false, std::move(why)}; };
  if (ranks < 1) return no(fmt::format("rank count {} must be at least 1", ranks));
  if (S < 1 || D < 1)
    return no(fmt::format("sequence parallel ({}) and data parallel ({}) degrees must be >= 1", S, D));
  if (int64_t(S) * D != ranks)
    return no(fmt::format("sequence parallel {} x data parallel {} = {} != {} ranks", S, D, int64_t(S) * D, ranks));
  // Every strategy numbers its steps below S in the message tags (make_tag).
  if (S > kTagStepLimit)
    return no(fmt::format("sequence parallel degree {} exceeds the {} ranks a schedule's message tags can number", S,
                          kTagStepLimit));
  if (w.heads < 1 || w.kv_heads < 1 || w.head_dim < 1 || w.seq < 1 || w.batch < 1)
    return no("workload needs heads, kv_heads, head_dim, seq and batch >= 1");
  if (w.heads % w.kv_heads != 0)
    return no(fmt::format("heads ({}) not divisible by kv_heads ({})", w.heads, w.kv_heads));
  if (w.batch % D != 0) return no(fmt::format("batch ({}) not divisible by data parallel degree {}", w.batch, D));
  if (w.seq < S) return no(fmt::format("sequence length {} shorter than sequence parallel degree {}", w.seq, S));
  return {};
}

Feasibility ulysses_heads_feasibility(const Workload& w, int u) {
  auto no = [](std::string why) { return Feasibility{false, std::move(why)}; };
  if (u > w.heads) return no(fmt::format("Ulysses degree {} exceeds heads ({})", u, w.heads));
  if (w.heads % u != 0) return no(fmt::format("heads ({}) not divisible by Ulysses degree {}", w.heads, u));
  if (w.kv_heads % u != 0 && u % w.kv_heads != 0)
    return no(fmt::format("kv_heads ({}) neither divisible by nor a divisor of Ulysses degree {}", w.kv_heads, u));
  return {};
}

std::vector<int> data_parallel_splits(const Workload& workload, int ranks) {
  if (ranks < 1) return {};
  return divisors(int(gcd64(ranks, std::max(1, workload.batch))));
}

std::string replica_group_name(const StrategyParams& params, int replica, const std::string& name) {
  if (params.data_parallel <= 1) return name;
  return fmt::format("d{}.{}", replica, name);
}

std::vector<CommGroup> replicate_groups(const StrategyParams& params, int ranks,
                                        const std::vector<CommGroup>& replica_groups) {
  const int S = std::max(1, params.sequence_parallel), D = std::max(1, params.data_parallel);
  std::vector<CommGroup> out;
  out.reserve(replica_groups.size() * size_t(D) + 1);
  for (int d = 0; d < D; ++d) {
    for (const auto& g : replica_groups) {
      CommGroup copy{replica_group_name(params, d, g.name), g.kind, g.ranks};
      for (auto& r : copy.ranks)
        r += d * S;
      out.push_back(std::move(copy));
    }
  }
  if (ranks > 1) {
    CommGroup world{"world", GroupKind::World, std::vector<int>(size_t(ranks))};
    std::iota(world.ranks.begin(), world.ranks.end(), 0);
    out.push_back(std::move(world));
  }
  return out;
}

int world_group_index(const StrategyParams& params, int ranks, int per_replica) {
  if (ranks <= 1) return -1;
  return std::max(1, params.data_parallel) * per_replica;
}

std::vector<int> replicate_positions(const StrategyParams& params, int ranks,
                                     const std::vector<int>& replica_positions) {
  const int S = std::max(1, params.sequence_parallel);
  WF_ASSERT(int(replica_positions.size()) == S, "replica placement must have one entry per sequence rank");
  std::vector<int> out(static_cast<size_t>(std::max(0, ranks)));
  for (int r = 0; r < ranks; ++r)
    out[size_t(r)] = (r / S) * S + replica_positions[size_t(r % S)];
  return out;
}

namespace {

std::string describe(const CommGroup& g) {
  std::string members;
  for (size_t i = 0; i < g.ranks.size() && i < 8; ++i)
    members += (i ? "," : "") + std::to_string(g.ranks[i]);
  if (g.ranks.size() > 8) members += ",...";
  return fmt::format("'{}' ({}, ranks [{}])", g.name, to_string(g.kind), members);
}

}  // namespace

void validate_groups(const Plan& plan, const std::vector<CommGroup>& expected) {
  const std::string what = fmt::format("plan for strategy {}", to_string(plan.strategy));
  if (plan.groups.size() != expected.size())
    throw InputError(fmt::format("{}: has {} communication groups, the strategy with these parameters needs {}", what,
                                 plan.groups.size(), expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const CommGroup& g = plan.groups[i];
    // The all-reduce algorithm is the planner's choice, not the strategy's.
    if (g.all_reduce == AllReduceAlgorithm::Tree && !runs_all_reduces(g.kind))
      throw InputError(fmt::format("{}: group {} is {} and runs no all-reduce, so 'all_reduce: tree' does not apply",
                                   what, i, describe(g)));
    if (g.name == expected[i].name && g.kind == expected[i].kind && g.ranks == expected[i].ranks) continue;
    throw InputError(
        fmt::format("{}: group {} is {}, expected {}", what, i, describe(plan.groups[i]), describe(expected[i])));
  }
}

void validate_feasible(const Plan& plan, const Feasibility& feasibility) {
  if (feasibility.ok) return;
  throw InputError(fmt::format("plan for strategy {}: {}", to_string(plan.strategy), feasibility.reason));
}

// ---- token layouts ---------------------------------------------------------------------------

TokenRange contiguous_range(int64_t seq, int parts, int index) {
  const int64_t base = seq / parts, rem = seq % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, rem);
  return {begin, begin + base + (index < rem ? 1 : 0)};
}

TokenSet contiguous_shard(int64_t seq, int parts, int index) {
  return {contiguous_range(seq, parts, index)};
}

TokenSet zigzag_shard(int64_t seq, int parts, int index) {
  return zigzag2d_shard(seq, 1, parts, index);
}

TokenSet zigzag2d_shard(int64_t seq, int ulysses, int ring, int index) {
  WF_ASSERT(seq % (int64_t(2) * ulysses * ring) == 0, "zigzag layout needs seq divisible by 2 x ranks");
  const int64_t chunk = seq / (2 * ring), piece = chunk / ulysses;
  const int rho = index / ulysses, upsilon = index % ulysses;
  const int64_t a = rho * chunk + upsilon * piece, b = (2 * ring - 1 - rho) * chunk + upsilon * piece;
  // canonical({{a, a + piece}, {b, b + piece}}), made in place (b > a: the second chunk is later)
  if (piece <= 0) return {};
  if (a + piece == b) return {{a, b + piece}};
  return {{a, a + piece}, {b, b + piece}};
}

// Compacts in place: the sets a builder takes apart are mostly canonical already.
TokenSet canonical(TokenSet set) {
  size_t kept = 0;
  for (const TokenRange& r : set) {
    if (r.size() <= 0) continue;
    if (kept > 0 && set[kept - 1].end == r.begin)
      set[kept - 1].end = r.end;
    else
      set[kept++] = r;
  }
  set.resize(kept);
  return set;
}

TokenSet concat(const TokenSet& a, const TokenSet& b) {
  TokenSet out = a;
  out.insert(out.end(), b.begin(), b.end());
  return canonical(std::move(out));
}

TokenSet intersect(const TokenSet& a, const TokenSet& b) {
  TokenSet sorted_b = b;
  std::sort(sorted_b.begin(), sorted_b.end(),
            [](const TokenRange& x, const TokenRange& y) { return x.begin < y.begin; });
  TokenSet out;
  for (const auto& ra : a) {
    // First range of b that ends after ra begins.
    auto it = std::upper_bound(sorted_b.begin(), sorted_b.end(), ra.begin,
                               [](int64_t v, const TokenRange& r) { return v < r.end; });
    for (; it != sorted_b.end() && it->begin < ra.end; ++it) {
      const TokenRange piece{std::max(ra.begin, it->begin), std::min(ra.end, it->end)};
      if (piece.size() > 0) out.push_back(piece);
    }
  }
  return canonical(std::move(out));
}

// ---- heads -----------------------------------------------------------------------------------

HeadRange split_heads(int heads, int parts, int index) {
  WF_ASSERT(parts > 0 && heads % parts == 0, "heads must split evenly");
  const int each = heads / parts;
  return {index * each, (index + 1) * each};
}

HeadRange ulysses_kv_heads(int heads, int kv_heads, int u, int j) {
  if (kv_heads % u == 0) return split_heads(kv_heads, u, j);
  WF_ASSERT(u % kv_heads == 0, "Ulysses degree must divide or be a multiple of kv_heads");
  const int replicas = u / kv_heads;
  return {j / replicas, j / replicas + 1};
}

HeadRange intersect(HeadRange a, HeadRange b) {
  const HeadRange r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  return r.size() > 0 ? r : HeadRange{};
}

// ---- tags, flows, collectives ----------------------------------------------------------------

int32_t make_tag(int channel, int step) {
  WF_ASSERT(step >= 0 && step < kTagStepLimit, "tag step out of range");
  WF_ASSERT(channel >= 0 && channel < (1 << 14), "tag channel out of range");
  return int32_t(channel) * kTagStepLimit + step;
}

FlowSet make_flow_set(std::string name, std::vector<std::pair<int32_t, int32_t>> flows) {
  return FlowSet{std::move(name), std::move(flows)};
}

int64_t collective_send_bytes(const ScheduleDims& dims, const CollectiveSpec& spec, int member, int group_size,
                              const TokenSetPool& pool, int batch, bool fp32) {
  const int p = group_size;
  if (p <= 1) return 0;
  // A tree sends as much as a ring on average over the members (half the buffer each way on each
  // of the 2(p-1) tree edges); who sends more depends on the GPUs, which the schedule does not.
  if (spec.kind == OpKind::AllReduce) return 2 * int64_t(p - 1) * spec.elements * dims.grad_elem_bytes / p;
  if (is_flat_collective(spec)) {
    // Gradients travel in grad_comm_dtype, parameters and activations in the dtype; each member
    // sends (p-1)/p of the vector.
    const int64_t elem = (spec.fields & field_bit(Field::WeightGrad)) ? dims.grad_elem_bytes : dims.elem_bytes;
    return int64_t(p - 1) * spec.elements * elem / p;
  }
  const auto i = size_t(member);
  const TokenSet& in = pool.get(spec.in_tokens[i]);
  if (spec.kind == OpKind::AllGather)
    return int64_t(p - 1) * payload_bytes(dims, spec.fields, token_count(in), spec.in_heads[i].size(), batch, fp32);
  int64_t total = 0;
  for (size_t j = 0; j < size_t(p); ++j) {
    if (j == i) continue;
    const HeadRange heads = intersect(spec.in_heads[i], spec.out_heads[j]);
    if (heads.size() == 0) continue;
    const int64_t tokens = token_count(intersect(in, pool.get(spec.out_tokens[j])));
    total += payload_bytes(dims, spec.fields, tokens, heads.size(), batch, fp32);
  }
  return total;
}

ScheduleDims dims_of(const Workload& w) {
  ScheduleDims d;
  d.seq = w.seq;
  d.batch = w.batch;
  d.heads = w.heads;
  d.kv_heads = w.kv_heads;
  d.head_dim = w.head_dim;
  d.elem_bytes = bytes_of(w.dtype);
  d.grad_elem_bytes = bytes_of(w.grad_comm_dtype);
  d.causal = w.causal;
  return d;
}

// ---- ProgramBuilder --------------------------------------------------------------------------

ProgramBuilder::ProgramBuilder(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode)
    : plan_(plan), pool_(pool), replica_(replica_of(plan.params, rank, plan.workload.batch)), mode_(mode) {
  dims_ = dims_of(plan.workload);
  dims_.batch = replica_.batch();
  program_.rank = rank;
  program_.batch_begin = replica_.batch_begin;
  program_.batch_end = replica_.batch_end;
}

int32_t ProgramBuilder::buffer(const std::string& name, FieldMask fields, HeadRange heads, int64_t capacity_tokens,
                               bool fp32) {
  program_.buffers.push_back(BufferDecl{name, fields, heads, capacity_tokens, fp32});
  state_.emplace_back(size_t(kNumFields));
  return int32_t(program_.buffers.size() - 1);
}

void ProgramBuilder::input(int32_t buf, Field field, const TokenSet& tokens, HeadRange heads) {
  program_.inputs.push_back(Binding{buf, field, intern(tokens), heads});
}

void ProgramBuilder::output(int32_t buf, Field field, const TokenSet& tokens, HeadRange heads) {
  program_.outputs.push_back(Binding{buf, field, intern(tokens), heads});
}

int32_t ProgramBuilder::append(Op op, std::initializer_list<Access> accesses, const std::vector<int32_t>& extra) {
  const auto index = int32_t(program_.op_count());  // the Full program's index (see the header)
  if (mode_ == BuildMode::ComputeOnly) {            // no dependencies: nothing to track
    last_of_stream_[size_t(op.stream)] = index;
    program_.add(std::move(op));
    return index;
  }
  // Latest dependency per stream: ops of one stream complete in program order.
  OpPerStream latest = no_op_on_any_stream();
  auto need = [&](int32_t dep) {
    if (dep < 0) return;
    const int s = int(program_.ops[size_t(dep)].stream);
    latest[s] = std::max(latest[s], dep);
  };
  for (int32_t d : extra)
    need(d);
  // Over the fields each access names (set bits only); a field's readers are kept by their stream.
  auto each_field = [](FieldMask fields, auto&& visit) {
    for (unsigned bits = fields; bits != 0; bits &= bits - 1)
      visit(std::countr_zero(bits));
  };
  for (const Access& a : accesses) {
    if (a.buf < 0) continue;
    std::vector<FieldState>& fields = state_[size_t(a.buf)];
    each_field(a.fields, [&](int f) {
      const FieldState& st = fields[size_t(f)];
      if (st.writer >= 0) latest[st.writer_stream] = std::max(latest[st.writer_stream], st.writer);
      if (a.write)
        for (int s = 0; s < kNumStreams; ++s)
          latest[size_t(s)] = std::max(latest[size_t(s)], st.readers[size_t(s)]);
    });
  }
  for (const Access& a : accesses) {
    if (a.buf < 0) continue;
    std::vector<FieldState>& fields = state_[size_t(a.buf)];
    each_field(a.fields, [&](int f) {
      FieldState& st = fields[size_t(f)];
      if (a.write) {
        st.writer = index;
        st.writer_stream = uint8_t(op.stream);
        st.readers = no_op_on_any_stream();
      } else {
        st.readers[size_t(op.stream)] = index;
      }
    });
  }
  scratch_deps_.clear();
  for (int s = 0; s < kNumStreams; ++s)
    if (latest[s] >= 0 && s != int(op.stream)) scratch_deps_.push_back(latest[s]);
  std::sort(scratch_deps_.begin(), scratch_deps_.end());
  last_of_stream_[size_t(op.stream)] = index;
  return program_.add(std::move(op), scratch_deps_);
}

int32_t ProgramBuilder::add_block(OpKind kind, const int32_t (&bufs)[4], const TokenSet& q, const TokenSet& k,
                                  Mask mask, HeadRange heads, int step, const std::vector<int32_t>& deps) {
  Op op;
  op.kind = kind;
  op.stream = Stream::Compute;
  op.phase = phase_;
  op.mask = mask;
  op.step = step;
  std::copy(std::begin(bufs), std::end(bufs), std::begin(op.buf));
  op.tok[0] = intern(q);
  op.tok[1] = intern(k);
  op.heads = heads;
  const bool forward = kind == OpKind::AttnFwd;
  op.fields = forward ? FieldMask(field_bit(Field::O) | field_bit(Field::Lse))
                      : FieldMask(field_bit(Field::dQ) | field_bit(Field::dK) | field_bit(Field::dV));
  op.flops = block_flops(dims_, q, k, mask, heads.size(), forward ? Phase::Forward : Phase::Backward);
  const FieldMask kv = field_bit(Field::K) | field_bit(Field::V);
  if (forward) {
    const FieldMask acc = field_bit(Field::O) | field_bit(Field::Lse);
    return append(std::move(op), {{bufs[0], field_bit(Field::Q), false}, {bufs[1], kv, false}, {bufs[2], acc, true}},
                  deps);
  }
  const FieldMask bundle = field_bit(Field::Q) | field_bit(Field::dO) | field_bit(Field::Lse) | field_bit(Field::D);
  return append(std::move(op),
                {{bufs[0], bundle, false},
                 {bufs[1], kv, false},
                 {bufs[2], field_bit(Field::dQ), true},
                 {bufs[3], FieldMask(field_bit(Field::dK) | field_bit(Field::dV)), true}},
                deps);
}

std::vector<int32_t> ProgramBuilder::add_blocks(OpKind kind, const int32_t (&bufs)[4], const TokenSet& q_in,
                                                const TokenSet& k_in, HeadRange heads, int step,
                                                const std::vector<int32_t>& deps) {
  std::vector<int32_t> ops;
  if (token_count(q_in) == 0 || token_count(k_in) == 0 || heads.size() == 0) return ops;
  if (!dims_.causal) {
    ops.push_back(add_block(kind, bufs, q_in, k_in, Mask::None, heads, step, deps));
    return ops;
  }
  if (q_in.size() == 1 && k_in.size() == 1) {  // the common case: one range each
    const TokenRange qr = q_in[0], kr = k_in[0];
    if (kr.begin < qr.end)
      ops.push_back(
          add_block(kind, bufs, q_in, k_in, kr.end <= qr.begin + 1 ? Mask::None : Mask::Causal, heads, step, deps));
    return ops;
  }
  TokenSet q_made, k_made;
  const TokenSet& q = is_canonical(q_in) ? q_in : (q_made = canonical(q_in));
  const TokenSet& k = is_canonical(k_in) ? k_in : (k_made = canonical(k_in));
  if (diagonal_as_one_block_ && q == k) {
    ops.push_back(add_block(kind, bufs, q_in, k_in, Mask::Causal, heads, step, deps));
    return ops;
  }
  // Group query ranges by the key ranges they see; fully dead range pairs never enter a block.
  if (k.size() <= 64) return add_grouped_blocks(kind, bufs, q, k, heads, step, deps);
  std::vector<std::vector<int>> patterns;  // live key-range indices per group
  std::vector<TokenSet> group_q;
  std::vector<bool> group_full;
  for (const auto& qr : q) {
    std::vector<int> live;
    bool full = true;
    for (size_t j = 0; j < k.size(); ++j) {
      if (k[j].begin >= qr.end) continue;         // every key above every query: dead
      if (k[j].end > qr.begin + 1) full = false;  // some key above the first query: needs the mask
      live.push_back(int(j));
    }
    if (live.empty()) continue;
    auto it = std::find(patterns.begin(), patterns.end(), live);
    if (it == patterns.end()) {
      patterns.push_back(std::move(live));
      group_q.push_back({qr});
      group_full.push_back(full);
    } else {
      const auto g = size_t(it - patterns.begin());
      group_q[g].push_back(qr);
      group_full[g] = group_full[g] && full;
    }
  }
  for (size_t g = 0; g < patterns.size(); ++g) {
    TokenSet keys;
    for (int j : patterns[g])
      keys.push_back(k[size_t(j)]);
    ops.push_back(
        add_block(kind, bufs, group_q[g], keys, group_full[g] ? Mask::None : Mask::Causal, heads, step, deps));
  }
  return ops;
}

// add_blocks' grouping with a group's live key ranges as the bits of one word (up to 64 key ranges,
// as every strategy has), in the scratch kept between calls: the same groups, in the same order.
std::vector<int32_t> ProgramBuilder::add_grouped_blocks(OpKind kind, const int32_t (&bufs)[4], const TokenSet& q,
                                                        const TokenSet& k, HeadRange heads, int step,
                                                        const std::vector<int32_t>& deps) {
  std::vector<uint64_t>& live_of = scratch_live_;
  std::vector<TokenSet>& queries = scratch_queries_;
  std::vector<char>& full_of = scratch_full_;
  live_of.clear();
  full_of.clear();
  for (const auto& qr : q) {
    uint64_t live = 0;
    bool full = true;
    for (size_t j = 0; j < k.size(); ++j) {
      if (k[j].begin >= qr.end) continue;         // every key above every query: dead
      if (k[j].end > qr.begin + 1) full = false;  // some key above the first query: needs the mask
      live |= uint64_t(1) << j;
    }
    if (live == 0) continue;
    const auto g = size_t(std::find(live_of.begin(), live_of.end(), live) - live_of.begin());
    if (g == live_of.size()) {
      live_of.push_back(live);
      full_of.push_back(full);
      if (queries.size() <= g) queries.emplace_back();
      queries[g].assign(1, qr);
    } else {
      queries[g].push_back(qr);
      full_of[g] = full_of[g] && full;
    }
  }
  std::vector<int32_t> ops;
  ops.reserve(live_of.size());
  for (size_t g = 0; g < live_of.size(); ++g) {
    scratch_keys_.clear();
    for (uint64_t bits = live_of[g]; bits != 0; bits &= bits - 1)
      scratch_keys_.push_back(k[size_t(std::countr_zero(bits))]);
    ops.push_back(
        add_block(kind, bufs, queries[g], scratch_keys_, full_of[g] ? Mask::None : Mask::Causal, heads, step, deps));
  }
  return ops;
}

std::vector<int32_t> ProgramBuilder::attn_fwd(int32_t q_buf, int32_t kv_buf, int32_t acc_buf, const TokenSet& q,
                                              const TokenSet& k, HeadRange heads, int step,
                                              const std::vector<int32_t>& deps) {
  const int32_t bufs[4] = {q_buf, kv_buf, acc_buf, -1};
  return add_blocks(OpKind::AttnFwd, bufs, q, k, heads, step, deps);
}

std::vector<int32_t> ProgramBuilder::attn_bwd(int32_t q_buf, int32_t kv_buf, int32_t dq_buf, int32_t dkv_buf,
                                              const TokenSet& q, const TokenSet& k, HeadRange heads, int step,
                                              const std::vector<int32_t>& deps) {
  const int32_t bufs[4] = {q_buf, kv_buf, dq_buf, dkv_buf};
  return add_blocks(OpKind::AttnBwd, bufs, q, k, heads, step, deps);
}

int32_t ProgramBuilder::bwd_prep(int32_t buf, const TokenSet& tokens, int step, const std::vector<int32_t>& deps) {
  Op op;
  op.kind = OpKind::BwdPrep;
  op.stream = Stream::Compute;
  op.phase = phase_;
  op.step = step;
  op.buf[0] = buf;
  op.tok[0] = intern(tokens);
  op.heads = decl(buf).heads;
  op.fields = field_bit(Field::D);
  // Memory traffic: O and dO read.
  op.bytes = payload_bytes(dims_, field_bit(Field::O) | field_bit(Field::dO), token_count(tokens), op.heads.size(),
                           dims_.batch, decl(buf).fp32);
  return append(std::move(op),
                {{buf, FieldMask(field_bit(Field::O) | field_bit(Field::dO)), false}, {buf, field_bit(Field::D), true}},
                deps);
}

int32_t ProgramBuilder::copy(int32_t src, int32_t dst, const TokenSet& tokens, FieldMask fields, int step,
                             const std::vector<int32_t>& deps) {
  Op op;
  op.kind = OpKind::Copy;
  op.stream = Stream::Compute;
  op.phase = phase_;
  op.step = step;
  op.buf[0] = src;
  op.buf[1] = dst;
  op.tok[0] = intern(tokens);
  op.heads = decl(dst).heads;
  op.fields = fields;
  // Memory traffic: bytes written.
  op.bytes = payload_bytes(dims_, fields, token_count(tokens), op.heads.size(), dims_.batch, decl(dst).fp32);
  return append(std::move(op), {{src, fields, false}, {dst, fields, true}}, deps);
}

int32_t ProgramBuilder::send(int32_t buf, const TokenSet& tokens, FieldMask fields, int peer, int32_t tag,
                             int32_t flow_set, int step, const std::vector<int32_t>& deps) {
  return transfer(OpKind::Send, buf, tokens, fields, peer, tag, flow_set, step, deps);
}

int32_t ProgramBuilder::recv(int32_t buf, const TokenSet& tokens, FieldMask fields, int peer, int32_t tag,
                             int32_t flow_set, int step, const std::vector<int32_t>& deps) {
  return transfer(OpKind::Recv, buf, tokens, fields, peer, tag, flow_set, step, deps);
}

// A send reads `buf`, a receive writes it; both move the same bytes.
int32_t ProgramBuilder::transfer(OpKind kind, int32_t buf, const TokenSet& tokens, FieldMask fields, int peer,
                                 int32_t tag, int32_t flow_set, int step, const std::vector<int32_t>& deps) {
  const bool receive = kind == OpKind::Recv;
  const Stream stream = receive ? Stream::Recv : Stream::Send;
  if (mode_ == BuildMode::ComputeOnly) {  // counted, not stored
    const auto index = int32_t(program_.op_count());
    last_of_stream_[size_t(stream)] = index;
    ++program_.transfers_left_out;
    return index;
  }
  Op op;
  op.kind = kind;
  op.stream = stream;
  op.phase = phase_;
  op.step = step;
  op.peer = peer;
  op.tag = tag;
  op.flow_set = flow_set;
  op.buf[0] = buf;
  op.tok[0] = intern(tokens);
  op.heads = decl(buf).heads;
  op.fields = fields;
  op.bytes = payload_bytes(dims_, fields, token_count(tokens), op.heads.size(), dims_.batch, decl(buf).fp32);
  return append(std::move(op), {{buf, fields, receive}}, deps);
}

int ProgramBuilder::member_of(int32_t group) const {
  WF_ASSERT(group >= 0 && size_t(group) < plan_.groups.size(), "collective on an unknown group");
  const auto& ranks = plan_.groups[size_t(group)].ranks;
  const auto it = std::find(ranks.begin(), ranks.end(), program_.rank);
  WF_ASSERT(it != ranks.end(), "collective on a group this rank is not in");
  return int(it - ranks.begin());
}

int32_t ProgramBuilder::collective(const CollectiveArgs& args, const std::vector<int32_t>& deps) {
  const int member = member_of(args.group);
  const size_t p = plan_.groups[size_t(args.group)].ranks.size();
  const bool ids = !args.in_token_ids.empty();
  WF_ASSERT((ids ? args.in_token_ids.size() == p && args.out_token_ids.size() == p
                 : args.in_tokens.size() == p && args.out_tokens.size() == p) &&
                args.in_heads.size() == p && args.out_heads.size() == p,
            "collective needs one token set and head range per member");
  CollectiveSpec spec;
  spec.kind = args.kind;
  spec.group = args.group;
  spec.fields = args.fields;
  spec.reduction = args.reduction;
  if (ids) {
    spec.in_tokens = args.in_token_ids;
    spec.out_tokens = args.out_token_ids;
  } else {
    for (size_t i = 0; i < p; ++i) {
      spec.in_tokens.push_back(intern(args.in_tokens[i]));
      spec.out_tokens.push_back(intern(args.out_tokens[i]));
    }
  }
  spec.in_heads = args.in_heads;
  spec.out_heads = args.out_heads;
  Op op;
  op.kind = args.kind;
  op.stream = Stream::Collective;
  op.phase = phase_;
  op.step = args.step;
  op.buf[0] = args.in_buf;
  op.buf[1] = args.out_buf;
  op.tok[0] = spec.in_tokens[size_t(member)];
  op.tok[1] = spec.out_tokens[size_t(member)];
  op.heads = args.out_heads[size_t(member)];
  op.fields = args.fields;
  op.bytes = args.bytes >= 0
                 ? args.bytes
                 : collective_send_bytes(dims_, spec, member, int(p), pool_, dims_.batch, decl(args.in_buf).fp32);
  op.coll = int32_t(program_.collectives.size());
  program_.collectives.push_back(std::move(spec));
  return append(std::move(op), {{args.in_buf, args.fields, false}, {args.out_buf, args.fields, true}}, deps);
}

int32_t ProgramBuilder::all_reduce(int32_t group, int32_t buf, FieldMask fields, int64_t elements,
                                   const std::vector<int32_t>& deps) {
  const int member = member_of(group);
  const int p = int(plan_.groups[size_t(group)].ranks.size());
  CollectiveSpec spec;
  spec.kind = OpKind::AllReduce;
  spec.group = group;
  spec.fields = fields;
  spec.elements = elements;
  spec.algorithm = plan_.groups[size_t(group)].all_reduce;
  Op op;
  op.kind = OpKind::AllReduce;
  op.stream = Stream::Collective;
  op.phase = phase_;
  op.buf[0] = buf;
  op.fields = fields;
  op.bytes = collective_send_bytes(dims_, spec, member, p, pool_, dims_.batch, true);
  op.coll = int32_t(program_.collectives.size());
  program_.collectives.push_back(std::move(spec));
  return append(std::move(op), {{buf, fields, true}}, deps);
}

void add_weight_grad_allreduce(ProgramBuilder& builder, int32_t world_group) {
  if (world_group < 0) return;
  builder.set_phase(Phase::Backward);
  const FieldMask wg = field_bit(Field::WeightGrad);
  const int32_t buf = builder.buffer("wgrad", wg, HeadRange{}, 0, true);
  builder.input(buf, Field::WeightGrad, {}, HeadRange{});
  // Weight gradients of the projections exist once dQ, dK and dV are final: after everything.
  std::vector<int32_t> deps;
  for (int s = 0; s < kNumStreams; ++s)
    if (builder.last_op(Stream(s)) >= 0) deps.push_back(builder.last_op(Stream(s)));
  builder.all_reduce(world_group, buf, wg, builder.plan().workload.attention_parameters_per_layer(), deps);
  builder.output(buf, Field::WeightGrad, {}, HeadRange{});
}

}  // namespace wallfacer::detail
