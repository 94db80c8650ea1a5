// USP (docs/algorithms.md §6): a Ulysses all-to-all of degree u around a pass-KV ring of r ranks.
// Also the per-rank program of every context strategy (build_context_rank): the Ulysses stage
// (sequence -> head before the ring, head -> sequence after it) wrapped around the ring loops of
// ring.cpp. With u = 1 the stage disappears and the inputs feed the ring directly.
#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>
#include "strategies/common.hpp"
#include "strategies/context_parallel.hpp"
#include "strategies/strategy_impl.hpp"

namespace wallfacer::detail {

namespace {

using namespace fieldset;
constexpr FieldMask kBundle = kLocal;

// Per-member token and head maps of one Ulysses group.
struct UlyssesGroup {
  int32_t group = -1;
  std::vector<TokenSet> shards, context;  // sequence layout; head layout (all = the context block)
  std::vector<HeadRange> q_heads, kv_heads, all_q, all_kv;
};

UlyssesGroup ulysses_group(const ProgramBuilder& b, const ContextConfig& cfg, int x) {
  const Workload& w = b.plan().workload;
  UlyssesGroup g;
  g.group = replica_group_index(context_groups_per_replica(cfg), b.replica().index, ulysses_group_local_index(cfg, x));
  const TokenSet block = context_tokens(cfg, w.seq, x);
  for (int v = 0; v < cfg.u; ++v) {
    g.shards.push_back(sequence_shard(cfg, w.seq, x * cfg.u + v));
    g.context.push_back(block);
    g.q_heads.push_back(split_heads(w.heads, cfg.u, v));
    g.kv_heads.push_back(ulysses_kv_heads(w.heads, w.kv_heads, cfg.u, v));
    g.all_q.push_back({0, w.heads});
    g.all_kv.push_back({0, w.kv_heads});
  }
  return g;
}

// Sequence -> head (to_heads) or head -> sequence all-to-all of `fields`.
int32_t ulysses_exchange(ProgramBuilder& b, const UlyssesGroup& g, bool to_heads, bool kv_class, int32_t in,
                         int32_t out, FieldMask fields, OpKind kind = OpKind::AllToAll) {
  ProgramBuilder::CollectiveArgs args;
  args.kind = kind;
  args.group = g.group;
  args.in_buf = in;
  args.out_buf = out;
  args.fields = fields;
  const auto& head_split = kv_class ? g.kv_heads : g.q_heads;
  const auto& all_heads = kv_class ? g.all_kv : g.all_q;
  args.in_tokens = to_heads ? g.shards : g.context;
  args.out_tokens = to_heads ? g.context : g.shards;
  args.in_heads = to_heads ? all_heads : head_split;
  args.out_heads = to_heads ? head_split : all_heads;
  return b.collective(args);
}

void bind_outputs(ProgramBuilder& b, int32_t buf, std::initializer_list<Field> fields, const TokenSet& tokens,
                  HeadRange heads) {
  for (Field f : fields)
    b.output(buf, f, tokens, heads);
}

}  // namespace

RankProgram build_context_rank(const ContextConfig& cfg, const Plan& plan, int rank, TokenSetPool& pool,
                               BuildMode mode) {
  ProgramBuilder b(plan, rank, pool, mode);
  b.set_diagonal_as_one_block(true);
  // Per context step: a forward and a backward block and up to six transfers.
  b.reserve_ops(size_t(cfg.c) * 10 + 32, size_t(cfg.c) * 6);
  const Workload& w = plan.workload;
  const int s = b.replica().local;
  ContextRank r;
  r.x = s / cfg.u;
  r.v = s % cfg.u;
  r.q_heads = split_heads(w.heads, cfg.u, r.v);
  r.kv_heads = ulysses_kv_heads(w.heads, w.kv_heads, cfg.u, r.v);
  const TokenSet block = context_tokens(cfg, w.seq, r.x);
  const int64_t rows = token_count(block);
  r.kv_capacity = token_count(context_tokens(cfg, w.seq, 0));  // block 0 is never shorter
  r.q = b.buffer("q", kBundle, r.q_heads, rows);
  r.kv = b.buffer("kv", field_mask({Field::K, Field::V}), r.kv_heads, rows);
  r.acc = b.buffer("acc", field_mask({Field::O, Field::Lse}), r.q_heads, rows, true);

  const bool ulysses = cfg.u > 1;
  const TokenSet shard = sequence_shard(cfg, w.seq, s);
  const int64_t shard_rows = token_count(shard);
  const HeadRange all_q{0, w.heads}, all_kv{0, w.kv_heads};
  UlyssesGroup group;
  int32_t q_in = -1, kv_in = -1, do_in = -1;
  if (ulysses) {
    group = ulysses_group(b, cfg, r.x);
    q_in = b.buffer("q.in", field_bit(Field::Q), all_q, shard_rows);
    kv_in = b.buffer("kv.in", field_mask({Field::K, Field::V}), all_kv, shard_rows);
    do_in = b.buffer("do.in", field_bit(Field::dO), all_q, shard_rows);
    b.input(q_in, Field::Q, shard, all_q);
    b.input(kv_in, Field::K, shard, all_kv);
    b.input(kv_in, Field::V, shard, all_kv);
    b.input(do_in, Field::dO, shard, all_q);
  } else {
    b.input(r.q, Field::Q, block, r.q_heads);
    b.input(r.kv, Field::K, block, r.kv_heads);
    b.input(r.kv, Field::V, block, r.kv_heads);
    b.input(r.q, Field::dO, block, r.q_heads);
  }

  // Forward.
  if (ulysses) {
    ulysses_exchange(b, group, true, false, q_in, r.q, field_bit(Field::Q));
    ulysses_exchange(b, group, true, true, kv_in, r.kv, field_mask({Field::K, Field::V}));
  }
  context_forward(b, cfg, r);
  b.copy(r.acc, r.q, block, field_mask({Field::O, Field::Lse}));  // fp32 -> dtype, once
  if (ulysses) {
    const int32_t o_out = b.buffer("o.out", field_mask({Field::O, Field::Lse}), all_q, shard_rows);
    ulysses_exchange(b, group, false, false, r.q, o_out, field_mask({Field::O, Field::Lse}));
    bind_outputs(b, o_out, {Field::O, Field::Lse}, shard, all_q);
  } else {
    bind_outputs(b, r.q, {Field::O, Field::Lse}, block, r.q_heads);
  }

  // Backward.
  b.set_phase(Phase::Backward);
  if (ulysses) ulysses_exchange(b, group, true, false, do_in, r.q, field_bit(Field::dO));
  b.bwd_prep(r.q, block);
  r.dq = b.buffer("dq", field_bit(Field::dQ), r.q_heads, rows, true);
  const int32_t dkv = context_backward(b, cfg, r);
  if (ulysses) {
    const FieldMask dkv_fields = field_mask({Field::dK, Field::dV});
    const int32_t dq_cast = b.buffer("dq.cast", field_bit(Field::dQ), r.q_heads, rows);
    const int32_t dkv_cast = b.buffer("dkv.cast", dkv_fields, r.kv_heads, rows);
    b.copy(r.dq, dq_cast, block, field_bit(Field::dQ));
    b.copy(dkv, dkv_cast, block, dkv_fields);
    const int32_t dq_out = b.buffer("dq.out", field_bit(Field::dQ), all_q, shard_rows);
    const int32_t dkv_out = b.buffer("dkv.out", dkv_fields, all_kv, shard_rows);
    ulysses_exchange(b, group, false, false, dq_cast, dq_out, field_bit(Field::dQ));
    // Replicated kv heads (u > kv_heads) come back from several members: sum them.
    const bool replicated = w.kv_heads % cfg.u != 0;
    ulysses_exchange(b, group, false, true, dkv_cast, dkv_out, dkv_fields,
                     replicated ? OpKind::ReduceScatter : OpKind::AllToAll);
    bind_outputs(b, dq_out, {Field::dQ}, shard, all_q);
    bind_outputs(b, dkv_out, {Field::dK, Field::dV}, shard, all_kv);
  } else {
    bind_outputs(b, r.dq, {Field::dQ}, block, r.q_heads);
    bind_outputs(b, dkv, {Field::dK, Field::dV}, block, r.kv_heads);
  }
  add_weight_grad_allreduce(b, world_group_index(plan.params, plan.num_ranks(), context_groups_per_replica(cfg)));
  return b.finish();
}

// ---- USP -------------------------------------------------------------------------------------

ContextConfig usp_config(const StrategyParams& params, bool causal) {
  const UspKnobs& k = knobs_of<UspKnobs>(StrategyKind::Usp, params);
  ContextConfig cfg;
  cfg.u = std::max(1, k.ulysses);
  cfg.c = cfg.w = std::max(1, k.ring);
  cfg.zigzag = causal;
  return cfg;
}

namespace {

class UspImpl final : public StrategyImpl {
 public:
  UspImpl() : StrategyImpl(StrategyKind::Usp) {}
  Feasibility own_feasibility(const StrategyParams& params, const Workload& workload, int) const override {
    const UspKnobs& k = knobs<UspKnobs>(params);
    if (k.ulysses < 1 || k.ring < 1 || int64_t(k.ulysses) * k.ring != params.sequence_parallel)
      return {false, fmt::format("Ulysses degree {} x ring degree {} != sequence parallel degree {}", k.ulysses, k.ring,
                                 params.sequence_parallel)};
    return context_feasibility(usp_config(params, workload.causal), workload);
  }
  std::vector<StrategyParams> enumerate(const Workload& workload, int ranks) const override {
    std::vector<StrategyParams> out;
    for (int D : data_parallel_splits(workload, ranks)) {
      const int S = ranks / D;
      for (int u : divisors(S)) {
        if (u == 1 || u == S) continue;  // plain ring and plain Ulysses
        for (ContextPlacement placement : {ContextPlacement::HeadFirst, ContextPlacement::ContextFirst})
          out.push_back({.sequence_parallel = S, .data_parallel = D, .knobs = UspKnobs{u, S / u, placement}});
      }
    }
    return out;
  }
  std::vector<CommGroup> groups(const StrategyParams& params, int ranks) const override {
    return context_groups(usp_config(params, true), params, ranks);
  }
  std::vector<int> positions(const StrategyParams& params, int ranks) const override {
    return context_positions(usp_config(params, true), params, ranks,
                             knobs<UspKnobs>(params).placement == ContextPlacement::ContextFirst);
  }
  std::vector<FlowSet> flow_sets(const Plan& plan) const override {
    return context_flow_sets(usp_config(plan.params, plan.workload.causal), plan);
  }
  RankProgram build_rank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode) const override {
    return build_context_rank(usp_config(plan.params, plan.workload.causal), plan, rank, pool, mode);
  }
};

}  // namespace

std::unique_ptr<StrategyImpl> make_usp_impl() {
  return std::make_unique<UspImpl>();
}

}  // namespace wallfacer::detail
