// WallFacer multi-ring attention (docs/algorithms.md §8). Per replica of S ranks: teams of C
// consecutive logical ranks all-gather Q, K, V; an initial placement sends each team's K,V into
// C^2 concentric sub-rings of G = S / C^2 members (rank formulas in wallfacer_layout.hpp); G
// rounds shift K,V around each sub-ring while the team's C*n queries attend to them; a team
// reduce-scatter with the log-sum-exp merge combines the C partial outputs.
//
// Backward (§8.4, reconstructed): each member re-gathers its team's Q and gathers dO, Lse, D; the
// K,V placement is repeated and K,V then stay put. The query bundle (Q, dO, Lse, D) and its fp32
// dQ accumulator travel the sub-ring while dK,dV accumulate with the K,V holder; dQ takes one
// extra hop home and is summed over the team by a reduce-scatter. Each K,V shard has one dK,dV
// copy per team group: the copies return along the inverse placement and a team reduce-scatter
// sums them per token.
//
// Degenerate cases: C = 1 has no team collectives and no placement traffic (a ring with a pass-Q
// backward); C = sqrt(S) has G = 1, so no sub-ring shifts: only the placement exchange remains
// point to point. Causal masks use the zigzag layout of Fig. 3 (2S chunks, rank i holds chunks i
// and 2S-1-i), and ProgramBuilder emits only live blocks.
#include <fmt/format.h>

#include <unordered_map>

#include <wallfacer/core/errors.hpp>
#include "strategies/common.hpp"
#include "strategies/strategy_impl.hpp"
#include "strategies/wallfacer_layout.hpp"

namespace wallfacer::detail {

namespace {

int team_of(const StrategyParams& params) {
  return knobs_of<WallFacerKnobs>(StrategyKind::WallFacer, params).team;
}

using namespace fieldset;
constexpr FieldMask kBundle = kQueryBundle;

// Tag channels (make_tag): one per message stream between a pair of ranks.
enum Channel { kPlaceForward = 1, kKvShift = 2, kPlaceBackward = 3, kBundleShift = 4, kDqShift = 5, kDkvReturn = 6 };

// Flow-set indices; -1 where the configuration has no such flows (C = 1: no placement traffic,
// G = 1: no shifts).
struct FlowIndex {
  int placement = -1, kv_shift = -1, bundle_shift = -1, dq_shift = -1, dkv_return = -1;
};
FlowIndex flow_index(const WallFacerLayout& L) {
  FlowIndex f;
  int n = 0;
  if (L.C > 1) f.placement = n++;
  if (L.G > 1) f.kv_shift = n++, f.bundle_shift = n++, f.dq_shift = n++;
  if (L.C > 1) f.dkv_return = n++;
  return f;
}

int groups_per_replica(const WallFacerLayout& L) {
  return (L.C > 1 ? L.T : 0) + (L.G > 1 ? L.C * L.C : 0);
}

// Teams ("team<t>", C members) then sub-rings ("subring.g<g>.a<a>", G members in ring order) of
// one replica; single-member groups are left out.
std::vector<CommGroup> replica_groups(const WallFacerLayout& L) {
  std::vector<CommGroup> groups;
  if (L.C > 1)
    for (int t = 0; t < L.T; ++t) {
      CommGroup g{fmt::format("team{}", t), GroupKind::Team, {}};
      for (int a = 0; a < L.C; ++a)
        g.ranks.push_back(L.rank(t, a));
      groups.push_back(std::move(g));
    }
  if (L.G > 1)
    for (int g = 0; g < L.C; ++g)
      for (int a = 0; a < L.C; ++a) {
        CommGroup ring{fmt::format("subring.g{}.a{}", g, a), GroupKind::SubRing, {}};
        for (int j = 0; j < L.G; ++j)
          ring.ranks.push_back(L.rank(g * L.G + j, a));
        groups.push_back(std::move(ring));
      }
  return groups;
}

// One rank's program.
class WallFacerRank {
 public:
  WallFacerRank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode)
      : b_(plan, rank, pool, mode),
        L_(plan.params.sequence_parallel, team_of(plan.params)),
        flows_(flow_index(L_)),
        x_(b_.replica().local),
        all_q_{0, plan.workload.heads},
        all_kv_{0, plan.workload.kv_heads} {}

  RankProgram build() {
    declare_buffers();
    forward();
    backward();
    const Plan& plan = b_.plan();
    add_weight_grad_allreduce(b_, world_group_index(plan.params, plan.num_ranks(), groups_per_replica(L_)));
    return b_.finish();
  }

 private:
  TokenSet shard(int y) const {
    const int64_t seq = b_.plan().workload.seq;
    return b_.plan().workload.causal ? zigzag_shard(seq, L_.S, y) : contiguous_shard(seq, L_.S, y);
  }
  // Rows of a team-gathered buffer: the members' shards in member order. A rank meets at most
  // 2G + 1 teams; each is built once, in O(C).
  const TokenSet& team_tokens(int team) {
    auto [it, fresh] = team_tokens_.try_emplace(team);
    if (fresh) {
      for (int a = 0; a < L_.C; ++a) {
        const TokenSet piece = shard(L_.rank(team, a));
        it->second.insert(it->second.end(), piece.begin(), piece.end());
      }
      it->second = canonical(std::move(it->second));
    }
    return it->second;
  }
  int global(int y) const { return b_.replica().global(y); }
  int32_t team_group() const { return replica_group_index(groups_per_replica(L_), b_.replica().index, L_.team(x_)); }

  void declare_buffers();
  int32_t kv_buffer(int i);
  void gather(int32_t in, int32_t out, FieldMask fields, HeadRange heads);
  void reduce_scatter(int32_t in, int32_t out, FieldMask fields, Reduction reduction, HeadRange heads);
  int32_t place_kv(int32_t local, Channel channel);
  void forward();
  void backward();
  int32_t backward_rounds(int32_t bundle0, int32_t holder);
  void return_dkv();

  ProgramBuilder b_;
  WallFacerLayout L_;
  FlowIndex flows_;
  int x_;
  HeadRange all_q_, all_kv_;
  int64_t rows_ = 0, team_rows_ = 0;
  int32_t local_ = -1, kv_ = -1, acc_ = -1, kv_team_ = -1, dkv_ = -1;
  int32_t kv_rx_[2] = {-1, -1}, bundle_[2] = {-1, -1}, dq_[2] = {-1, -1};
  std::unordered_map<int, TokenSet> team_tokens_;
};

void WallFacerRank::declare_buffers() {
  const TokenSet own = shard(x_);
  rows_ = token_count(shard(0));  // shard 0 is never shorter
  team_rows_ = token_count(team_tokens(0));
  local_ = b_.buffer("local", kLocal, all_q_, rows_);
  kv_ = b_.buffer("kv", kKV, all_kv_, rows_);
  acc_ = b_.buffer("acc", kOLse, all_q_, team_rows_, true);
  b_.input(local_, Field::Q, own, all_q_);
  b_.input(kv_, Field::K, own, all_kv_);
  b_.input(kv_, Field::V, own, all_kv_);
  b_.input(local_, Field::dO, own, all_q_);
  if (L_.C > 1) {
    kv_team_ = b_.buffer("kv.team", kKV, all_kv_, team_rows_);
    bundle_[1] = b_.buffer("bundle.1", kBundle, all_q_, team_rows_);
  }
  if (L_.G > 1) {
    bundle_[0] = b_.buffer("bundle.0", kBundle, all_q_, team_rows_);
    if (bundle_[1] < 0) bundle_[1] = b_.buffer("bundle.1", kBundle, all_q_, team_rows_);
  }
}

// K,V receive buffers, declared on first use.
int32_t WallFacerRank::kv_buffer(int i) {
  if (kv_rx_[i] < 0) kv_rx_[i] = b_.buffer(fmt::format("kv.{}", i), kKV, all_kv_, team_rows_);
  return kv_rx_[i];
}

void WallFacerRank::gather(int32_t in, int32_t out, FieldMask fields, HeadRange heads) {
  ProgramBuilder::CollectiveArgs args;
  args.kind = OpKind::AllGather;
  args.group = team_group();
  args.in_buf = in;
  args.out_buf = out;
  args.fields = fields;
  const TokenSet team = team_tokens(L_.team(x_));
  for (int a = 0; a < L_.C; ++a) {
    args.in_tokens.push_back(shard(L_.rank(L_.team(x_), a)));
    args.out_tokens.push_back(team);
    args.in_heads.push_back(heads);
    args.out_heads.push_back(heads);
  }
  b_.collective(args);
}

void WallFacerRank::reduce_scatter(int32_t in, int32_t out, FieldMask fields, Reduction reduction, HeadRange heads) {
  ProgramBuilder::CollectiveArgs args;
  args.kind = OpKind::ReduceScatter;
  args.group = team_group();
  args.in_buf = in;
  args.out_buf = out;
  args.fields = fields;
  args.reduction = reduction;
  const TokenSet team = team_tokens(L_.team(x_));
  for (int a = 0; a < L_.C; ++a) {
    args.in_tokens.push_back(team);
    args.out_tokens.push_back(shard(L_.rank(L_.team(x_), a)));
    args.in_heads.push_back(heads);
    args.out_heads.push_back(heads);
  }
  b_.collective(args);
}

// Initial placement: sends this team's K,V (in `local`) to target(x) and receives the K,V of
// initial_kv_team(x). Returns the buffer that then holds it (`local` when x keeps its own).
int32_t WallFacerRank::place_kv(int32_t local, Channel channel) {
  const int target = L_.target(x_), source = L_.source(x_);
  if (target == x_) return local;
  const int32_t tag = make_tag(channel, 0);
  b_.send(local, team_tokens(L_.team(x_)), kKV, global(target), tag, flows_.placement, 0);
  b_.recv(kv_buffer(1), team_tokens(L_.initial_kv_team(x_)), kKV, global(source), tag, flows_.placement, 0);
  return kv_buffer(1);
}

void WallFacerRank::forward() {
  const TokenSet own = shard(x_), mine = team_tokens(L_.team(x_));
  int32_t queries = local_, kv_local = kv_;
  if (L_.C > 1) {
    gather(local_, bundle_[1], kQ, all_q_);
    gather(kv_, kv_team_, kKV, all_kv_);
    queries = bundle_[1];
    kv_local = kv_team_;
  }
  const int32_t first = place_kv(kv_local, kPlaceForward);
  for (int s = 0; s < L_.G; ++s) {
    // Round 0 uses the placed block; later rounds alternate the two receive buffers.
    const int32_t current = s == 0 ? first : kv_buffer((s + 1) % 2);
    const TokenSet keys = team_tokens(L_.kv_team_at(x_, s));
    if (s + 1 < L_.G) {
      const int32_t tag = make_tag(kKvShift, s);
      b_.send(current, keys, kKV, global(L_.next(x_)), tag, flows_.kv_shift, s);
      b_.recv(kv_buffer(s % 2), team_tokens(L_.kv_team_at(x_, s + 1)), kKV, global(L_.prev(x_)), tag, flows_.kv_shift,
              s);
    }
    b_.attn_fwd(queries, current, acc_, mine, keys, all_q_, s);
  }
  if (L_.C > 1) {
    // Partials are cast once to the activation type before the combine (the paper's volume); the
    // merge itself runs in fp32 inside the reduction.
    const int32_t partial = b_.buffer("o.partial", kOLse, all_q_, team_rows_);
    b_.copy(acc_, partial, mine, kOLse);
    reduce_scatter(partial, local_, kOLse, Reduction::LseMerge, all_q_);
  } else {
    b_.copy(acc_, local_, own, kOLse);  // fp32 -> activation type, once
  }
  b_.output(local_, Field::O, own, all_q_);
  b_.output(local_, Field::Lse, own, all_q_);
}

void WallFacerRank::backward() {
  b_.set_phase(Phase::Backward);
  const TokenSet own = shard(x_);
  b_.bwd_prep(local_, own);
  int32_t bundle0 = local_, kv_local = kv_;
  if (L_.C > 1) {
    gather(local_, bundle_[1], kBundle, all_q_);  // Q re-gathered with dO, Lse and D in one call
    gather(kv_, kv_team_, kKV, all_kv_);
    bundle0 = bundle_[1];
    kv_local = kv_team_;
  }
  const int32_t holder = place_kv(kv_local, kPlaceBackward);
  dkv_ = b_.buffer("dkv", kDKV, all_kv_, team_rows_, true);
  const int32_t dq_home = backward_rounds(bundle0, holder);
  if (L_.C > 1) {
    const int32_t dq_out = b_.buffer("dq.out", kDQ, all_q_, rows_);
    reduce_scatter(dq_home, dq_out, kDQ, Reduction::Sum, all_q_);
    b_.output(dq_out, Field::dQ, own, all_q_);
  } else {
    b_.output(dq_home, Field::dQ, own, all_q_);
  }
  return_dkv();
}

// G rounds with the K,V block fixed in `holder`; returns the buffer holding this team's dQ
// partial once it is home.
int32_t WallFacerRank::backward_rounds(int32_t bundle0, int32_t holder) {
  const TokenSet keys = team_tokens(L_.initial_kv_team(x_));
  for (int i = 0; i < (L_.G > 1 ? 2 : 1); ++i)
    dq_[1 - i] = b_.buffer(fmt::format("dq.{}", 1 - i), kDQ, all_q_, team_rows_, true);
  for (int s = 0; s < L_.G; ++s) {
    const int32_t bundle = s == 0 ? bundle0 : bundle_[(s + 1) % 2];
    const int32_t dq = dq_[(s + 1) % 2];
    const TokenSet queries = team_tokens(L_.q_team_at(x_, s));
    const TokenSet following = team_tokens(L_.q_team_at(x_, s + 1));
    if (s + 1 < L_.G) {
      const int32_t tag = make_tag(kBundleShift, s);
      b_.send(bundle, queries, kBundle, global(L_.next(x_)), tag, flows_.bundle_shift, s);
      b_.recv(bundle_[s % 2], following, kBundle, global(L_.prev(x_)), tag, flows_.bundle_shift, s);
    }
    b_.attn_bwd(bundle, holder, dq, dkv_, queries, keys, all_q_, s);
    if (L_.G > 1) {  // after the last round this hop brings the accumulator home
      const int32_t tag = make_tag(kDqShift, s);
      b_.send(dq, queries, kDQ, global(L_.next(x_)), tag, flows_.dq_shift, s);
      b_.recv(dq_[s % 2], following, kDQ, global(L_.prev(x_)), tag, flows_.dq_shift, s);
    }
  }
  return L_.G > 1 ? dq_[(L_.G + 1) % 2] : dq_[1];
}

// dK,dV copies go back along the inverse placement, then the owning team sums them per token.
void WallFacerRank::return_dkv() {
  const TokenSet own = shard(x_), mine = team_tokens(L_.team(x_));
  int32_t home = dkv_;
  if (L_.target(x_) != x_) {
    home = b_.buffer("dkv.home", kDKV, all_kv_, team_rows_, true);
    const int32_t tag = make_tag(kDkvReturn, 0);
    const int step = L_.G;
    b_.send(dkv_, team_tokens(L_.initial_kv_team(x_)), kDKV, global(L_.source(x_)), tag, flows_.dkv_return, step);
    b_.recv(home, mine, kDKV, global(L_.target(x_)), tag, flows_.dkv_return, step);
  }
  int32_t out = home;
  if (L_.C > 1) {
    out = b_.buffer("dkv.out", kDKV, all_kv_, rows_);
    reduce_scatter(home, out, kDKV, Reduction::Sum, all_kv_);
  }
  b_.output(out, Field::dK, own, all_kv_);
  b_.output(out, Field::dV, own, all_kv_);
}

class WallFacerImpl final : public StrategyImpl {
 public:
  WallFacerImpl() : StrategyImpl(StrategyKind::WallFacer) {}
  Feasibility own_feasibility(const StrategyParams& params, const Workload& workload, int) const override {
    const int S = params.sequence_parallel, C = team_of(params);
    auto no = [](std::string why) { return Feasibility{false, std::move(why)}; };
    if (C < 1) return no(fmt::format("team size C = {} must be at least 1", C));
    if (S % C != 0) return no(fmt::format("team size C = {} does not divide the {} sequence ranks", C, S));
    // C^2 in 64 bits: a team size near S (hundreds of thousands of ranks) overflows int.
    if (const int64_t squared = int64_t(C) * C; S % squared != 0)
      return no(fmt::format("C^2 = {} does not divide the {} sequence ranks (C <= sqrt(S) with C^2 | S)", squared, S));
    if (workload.causal && workload.seq % (2 * int64_t(S)) != 0)
      return no(fmt::format("sequence length {} not divisible by 2 x {} ranks = {} (zigzag layout)", workload.seq, S,
                            2 * int64_t(S)));
    return {};
  }

  // Every team size with C^2 | S; P2P_intra only where it differs from Collect_intra (1 < C and
  // G > 1; otherwise the two mappings coincide).
  std::vector<StrategyParams> enumerate(const Workload& workload, int ranks) const override {
    std::vector<StrategyParams> out;
    for (int D : data_parallel_splits(workload, ranks)) {
      const int S = ranks / D;
      for (int C : divisors(S)) {
        const int64_t squared = int64_t(C) * C;  // overflows int for C near S at 2^16+ ranks
        if (S % squared != 0) continue;
        StrategyParams p{.sequence_parallel = S, .data_parallel = D, .knobs = WallFacerKnobs{C}};
        out.push_back(p);
        if (C > 1 && S / squared > 1)
          out.push_back(
              {.sequence_parallel = S, .data_parallel = D, .knobs = WallFacerKnobs{C, TeamPlacement::P2PIntra}});
      }
    }
    return out;
  }

  std::vector<CommGroup> groups(const StrategyParams& params, int ranks) const override {
    return replicate_groups(params, ranks, replica_groups(WallFacerLayout(params.sequence_parallel, team_of(params))));
  }

  std::vector<int> positions(const StrategyParams& params, int ranks) const override {
    if (knobs<WallFacerKnobs>(params).placement != TeamPlacement::P2PIntra)
      return StrategyImpl::positions(params, ranks);
    const WallFacerLayout L(params.sequence_parallel, team_of(params));
    std::vector<int> local(size_t(L.S));
    for (int x = 0; x < L.S; ++x)
      local[size_t(x)] = L.p2p_intra_position(x);
    return replicate_positions(params, ranks, local);
  }

  std::vector<FlowSet> flow_sets(const Plan& plan) const override {
    const WallFacerLayout L(plan.params.sequence_parallel, team_of(plan.params));
    const int D = plan.params.data_parallel;
    std::vector<std::pair<int32_t, int32_t>> place, shift, back;
    for (int d = 0; d < D; ++d)
      for (int x = 0; x < L.S; ++x) {
        const int base = d * L.S;
        if (L.target(x) != x) place.emplace_back(base + x, base + L.target(x));
        if (L.source(x) != x) back.emplace_back(base + x, base + L.source(x));
        if (L.G > 1) shift.emplace_back(base + x, base + L.next(x));
      }
    std::vector<FlowSet> sets;
    if (L.C > 1) sets.push_back(make_flow_set("kv-placement", place));
    if (L.G > 1) {
      sets.push_back(make_flow_set("kv-subring", shift));
      sets.push_back(make_flow_set("bundle-subring", shift));
      sets.push_back(make_flow_set("dq-subring", shift));
    }
    if (L.C > 1) sets.push_back(make_flow_set("dkv-return", back));
    return sets;
  }

  RankProgram build_rank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode) const override {
    return WallFacerRank(plan, rank, pool, mode).build();
  }
};

}  // namespace

std::unique_ptr<StrategyImpl> make_wallfacer_impl() {
  return std::make_unique<WallFacerImpl>();
}

}  // namespace wallfacer::detail
