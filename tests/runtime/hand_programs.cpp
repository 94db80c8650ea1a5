// Hand-built schedules for the executor tests (see hand_programs.hpp).
#include "runtime/hand_programs.hpp"

#include <fmt/format.h>

#include <numeric>

#include "common/synthetic_workload.hpp"

namespace wallfacer::testing {
namespace {

constexpr FieldMask kKV = field_mask({Field::K, Field::V});
constexpr FieldMask kDKV = field_mask({Field::dK, Field::dV});
constexpr FieldMask kOLse = field_mask({Field::O, Field::Lse});
constexpr FieldMask kBundle = field_mask({Field::Q, Field::O, Field::Lse, Field::dO, Field::D});

int mod(int a, int m) {
  return ((a % m) + m) % m;
}

ScheduleDims dims_of(const Workload& w) {
  ScheduleDims d;
  d.seq = w.seq;
  d.batch = w.batch;
  d.heads = w.heads;
  d.kv_heads = w.kv_heads;
  d.head_dim = w.head_dim;
  d.elem_bytes = 4;
  d.causal = w.causal;
  return d;
}

// Mask of a block of contiguous shards: owner s of the keys against owner r of the queries.
bool block_live(const Workload& w, int r, int s) {
  return !w.causal || s <= r;
}
Mask block_mask(const Workload& w, int r, int s) {
  return w.causal && s == r ? Mask::Causal : Mask::None;
}

int64_t largest_part(const Workload& w, int ranks) {
  return token_count(contiguous_part(w.seq, ranks, 0));
}

HandCase start_case(const std::string& name, int ranks, const Workload& w) {
  HandCase c;
  c.name = name;
  c.plan = bare_plan(ranks, w);
  c.schedule.dims = dims_of(w);
  return c;
}

}  // namespace

Workload tiny_workload(int64_t seq, int heads, int kv_heads, int head_dim, int batch, bool causal) {
  return test::synthetic_workload({seq, heads, kv_heads, head_dim, batch, causal, DType::FP32, 128});
}

TokenSet contiguous_part(int64_t seq, int parts, int index) {
  const int64_t base = seq / parts, extra = seq % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {{begin, begin + base + (index < extra ? 1 : 0)}};
}

Plan bare_plan(int ranks, const Workload& workload) {
  Plan plan;
  plan.topology_name = "none";
  plan.topology_nodes = 1;
  plan.workload = workload;
  plan.strategy = StrategyKind::Ring;
  plan.params.sequence_parallel = ranks;
  for (int r = 0; r < ranks; ++r)
    plan.ranks.push_back(RankSlot{r, r, 0, r, ""});
  std::vector<int> all(static_cast<size_t>(ranks));
  std::iota(all.begin(), all.end(), 0);
  plan.groups.push_back({"world", GroupKind::World, all});
  plan.groups.push_back({"ring", GroupKind::Ring, all});
  return plan;
}

// ---- HandBuilder ------------------------------------------------------------------------------

namespace {
std::vector<int32_t> valid(const std::vector<int32_t>& deps) {
  std::vector<int32_t> out;
  for (int32_t d : deps)
    if (d >= 0) out.push_back(d);
  return out;
}
}  // namespace

HandBuilder::HandBuilder(Schedule& schedule, int rank, int batch) : schedule_(schedule) {
  program_.rank = rank;
  program_.batch_begin = 0;
  program_.batch_end = batch;
}

int32_t HandBuilder::buffer(const std::string& name, FieldMask fields, HeadRange heads, int64_t capacity) {
  program_.buffers.push_back({name, fields, heads, capacity, true});
  return int32_t(program_.buffers.size() - 1);
}

void HandBuilder::input(int32_t buf, Field field, const TokenSet& tokens, HeadRange heads) {
  program_.inputs.push_back({buf, field, schedule_.tokens.intern(tokens), heads});
}

void HandBuilder::output(int32_t buf, Field field, const TokenSet& tokens, HeadRange heads) {
  program_.outputs.push_back({buf, field, schedule_.tokens.intern(tokens), heads});
}

int32_t HandBuilder::fwd(int32_t q, int32_t kv, int32_t acc, const TokenSet& qt, const TokenSet& kt, HeadRange heads,
                         Mask mask, std::vector<int32_t> deps) {
  Op op;
  op.kind = OpKind::AttnFwd;
  op.mask = mask;
  op.buf[0] = q, op.buf[1] = kv, op.buf[2] = acc;
  op.tok[0] = schedule_.tokens.intern(qt), op.tok[1] = schedule_.tokens.intern(kt);
  op.heads = heads;
  op.flops = block_flops(schedule_.dims, qt, kt, mask, heads.size(), Phase::Forward);
  return program_.add(op, valid(deps));
}

int32_t HandBuilder::bwd(int32_t q, int32_t kv, int32_t dq, int32_t dkv, const TokenSet& qt, const TokenSet& kt,
                         HeadRange heads, Mask mask, std::vector<int32_t> deps) {
  Op op;
  op.kind = OpKind::AttnBwd;
  op.phase = Phase::Backward;
  op.mask = mask;
  op.buf[0] = q, op.buf[1] = kv, op.buf[2] = dq, op.buf[3] = dkv;
  op.tok[0] = schedule_.tokens.intern(qt), op.tok[1] = schedule_.tokens.intern(kt);
  op.heads = heads;
  return program_.add(op, valid(deps));
}

int32_t HandBuilder::prep(int32_t buf, const TokenSet& tokens, HeadRange heads, std::vector<int32_t> deps) {
  Op op;
  op.kind = OpKind::BwdPrep;
  op.phase = Phase::Backward;
  op.buf[0] = buf;
  op.tok[0] = schedule_.tokens.intern(tokens);
  op.heads = heads;
  op.fields = field_bit(Field::D);
  return program_.add(op, valid(deps));
}

int32_t HandBuilder::copy(int32_t src, int32_t dst, const TokenSet& tokens, FieldMask fields, HeadRange heads,
                          std::vector<int32_t> deps) {
  Op op;
  op.kind = OpKind::Copy;
  op.buf[0] = src, op.buf[1] = dst;
  op.tok[0] = schedule_.tokens.intern(tokens);
  op.heads = heads;
  op.fields = fields;
  return program_.add(op, valid(deps));
}

int32_t HandBuilder::send(int32_t buf, const TokenSet& tokens, FieldMask fields, HeadRange heads, int peer, int tag,
                          std::vector<int32_t> deps) {
  Op op;
  op.kind = OpKind::Send;
  op.stream = Stream::Send;
  op.buf[0] = buf;
  op.tok[0] = schedule_.tokens.intern(tokens);
  op.heads = heads;
  op.fields = fields;
  op.peer = peer;
  op.tag = tag;
  return program_.add(op, valid(deps));
}

int32_t HandBuilder::recv(int32_t buf, const TokenSet& tokens, FieldMask fields, HeadRange heads, int peer, int tag,
                          std::vector<int32_t> deps) {
  Op op;
  op.kind = OpKind::Recv;
  op.stream = Stream::Recv;
  op.buf[0] = buf;
  op.tok[0] = schedule_.tokens.intern(tokens);
  op.heads = heads;
  op.fields = fields;
  op.peer = peer;
  op.tag = tag;
  return program_.add(op, valid(deps));
}

int32_t HandBuilder::collective(OpKind kind, int group, int32_t in, int32_t out, FieldMask fields, Reduction reduction,
                                const std::vector<TokenSet>& in_tokens, const std::vector<TokenSet>& out_tokens,
                                const std::vector<HeadRange>& in_heads, const std::vector<HeadRange>& out_heads,
                                std::vector<int32_t> deps) {
  CollectiveSpec spec;
  spec.kind = kind;
  spec.group = group;
  spec.fields = fields;
  spec.reduction = reduction;
  for (const auto& t : in_tokens)
    spec.in_tokens.push_back(schedule_.tokens.intern(t));
  for (const auto& t : out_tokens)
    spec.out_tokens.push_back(schedule_.tokens.intern(t));
  spec.in_heads = in_heads;
  spec.out_heads = out_heads;
  Op op;
  op.kind = kind;
  op.stream = Stream::Collective;
  op.buf[0] = in, op.buf[1] = out;
  op.fields = fields;
  op.coll = int32_t(program_.collectives.size());
  program_.collectives.push_back(spec);
  return program_.add(op, valid(deps));
}

int32_t HandBuilder::all_reduce(int group, int32_t buf, FieldMask fields, int64_t elements, std::vector<int32_t> deps) {
  CollectiveSpec spec;
  spec.kind = OpKind::AllReduce;
  spec.group = group;
  spec.fields = fields;
  spec.elements = elements;
  Op op;
  op.kind = OpKind::AllReduce;
  op.stream = Stream::Collective;
  op.buf[0] = buf;
  op.fields = fields;
  op.coll = int32_t(program_.collectives.size());
  program_.collectives.push_back(spec);
  return program_.add(op, valid(deps));
}

// ---- the cases --------------------------------------------------------------------------------

// Pass-KV ring over contiguous shards: K,V travel to the successor each step; backward, the
// dK,dV accumulator of each block follows its K,V and arrives home after P hops.
HandCase hand_ring(int P, const Workload& w) {
  HandCase c = start_case(fmt::format("ring{}", P), P, w);
  const HeadRange hq{0, w.heads}, hkv{0, w.kv_heads};
  const int64_t cap = largest_part(w, P);
  for (int r = 0; r < P; ++r) {
    HandBuilder b(c.schedule, r, w.batch);
    auto owner_tokens = [&](int s) { return contiguous_part(w.seq, P, mod(s, P)); };
    const TokenSet own = owner_tokens(r);
    const int32_t q = b.buffer("q", kBundle, hq, cap), kv = b.buffer("kv", kKV, hkv, cap);
    const int32_t in[2] = {b.buffer("kv.in0", kKV, hkv, cap), b.buffer("kv.in1", kKV, hkv, cap)};
    const int32_t acc = b.buffer("acc", kOLse, hq, cap), dq = b.buffer("dq", field_bit(Field::dQ), hq, cap);
    const int32_t dkv[2] = {b.buffer("dkv0", kDKV, hkv, cap), b.buffer("dkv1", kDKV, hkv, cap)};
    b.input(q, Field::Q, own, hq);
    b.input(q, Field::dO, own, hq);
    b.input(kv, Field::K, own, hkv);
    b.input(kv, Field::V, own, hkv);
    for (int phase = 0; phase < 2; ++phase) {
      const bool backward = phase == 1;
      if (backward) b.prep(q, own, hq);
      // Op indices per step (-1 when absent); dependencies on -1 are dropped by HandBuilder.
      std::vector<int32_t> send_kv(size_t(P), -1), recv_kv(size_t(P), -1), comp(size_t(P), -1);
      std::vector<int32_t> send_dkv(size_t(P), -1), recv_dkv(size_t(P), -1);
      auto at = [](const std::vector<int32_t>& v, int t) { return t >= 0 ? v[size_t(t)] : -1; };
      for (int t = 0; t < P; ++t) {
        const int s = mod(r - t, P);
        const int32_t cur = t == 0 ? kv : in[(t - 1) % 2];
        if (t + 1 < P) {
          const int tag = (backward ? 200 : 100) + t;
          send_kv[size_t(t)] = b.send(cur, owner_tokens(s), kKV, hkv, mod(r + 1, P), tag, {at(recv_kv, t - 1)});
          // in[t % 2] last held the block of step t - 1: wait for its readers.
          recv_kv[size_t(t)] = b.recv(in[t % 2], owner_tokens(s - 1), kKV, hkv, mod(r - 1, P), tag,
                                      {at(comp, t - 1), at(send_kv, t - 1)});
        }
        if (block_live(w, r, s)) {
          if (backward)
            comp[size_t(t)] = b.bwd(q, cur, dq, dkv[t % 2], own, owner_tokens(s), hq, block_mask(w, r, s),
                                    {at(recv_kv, t - 1), at(recv_dkv, t - 1)});
          else
            comp[size_t(t)] = b.fwd(q, cur, acc, own, owner_tokens(s), hq, block_mask(w, r, s), {at(recv_kv, t - 1)});
        }
        if (backward && P > 1) {
          const int tag = 300 + t;
          const TokenSet next = t + 1 < P ? owner_tokens(s - 1) : own;
          send_dkv[size_t(t)] = b.send(dkv[t % 2], owner_tokens(s), kDKV, hkv, mod(r + 1, P), tag,
                                       {comp[size_t(t)], at(recv_dkv, t - 1)});
          recv_dkv[size_t(t)] =
              b.recv(dkv[(t + 1) % 2], next, kDKV, hkv, mod(r - 1, P), tag, {at(send_dkv, t - 1), at(comp, t - 1)});
        }
      }
      if (!backward) {
        b.copy(acc, q, own, kOLse, hq);
        b.output(q, Field::O, own, hq);
        b.output(q, Field::Lse, own, hq);
      } else {
        b.output(dq, Field::dQ, own, hq);
        const int32_t home = P > 1 ? dkv[P % 2] : dkv[0];
        b.output(home, Field::dK, own, hkv);
        b.output(home, Field::dV, own, hkv);
      }
    }
    c.schedule.ranks.push_back(b.finish());
  }
  return c;
}

// All-gather K,V; local queries against every key; reduce-scatter dK,dV to their owners; a
// WeightGrad all-reduce over the world group.
HandCase hand_gather(int P, const Workload& w) {
  HandCase c = start_case(fmt::format("gather{}", P), P, w);
  const HeadRange hq{0, w.heads}, hkv{0, w.kv_heads};
  const int64_t cap = largest_part(w, P);
  const TokenSet all{{0, w.seq}};
  std::vector<TokenSet> parts, alls(size_t(P), all);
  for (int i = 0; i < P; ++i)
    parts.push_back(contiguous_part(w.seq, P, i));
  const std::vector<HeadRange> kv_heads(size_t(P), hkv);
  const Mask mask = w.causal ? Mask::Causal : Mask::None;
  for (int r = 0; r < P; ++r) {
    HandBuilder b(c.schedule, r, w.batch);
    const TokenSet& own = parts[size_t(r)];
    const int32_t q = b.buffer("q", kBundle, hq, cap), kv = b.buffer("kv", kKV, hkv, cap);
    const int32_t kv_all = b.buffer("kv.all", kKV, hkv, w.seq), acc = b.buffer("acc", kOLse, hq, cap);
    const int32_t dq = b.buffer("dq", field_bit(Field::dQ), hq, cap), dkv_all = b.buffer("dkv.all", kDKV, hkv, w.seq);
    const int32_t dkv = b.buffer("dkv", kDKV, hkv, cap), wgrad = b.buffer("wgrad", field_bit(Field::WeightGrad), {}, 0);
    b.input(q, Field::Q, own, hq);
    b.input(q, Field::dO, own, hq);
    b.input(kv, Field::K, own, hkv);
    b.input(kv, Field::V, own, hkv);
    b.input(wgrad, Field::WeightGrad, {}, {});
    int32_t gathered =
        b.collective(OpKind::AllGather, 1, kv, kv_all, kKV, Reduction::Sum, parts, alls, kv_heads, kv_heads);
    b.fwd(q, kv_all, acc, own, all, hq, mask, {gathered});
    b.copy(acc, q, own, kOLse, hq);
    b.output(q, Field::O, own, hq);
    b.output(q, Field::Lse, own, hq);
    b.prep(q, own, hq);
    int32_t computed = b.bwd(q, kv_all, dq, dkv_all, own, all, hq, mask);
    b.collective(OpKind::ReduceScatter, 1, dkv_all, dkv, kDKV, Reduction::Sum, alls, parts, kv_heads, kv_heads,
                 {computed});
    b.all_reduce(0, wgrad, field_bit(Field::WeightGrad), 1000);
    b.output(dq, Field::dQ, own, hq);
    b.output(dkv, Field::dK, own, hkv);
    b.output(dkv, Field::dV, own, hkv);
    b.output(wgrad, Field::WeightGrad, {}, {});
    c.schedule.ranks.push_back(b.finish());
  }
  return c;
}

// Ulysses: all-to-all from sequence shards (all heads) to the full sequence (a head share), full
// attention on the share, and all-to-alls back for O|Lse, dQ and dK|dV. P divides both head counts.
HandCase hand_ulysses(int P, const Workload& w) {
  HandCase c = start_case(fmt::format("ulysses{}", P), P, w);
  const HeadRange hq{0, w.heads}, hkv{0, w.kv_heads};
  const TokenSet all{{0, w.seq}};
  const int64_t cap = largest_part(w, P);
  std::vector<TokenSet> parts, alls(size_t(P), all);
  std::vector<HeadRange> q_share, kv_share, all_q(size_t(P), hq), all_kv(size_t(P), hkv);
  for (int i = 0; i < P; ++i) {
    parts.push_back(contiguous_part(w.seq, P, i));
    q_share.push_back({i * w.heads / P, (i + 1) * w.heads / P});
    kv_share.push_back({i * w.kv_heads / P, (i + 1) * w.kv_heads / P});
  }
  const Mask mask = w.causal ? Mask::Causal : Mask::None;
  for (int r = 0; r < P; ++r) {
    HandBuilder b(c.schedule, r, w.batch);
    const TokenSet& own = parts[size_t(r)];
    const HeadRange mq = q_share[size_t(r)], mkv = kv_share[size_t(r)];
    const int32_t q_in = b.buffer("q.in", field_bit(Field::Q), hq, cap), kv_in = b.buffer("kv.in", kKV, hkv, cap);
    const int32_t do_in = b.buffer("do.in", field_bit(Field::dO), hq, cap);
    const int32_t q = b.buffer("q", kBundle, mq, w.seq), kv = b.buffer("kv", kKV, mkv, w.seq);
    const int32_t acc = b.buffer("acc", kOLse, mq, w.seq), o_out = b.buffer("o.out", kOLse, hq, cap);
    const int32_t dq = b.buffer("dq", field_bit(Field::dQ), mq, w.seq), dkv = b.buffer("dkv", kDKV, mkv, w.seq);
    const int32_t dq_out = b.buffer("dq.out", field_bit(Field::dQ), hq, cap),
                  dkv_out = b.buffer("dkv.out", kDKV, hkv, cap);
    b.input(q_in, Field::Q, own, hq);
    b.input(kv_in, Field::K, own, hkv);
    b.input(kv_in, Field::V, own, hkv);
    b.input(do_in, Field::dO, own, hq);
    const Reduction sum = Reduction::Sum;
    int32_t a = b.collective(OpKind::AllToAll, 0, q_in, q, field_bit(Field::Q), sum, parts, alls, all_q, q_share);
    int32_t k = b.collective(OpKind::AllToAll, 0, kv_in, kv, kKV, sum, parts, alls, all_kv, kv_share);
    b.fwd(q, kv, acc, all, all, mq, mask, {a, k});
    int32_t copied = b.copy(acc, q, all, kOLse, mq);
    b.collective(OpKind::AllToAll, 0, q, o_out, kOLse, sum, alls, parts, q_share, all_q, {copied});
    int32_t d = b.collective(OpKind::AllToAll, 0, do_in, q, field_bit(Field::dO), sum, parts, alls, all_q, q_share);
    b.prep(q, all, mq, {d});
    int32_t computed = b.bwd(q, kv, dq, dkv, all, all, mq, mask);
    b.collective(OpKind::AllToAll, 0, dq, dq_out, field_bit(Field::dQ), sum, alls, parts, q_share, all_q, {computed});
    b.collective(OpKind::AllToAll, 0, dkv, dkv_out, kDKV, sum, alls, parts, kv_share, all_kv, {computed});
    b.output(o_out, Field::O, own, hq);
    b.output(o_out, Field::Lse, own, hq);
    b.output(dq_out, Field::dQ, own, hq);
    b.output(dkv_out, Field::dK, own, hkv);
    b.output(dkv_out, Field::dV, own, hkv);
    c.schedule.ranks.push_back(b.finish());
  }
  return c;
}

// Keys stay home; queries are all-gathered. Every rank computes partial (O, lse) of all queries
// over its keys, and an LseMerge reduce-scatter gives each rank its final rows. Backward gathers
// dO, lse and D, and reduce-scatters (sums) the partial dQ.
HandCase hand_key_split(int P, const Workload& w) {
  HandCase c = start_case(fmt::format("keysplit{}", P), P, w);
  const HeadRange hq{0, w.heads}, hkv{0, w.kv_heads};
  const TokenSet all{{0, w.seq}};
  const int64_t cap = largest_part(w, P);
  std::vector<TokenSet> parts, alls(size_t(P), all);
  for (int i = 0; i < P; ++i)
    parts.push_back(contiguous_part(w.seq, P, i));
  const std::vector<HeadRange> heads(size_t(P), hq);
  const Mask mask = w.causal ? Mask::Causal : Mask::None;
  const FieldMask query_side = field_mask({Field::Q, Field::dO, Field::Lse, Field::D});
  for (int r = 0; r < P; ++r) {
    HandBuilder b(c.schedule, r, w.batch);
    const TokenSet& own = parts[size_t(r)];
    const int32_t q_in = b.buffer("q.in", field_mask({Field::Q, Field::dO}), hq, cap),
                  kv = b.buffer("kv", kKV, hkv, cap);
    const int32_t q_all = b.buffer("q.all", query_side, hq, w.seq), acc = b.buffer("acc", kOLse, hq, w.seq);
    const int32_t mine = b.buffer("o", field_mask({Field::O, Field::Lse, Field::dO, Field::D}), hq, cap);
    const int32_t dq_all = b.buffer("dq.all", field_bit(Field::dQ), hq, w.seq);
    const int32_t dq = b.buffer("dq", field_bit(Field::dQ), hq, cap), dkv = b.buffer("dkv", kDKV, hkv, cap);
    b.input(q_in, Field::Q, own, hq);
    b.input(q_in, Field::dO, own, hq);
    b.input(kv, Field::K, own, hkv);
    b.input(kv, Field::V, own, hkv);
    const Reduction sum = Reduction::Sum;
    int32_t g = b.collective(OpKind::AllGather, 1, q_in, q_all, field_bit(Field::Q), sum, parts, alls, heads, heads);
    int32_t f = b.fwd(q_all, kv, acc, all, own, hq, mask, {g});
    int32_t merged =
        b.collective(OpKind::ReduceScatter, 1, acc, mine, kOLse, Reduction::LseMerge, alls, parts, heads, heads, {f});
    b.output(mine, Field::O, own, hq);
    b.output(mine, Field::Lse, own, hq);
    int32_t moved = b.copy(q_in, mine, own, field_bit(Field::dO), hq, {merged});
    int32_t prepared = b.prep(mine, own, hq, {moved});
    int32_t g2 = b.collective(OpKind::AllGather, 1, mine, q_all, field_mask({Field::dO, Field::Lse, Field::D}), sum,
                              parts, alls, heads, heads, {prepared});
    int32_t computed = b.bwd(q_all, kv, dq_all, dkv, all, own, hq, mask, {g2});
    b.collective(OpKind::ReduceScatter, 1, dq_all, dq, field_bit(Field::dQ), sum, alls, parts, heads, heads,
                 {computed});
    b.output(dq, Field::dQ, own, hq);
    b.output(dkv, Field::dK, own, hkv);
    b.output(dkv, Field::dV, own, hkv);
    c.schedule.ranks.push_back(b.finish());
  }
  return c;
}

}  // namespace wallfacer::testing
