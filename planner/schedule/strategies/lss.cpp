// LSS Transformer (docs/algorithms.md §9.2, reconstructed). The world is S x D: a sequence group of S
// ranks shares one sequence, cut into one contiguous segment per rank; a data group joins the D
// ranks with the same segment index. Forward: one fused all-gather of [K | V] over the sequence
// group, then exact attention of the local queries over the key prefix they need (no merge).
// The gathered K,V copy is kept for the backward (LSS's "full K,V copy per layer"). Backward:
// local dQ, partial dK,dV for every key, one fused reduce-scatter of [dK | dV] to the owners
// (exact), and double gradient averaging: the weight gradients are all-reduced over the
// sequence group, then over the data group, never over the whole world at once.
#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>
#include "strategies/common.hpp"
#include "strategies/strategy_impl.hpp"

namespace wallfacer::detail {

namespace {

using namespace fieldset;

// Canonical groups: sequence groups ("seq", "d<d>.seq" when D > 1) for S > 1, then data groups
// ("data<s>") for D > 1. No world group: gradient averaging is two-staged.
int sequence_group(const StrategyParams& p, int replica) {
  return p.sequence_parallel > 1 ? replica : -1;
}
int data_group(const StrategyParams& p, int segment) {
  if (p.data_parallel <= 1) return -1;
  return (p.sequence_parallel > 1 ? p.data_parallel : 0) + segment;
}

class LssRank {
 public:
  LssRank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode)
      : b_(plan, rank, pool, mode),
        w_(plan.workload),
        S_(plan.params.sequence_parallel),
        x_(b_.replica().local),
        all_q_{0, w_.heads},
        all_kv_{0, w_.kv_heads} {}

  RankProgram build() {
    const TokenSet own = contiguous_shard(w_.seq, S_, x_);
    const TokenSet keys{{0, w_.causal ? own.front().end : w_.seq}};
    const int64_t rows = contiguous_range(w_.seq, S_, 0).size();  // the first segments are the longest
    const int32_t local = b_.buffer("local", kLocal, all_q_, rows);
    kv_ = b_.buffer("kv", kKV, all_kv_, rows);
    const int32_t acc = b_.buffer("acc", kOLse, all_q_, rows, true);
    b_.input(local, Field::Q, own, all_q_);
    b_.input(kv_, Field::K, own, all_kv_);
    b_.input(kv_, Field::V, own, all_kv_);
    b_.input(local, Field::dO, own, all_q_);
    const int32_t kv_all = S_ > 1 ? b_.buffer("kv.all", kKV, all_kv_, w_.seq) : kv_;
    if (S_ > 1) b_.collective(args(OpKind::AllGather, kv_, kv_all, kKV));
    b_.attn_fwd(local, kv_all, acc, own, keys, all_q_, 0);
    b_.copy(acc, local, own, kOLse);  // fp32 -> activation type, once
    b_.output(local, Field::O, own, all_q_);
    b_.output(local, Field::Lse, own, all_q_);

    b_.set_phase(Phase::Backward);
    b_.bwd_prep(local, own);
    const int32_t dq = b_.buffer("dq", kDQ, all_q_, rows, true);
    const int32_t dkv_all = b_.buffer("dkv.all", kDKV, all_kv_, S_ > 1 ? w_.seq : rows, true);
    b_.attn_bwd(local, kv_all, dq, dkv_all, own, keys, all_q_, 0);
    b_.output(dq, Field::dQ, own, all_q_);
    int32_t dkv = dkv_all;
    if (S_ > 1) {
      dkv = b_.buffer("dkv.out", kDKV, all_kv_, rows);
      b_.collective(args(OpKind::ReduceScatter, dkv_all, dkv, kDKV));
    }
    b_.output(dkv, Field::dK, own, all_kv_);
    b_.output(dkv, Field::dV, own, all_kv_);
    average_gradients();
    return b_.finish();
  }

 private:
  ProgramBuilder::CollectiveArgs args(OpKind kind, int32_t in, int32_t out, FieldMask fields) const {
    ProgramBuilder::CollectiveArgs a;
    a.kind = kind;
    a.group = sequence_group(b_.plan().params, b_.replica().index);
    a.in_buf = in;
    a.out_buf = out;
    a.fields = fields;
    const TokenSet all{{0, w_.seq}};
    for (int y = 0; y < S_; ++y) {
      (kind == OpKind::AllGather ? a.in_tokens : a.out_tokens).push_back(contiguous_shard(w_.seq, S_, y));
      (kind == OpKind::AllGather ? a.out_tokens : a.in_tokens).push_back(all);
      a.in_heads.push_back(all_kv_);
      a.out_heads.push_back(all_kv_);
    }
    return a;
  }

  // Stage 1 sums the segments' partial weight gradients in the sequence group; stage 2 averages
  // across data-parallel replicas.
  void average_gradients() {
    const StrategyParams& params = b_.plan().params;
    const int seq_group = sequence_group(params, b_.replica().index), data = data_group(params, x_);
    if (seq_group < 0 && data < 0) return;
    const int32_t buf = b_.buffer("wgrad", kWeightGrad, HeadRange{}, 0, true);
    b_.input(buf, Field::WeightGrad, {}, HeadRange{});
    std::vector<int32_t> after;  // weight gradients exist once dQ, dK and dV are final
    for (int s = 0; s < kNumStreams; ++s)
      if (b_.last_op(Stream(s)) >= 0) after.push_back(b_.last_op(Stream(s)));
    const int64_t elements = w_.attention_parameters_per_layer();
    if (seq_group >= 0) b_.all_reduce(seq_group, buf, kWeightGrad, elements, after);
    if (data >= 0) b_.all_reduce(data, buf, kWeightGrad, elements, after);
    b_.output(buf, Field::WeightGrad, {}, HeadRange{});
  }

  ProgramBuilder b_;
  const Workload& w_;
  int S_, x_;
  HeadRange all_q_, all_kv_;
  int32_t kv_ = -1;
};

class LssImpl final : public StrategyImpl {
 public:
  LssImpl() : StrategyImpl(StrategyKind::Lss) {}
  std::vector<CommGroup> groups(const StrategyParams& params, int ranks) const override {
    const int S = params.sequence_parallel, D = params.data_parallel;
    std::vector<CommGroup> out;
    if (S > 1)
      for (int d = 0; d < D; ++d) {
        out.push_back({replica_group_name(params, d, "seq"), GroupKind::Sequence, {}});
        for (int s = 0; s < S; ++s)
          out.back().ranks.push_back(d * S + s);
      }
    if (D > 1)
      for (int s = 0; s < S; ++s) {
        out.push_back({fmt::format("data{}", s), GroupKind::Data, {}});
        for (int d = 0; d < D; ++d)
          out.back().ranks.push_back(d * S + s);
      }
    return out;
  }
  std::vector<FlowSet> flow_sets(const Plan&) const override { return {}; }
  RankProgram build_rank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode) const override {
    return LssRank(plan, rank, pool, mode).build();
  }
};

}  // namespace

std::unique_ptr<StrategyImpl> make_lss_impl() {
  return std::make_unique<LssImpl>();
}

}  // namespace wallfacer::detail
