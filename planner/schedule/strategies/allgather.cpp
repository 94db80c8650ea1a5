// All-gather K/V context parallelism, "Llama-3 style" (docs/algorithms.md §5). Each of the S ranks of
// a replica holds a zigzag shard (two chunks of 2S) when causal, a contiguous one otherwise. The
// forward all-gathers K,V over the sequence group and each local query chunk attends to the key
// prefix it needs (one block per chunk, no merge across steps). The backward re-gathers K,V (the
// full copy is not kept between the passes: it grows with N), computes dQ locally and partial
// dK,dV for every key, and reduce-scatters the fp32 sums to their owners.
#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>
#include "strategies/common.hpp"
#include "strategies/strategy_impl.hpp"

namespace wallfacer::detail {

namespace {

using namespace fieldset;

TokenSet shard_of(const Workload& w, int S, int y) {
  return w.causal ? zigzag_shard(w.seq, S, y) : contiguous_shard(w.seq, S, y);
}

// Canonical groups of one replica: "seq" in rank order and "seq.rev" in reverse order.
constexpr int kGroupsPerReplica = 2;

// One gathered slice of the sequence: a contiguous token range that one all-gather over `group`
// assembles from one range per member (in group order) and one reduce-scatter returns. Causal
// (zigzag) runs have two: the first chunks gathered in rank order form [0, N/2), the second
// chunks gathered in reverse rank order form [N/2, N). Gathering both chunks in one call would
// leave the gathered rows in 2S pieces, and every member's collective spec would list them all.
struct Part {
  std::string name;
  int32_t group = -1;  // -1: a single rank, nothing to gather
  TokenRange range;
  std::vector<TokenSet> pieces;  // per member of `group`, in group order
  TokenRange mine;               // this rank's piece
  int32_t kv = -1, dkv = -1;
};

class AllGatherRank {
 public:
  AllGatherRank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode)
      : b_(plan, rank, pool, mode),
        w_(plan.workload),
        S_(plan.params.sequence_parallel),
        x_(b_.replica().local),
        all_q_{0, w_.heads},
        all_kv_{0, w_.kv_heads} {}

  RankProgram build() {
    const TokenSet own = shard_of(w_, S_, x_);
    const int64_t rows = token_count(shard_of(w_, S_, 0));
    local_ = b_.buffer("local", kLocal, all_q_, rows);
    kv_ = b_.buffer("kv", kKV, all_kv_, rows);
    const int32_t acc = b_.buffer("acc", kOLse, all_q_, rows, true);
    b_.input(local_, Field::Q, own, all_q_);
    b_.input(kv_, Field::K, own, all_kv_);
    b_.input(kv_, Field::V, own, all_kv_);
    b_.input(local_, Field::dO, own, all_q_);
    make_parts();

    gather();
    blocks(own, [&](const TokenRange& q, const Part& part, const TokenRange& k) {
      b_.attn_fwd(local_, part.kv, acc, {q}, {k}, all_q_, 0);
    });
    b_.copy(acc, local_, own, kOLse);  // fp32 -> activation type, once
    b_.output(local_, Field::O, own, all_q_);
    b_.output(local_, Field::Lse, own, all_q_);

    b_.set_phase(Phase::Backward);
    b_.bwd_prep(local_, own);
    gather();
    const int32_t dq = b_.buffer("dq", kDQ, all_q_, rows, true);
    for (Part& part : parts_)
      part.dkv = b_.buffer("dkv." + part.name, kDKV, all_kv_, part.range.size(), true);
    blocks(own, [&](const TokenRange& q, const Part& part, const TokenRange& k) {
      b_.attn_bwd(local_, part.kv, dq, part.dkv, {q}, {k}, all_q_, 0);
    });
    b_.output(dq, Field::dQ, own, all_q_);
    scatter();
    const Plan& plan = b_.plan();
    add_weight_grad_allreduce(b_, world_group_index(plan.params, plan.num_ranks(), S_ > 1 ? kGroupsPerReplica : 0));
    return b_.finish();
  }

 private:
  void make_parts() {
    const int64_t N = w_.seq;
    if (S_ == 1) {
      parts_.push_back({"all", -1, {0, N}, {}, {0, N}, kv_, -1});
      return;
    }
    const int replica = b_.replica().index;
    auto add = [&](std::string name, int local_group, TokenRange range, auto piece_of, int member) {
      Part part{std::move(name), replica_group_index(kGroupsPerReplica, replica, local_group), range, {}, {}, -1, -1};
      for (int m = 0; m < S_; ++m)
        part.pieces.push_back({piece_of(m)});
      part.mine = part.pieces[size_t(member)].front();
      part.kv = b_.buffer("kv." + part.name, kKV, all_kv_, range.size());
      parts_.push_back(std::move(part));
    };
    if (!w_.causal) {
      add(
          "all", 0, {0, N}, [&](int m) { return contiguous_range(N, S_, m); }, x_);
      return;
    }
    const int64_t chunk = N / (2 * S_);
    auto chunk_range = [&](int64_t c) { return TokenRange{c * chunk, (c + 1) * chunk}; };
    add(
        "lo", 0, {0, N / 2}, [&](int m) { return chunk_range(m); }, x_);
    // Member m of "seq.rev" is rank S-1-m, whose second chunk is 2S-1-(S-1-m) = S+m.
    add(
        "hi", 1, {N / 2, N}, [&](int m) { return chunk_range(S_ + m); }, S_ - 1 - x_);
  }

  // Calls `emit(q, part, keys)` for every local query range and part it needs keys from.
  template <typename Emit>
  void blocks(const TokenSet& own, Emit&& emit) {
    for (const TokenRange& q : own)
      for (const Part& part : parts_) {
        const TokenRange k{part.range.begin, std::min(part.range.end, w_.causal ? q.end : w_.seq)};
        if (k.size() > 0) emit(q, part, k);
      }
  }

  ProgramBuilder::CollectiveArgs args(const Part& part, OpKind kind, int32_t in, int32_t out, FieldMask fields) const {
    ProgramBuilder::CollectiveArgs a;
    a.kind = kind;
    a.group = part.group;
    a.in_buf = in;
    a.out_buf = out;
    a.fields = fields;
    const bool gathering = kind == OpKind::AllGather;
    for (const TokenSet& piece : part.pieces) {
      a.in_tokens.push_back(gathering ? piece : TokenSet{part.range});
      a.out_tokens.push_back(gathering ? TokenSet{part.range} : piece);
      a.in_heads.push_back(all_kv_);
      a.out_heads.push_back(all_kv_);
    }
    return a;
  }
  void gather() {
    for (const Part& part : parts_)
      if (part.group >= 0) b_.collective(args(part, OpKind::AllGather, kv_, part.kv, kKV));
  }
  // dK,dV partials of every key go back to their owners, summed.
  void scatter() {
    for (const Part& part : parts_) {
      int32_t out = part.dkv;
      if (part.group >= 0) {
        out = b_.buffer("dkv.out." + part.name, kDKV, all_kv_, part.mine.size());
        b_.collective(args(part, OpKind::ReduceScatter, part.dkv, out, kDKV));
      }
      b_.output(out, Field::dK, {part.mine}, all_kv_);
      b_.output(out, Field::dV, {part.mine}, all_kv_);
    }
  }

  ProgramBuilder b_;
  const Workload& w_;
  int S_, x_;
  HeadRange all_q_, all_kv_;
  int32_t local_ = -1, kv_ = -1;
  std::vector<Part> parts_;
};

class AllGatherImpl final : public StrategyImpl {
 public:
  AllGatherImpl() : StrategyImpl(StrategyKind::AllGather) {}
  Feasibility own_feasibility(const StrategyParams& params, const Workload& workload, int) const override {
    const int64_t S = params.sequence_parallel;
    if (workload.causal && workload.seq % (2 * S) != 0)
      return {false, fmt::format("sequence length {} not divisible by 2 x {} ranks = {} (zigzag layout)", workload.seq,
                                 S, 2 * S)};
    return {};
  }
  std::vector<CommGroup> groups(const StrategyParams& params, int ranks) const override {
    const int S = params.sequence_parallel;
    std::vector<CommGroup> replica;
    if (S > 1) {
      replica.push_back({"seq", GroupKind::Sequence, {}});
      replica.push_back({"seq.rev", GroupKind::Sequence, {}});
      for (int y = 0; y < S; ++y)
        replica[0].ranks.push_back(y), replica[1].ranks.push_back(S - 1 - y);
    }
    return replicate_groups(params, ranks, replica);
  }
  std::vector<FlowSet> flow_sets(const Plan&) const override { return {}; }
  RankProgram build_rank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode) const override {
    return AllGatherRank(plan, rank, pool, mode).build();
  }
};

}  // namespace

std::unique_ptr<StrategyImpl> make_allgather_impl() {
  return std::make_unique<AllGatherImpl>();
}

}  // namespace wallfacer::detail
