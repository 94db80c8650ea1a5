// Pass-KV context rings (docs/algorithms.md §3, §7): token layouts, groups, flow sets and the forward
// and backward loops shared by ring, zigzag, USP, double-ring and Ulysses; and the Ring/Zigzag
// strategies themselves.
//
// Context member x = K * w + o sits in window K at offset o. At outer step j, inner step i it
// holds the K,V of member ((K - j) mod c/w) * w + (o - i) mod w, so every member sees every block
// once. K,V move to the window successor between inner steps; the block held at the start of an
// outer step moves to the same offset of the next window, posted before the inner ring so it
// overlaps the step's first compute. Backward, each block's fp32 dK,dV accumulator follows the
// path of its K,V one step behind: to the window successor inside a window, to the next window's
// next offset between outer steps, and home after c hops.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include <wallfacer/core/errors.hpp>
#include "strategies/common.hpp"
#include "strategies/context_parallel.hpp"
#include "strategies/strategy_impl.hpp"

namespace wallfacer::detail {

namespace {

// Tag channels (make_tag): one per message stream between a pair of ranks.
enum Channel { kForwardKv = 1, kBackwardKv = 2, kBackwardDkv = 3 };
constexpr int kInterChannelOffset = 8;  // inter-window K,V hops use channel + 8
// Flow-set indices of the context strategies (see context_flow_sets); a flat ring has only the
// first two.
enum FlowIndex { kFlowKvIntra = 0, kFlowDkvIntra = 1, kFlowKvInter = 2, kFlowDkvInter = 3 };

const FieldMask kKV = field_bit(Field::K) | field_bit(Field::V);
const FieldMask kDKV = field_bit(Field::dK) | field_bit(Field::dV);

int mod(int a, int m) {
  return ((a % m) + m) % m;
}

// Window geometry of one context ring.
struct Windows {
  int c, w, nw;
  int window(int x) const { return x / w; }
  int offset(int x) const { return x % w; }
  int at(int k, int o) const { return mod(k, nw) * w + mod(o, w); }
  int intra_next(int x) const { return at(window(x), offset(x) + 1); }
  int intra_prev(int x) const { return at(window(x), offset(x) - 1); }
  int inter_next(int x) const { return at(window(x) + 1, offset(x)); }
  int inter_prev(int x) const { return at(window(x) - 1, offset(x)); }
  int diag_next(int x) const { return at(window(x) + 1, offset(x) + 1); }
  int diag_prev(int x) const { return at(window(x) - 1, offset(x) - 1); }
  // Whose K,V member x holds at outer step j, inner step i.
  int holder(int x, int j, int i) const { return at(window(x) - j, offset(x) - i); }
};

Windows windows_of(const ContextConfig& cfg) {
  return Windows{cfg.c, cfg.w, cfg.c / cfg.w};
}

// Cycles of the backward inter-window map x -> diag_next(x), smallest member first.
std::vector<std::vector<int>> diagonal_cycles(const Windows& win) {
  std::vector<std::vector<int>> cycles;
  std::vector<bool> seen(size_t(win.c), false);
  for (int start = 0; start < win.c; ++start) {
    if (seen[size_t(start)]) continue;
    std::vector<int> cycle;
    for (int x = start; !seen[size_t(x)]; x = win.diag_next(x)) {
      seen[size_t(x)] = true;
      cycle.push_back(x);
    }
    cycles.push_back(std::move(cycle));
  }
  return cycles;
}

int context_groups_per_member(const ContextConfig& cfg) {
  const Windows win = windows_of(cfg);
  if (win.nw == 1) return cfg.ring_groups ? 1 : 0;
  // x -> diag_next(x) advances window and offset by one each: every cycle has lcm(nw, w) members.
  return win.nw + win.w + win.c / std::lcm(win.nw, win.w);
}

// Global rank of context member x with Ulysses index v in this builder's replica.
int member_rank(const ProgramBuilder& b, const ContextConfig& cfg, int x, int v) {
  return b.replica().global(x * cfg.u + v);
}

void declare_receive_buffers(ProgramBuilder& b, const ContextConfig& cfg, ContextRank& r) {
  const Windows win = windows_of(cfg);
  for (int i = 0; i < 2; ++i) {
    if (win.nw > 1 && r.outer[i] < 0)
      r.outer[i] = b.buffer(fmt::format("kv.outer.{}", i), kKV, r.kv_heads, r.kv_capacity);
    if (win.w > 1 && r.inner[i] < 0)
      r.inner[i] = b.buffer(fmt::format("kv.inner.{}", i), kKV, r.kv_heads, r.kv_capacity);
  }
}

// The tokens of each context member's K,V block, made once per loop: a loop asks for a member's
// block when it receives it, computes on it, sends it on and (backward) receives its accumulator.
class MemberTokens {
 public:
  MemberTokens(const ContextConfig& cfg, int64_t seq) : cfg_(cfg), seq_(seq), sets_(size_t(cfg.c)) {}
  const TokenSet& operator()(int x) {
    TokenSet& set = sets_[size_t(x)];
    if (set.empty()) set = context_tokens(cfg_, seq_, x);
    return set;
  }

 private:
  const ContextConfig& cfg_;
  int64_t seq_;
  std::vector<TokenSet> sets_;  // empty until asked (a member's block is never empty)
};

// Visits every (outer, inner) step, moving K,V; `compute(step, buffer, tokens)` adds the work.
template <typename Compute>
void kv_loop(ProgramBuilder& b, const ContextConfig& cfg, ContextRank& r, int channel, MemberTokens& block_of,
             Compute&& compute) {
  declare_receive_buffers(b, cfg, r);
  const Windows win = windows_of(cfg);
  int step = 0;
  for (int j = 0; j < win.nw; ++j) {
    const int32_t block = j == 0 ? r.kv : r.outer[(j - 1) % 2];
    if (j + 1 < win.nw) {
      // Posted first on every rank: the exchange is a permutation, so it never waits on the
      // inner ring, and it overlaps the first inner step's compute.
      const int32_t tag = make_tag(channel + kInterChannelOffset, j);
      b.send(block, block_of(win.holder(r.x, j, 0)), kKV, member_rank(b, cfg, win.inter_next(r.x), r.v), tag,
             kFlowKvInter, step);
      b.recv(r.outer[j % 2], block_of(win.holder(r.x, j + 1, 0)), kKV, member_rank(b, cfg, win.inter_prev(r.x), r.v),
             tag, kFlowKvInter, step);
    }
    for (int i = 0; i < win.w; ++i, ++step) {
      const int32_t current = i == 0 ? block : r.inner[(i - 1) % 2];
      const TokenSet& tokens = block_of(win.holder(r.x, j, i));
      if (i + 1 < win.w) {
        const int32_t tag = make_tag(channel, step);
        b.send(current, tokens, kKV, member_rank(b, cfg, win.intra_next(r.x), r.v), tag, kFlowKvIntra, step);
        b.recv(r.inner[i % 2], block_of(win.holder(r.x, j, i + 1)), kKV, member_rank(b, cfg, win.intra_prev(r.x), r.v),
               tag, kFlowKvIntra, step);
      }
      compute(step, j, i, current, tokens);
    }
  }
}

}  // namespace

// ---- layouts and groups ----------------------------------------------------------------------

TokenSet sequence_shard(const ContextConfig& cfg, int64_t seq, int s) {
  if (cfg.zigzag) return zigzag2d_shard(seq, cfg.u, cfg.c, s);
  return contiguous_shard(seq, cfg.u * cfg.c, s);
}

TokenSet context_tokens(const ContextConfig& cfg, int64_t seq, int x) {
  if (cfg.zigzag) return zigzag_shard(seq, cfg.c, x);
  const int S = cfg.u * cfg.c;
  return {{contiguous_range(seq, S, x * cfg.u).begin, contiguous_range(seq, S, x * cfg.u + cfg.u - 1).end}};
}

Feasibility context_feasibility(const ContextConfig& cfg, const Workload& workload) {
  if (cfg.u < 1 || cfg.c < 1 || cfg.w < 1)
    return {false, fmt::format("Ulysses degree {}, context size {} and window {} must be >= 1", cfg.u, cfg.c, cfg.w)};
  if (cfg.c % cfg.w != 0)
    return {false, fmt::format("context ring of {} ranks not divisible into windows of {}", cfg.c, cfg.w)};
  if (cfg.u > 1) {
    Feasibility heads = ulysses_heads_feasibility(workload, cfg.u);
    if (!heads.ok) return heads;
  }
  const int64_t zig = int64_t(2) * cfg.u * cfg.c;
  if (cfg.zigzag && workload.seq % zig != 0)
    return {false, fmt::format("sequence length {} not divisible by 2 x {} ranks = {} (zigzag layout)", workload.seq,
                               cfg.u * cfg.c, zig)};
  return {};
}

int context_groups_per_replica(const ContextConfig& cfg) {
  return (cfg.u > 1 ? cfg.c : 0) + cfg.u * context_groups_per_member(cfg);
}

int ulysses_group_local_index(const ContextConfig& cfg, int x) {
  return x;
}

std::vector<CommGroup> context_replica_groups(const ContextConfig& cfg) {
  const Windows win = windows_of(cfg);
  const int u = cfg.u;
  std::vector<CommGroup> groups;
  if (u > 1) {
    for (int x = 0; x < cfg.c; ++x) {
      CommGroup g{cfg.c == 1 ? "a2a" : fmt::format("a2a{}", x), GroupKind::AllToAll, {}};
      for (int v = 0; v < u; ++v)
        g.ranks.push_back(x * u + v);
      groups.push_back(std::move(g));
    }
  }
  for (int v = 0; v < u; ++v) {
    auto members = [&](const std::vector<int>& xs) {
      std::vector<int> ranks;
      for (int x : xs)
        ranks.push_back(x * u + v);
      return ranks;
    };
    if (win.nw == 1) {
      if (!cfg.ring_groups) continue;
      std::vector<int> xs(size_t(cfg.c));
      for (int x = 0; x < cfg.c; ++x)
        xs[size_t(x)] = x;
      groups.push_back({u > 1 ? fmt::format("{}{}", cfg.ring_name, v) : cfg.ring_name, GroupKind::Ring, members(xs)});
      continue;
    }
    const std::string prefix = u > 1 ? fmt::format("h{}.", v) : "";
    for (int k = 0; k < win.nw; ++k) {
      std::vector<int> xs;
      for (int o = 0; o < win.w; ++o)
        xs.push_back(win.at(k, o));
      groups.push_back({fmt::format("{}win{}", prefix, k), GroupKind::Window, members(xs)});
    }
    for (int o = 0; o < win.w; ++o) {
      std::vector<int> xs;
      for (int k = 0; k < win.nw; ++k)
        xs.push_back(win.at(k, o));
      groups.push_back({fmt::format("{}inter{}", prefix, o), GroupKind::InterWindow, members(xs)});
    }
    const auto cycles = diagonal_cycles(win);
    for (size_t i = 0; i < cycles.size(); ++i)
      groups.push_back({fmt::format("{}dkv-inter{}", prefix, i), GroupKind::InterWindow, members(cycles[i])});
  }
  return groups;
}

std::vector<CommGroup> context_groups(const ContextConfig& cfg, const StrategyParams& params, int ranks) {
  return replicate_groups(params, ranks, context_replica_groups(cfg));
}

std::vector<int> context_positions(const ContextConfig& cfg, const StrategyParams& params, int ranks,
                                   bool context_first) {
  std::vector<int> local(size_t(cfg.u * cfg.c));
  for (int x = 0; x < cfg.c; ++x)
    for (int v = 0; v < cfg.u; ++v)
      local[size_t(x * cfg.u + v)] = context_first ? v * cfg.c + x : x * cfg.u + v;
  return replicate_positions(params, ranks, local);
}

std::vector<FlowSet> context_flow_sets(const ContextConfig& cfg, const Plan& plan) {
  if (cfg.c == 1) return {};
  const Windows win = windows_of(cfg);
  const int S = cfg.u * cfg.c, D = std::max(1, plan.params.data_parallel);
  std::vector<std::pair<int32_t, int32_t>> intra, inter, diagonal;
  for (int d = 0; d < D; ++d)
    for (int v = 0; v < cfg.u; ++v)
      for (int x = 0; x < cfg.c; ++x) {
        const int src = d * S + x * cfg.u + v;
        if (win.w > 1) intra.emplace_back(src, d * S + win.intra_next(x) * cfg.u + v);
        if (win.nw > 1) {
          inter.emplace_back(src, d * S + win.inter_next(x) * cfg.u + v);
          diagonal.emplace_back(src, d * S + win.diag_next(x) * cfg.u + v);
        }
      }
  if (win.nw == 1) return {make_flow_set(cfg.kv_flow, intra), make_flow_set(cfg.dkv_flow, intra)};
  return {make_flow_set("kv-intra", intra), make_flow_set("dkv-intra", intra), make_flow_set("kv-inter", inter),
          make_flow_set("dkv-inter", diagonal)};
}

// ---- the loops ---------------------------------------------------------------------------------

void context_forward(ProgramBuilder& b, const ContextConfig& cfg, ContextRank& r) {
  MemberTokens block_of(cfg, b.plan().workload.seq);
  const TokenSet& own = block_of(r.x);
  kv_loop(b, cfg, r, kForwardKv, block_of, [&](int step, int, int, int32_t kv, const TokenSet& keys) {
    b.attn_fwd(r.q, kv, r.acc, own, keys, r.q_heads, step);
  });
}

int32_t context_backward(ProgramBuilder& b, const ContextConfig& cfg, ContextRank& r) {
  const Windows win = windows_of(cfg);
  MemberTokens block_of(cfg, b.plan().workload.seq);
  const TokenSet& own = block_of(r.x);
  // Two accumulators alternate along the ring (one receives while the other is computed on);
  // without a ring one suffices.
  int32_t dkv[2] = {-1, -1};
  for (int i = 0; i < (cfg.c > 1 ? 2 : 1); ++i)
    dkv[i] = b.buffer(fmt::format("dkv.{}", i), kDKV, r.kv_heads, r.kv_capacity, true);
  kv_loop(b, cfg, r, kBackwardKv, block_of, [&](int step, int j, int i, int32_t kv, const TokenSet& keys) {
    const int32_t acc = dkv[step % 2];
    b.attn_bwd(r.q, kv, r.dq, acc, own, keys, r.q_heads, step);
    if (cfg.c == 1) return;
    // The accumulator goes where this block is computed next; after c hops it is home.
    const bool leaves_window = i + 1 == win.w;
    const int dst = leaves_window ? win.diag_next(r.x) : win.intra_next(r.x);
    const int src = leaves_window ? win.diag_prev(r.x) : win.intra_prev(r.x);
    const int flow = leaves_window && win.nw > 1 ? kFlowDkvInter : kFlowDkvIntra;
    const bool last = step + 1 == cfg.c;
    const TokenSet& next = last ? own : block_of(leaves_window ? win.holder(r.x, j + 1, 0) : win.holder(r.x, j, i + 1));
    const int32_t tag = make_tag(kBackwardDkv, step);
    b.send(acc, keys, kDKV, member_rank(b, cfg, dst, r.v), tag, flow, step);
    b.recv(dkv[(step + 1) % 2], next, kDKV, member_rank(b, cfg, src, r.v), tag, flow, step);
  });
  return cfg.c == 1 ? dkv[0] : dkv[cfg.c % 2];
}

// ---- Ring and Zigzag ---------------------------------------------------------------------------

ContextConfig ring_config(const StrategyParams& params, bool zigzag) {
  ContextConfig cfg;
  cfg.u = 1;
  cfg.c = cfg.w = std::max(1, params.sequence_parallel);
  cfg.zigzag = zigzag;
  return cfg;
}

namespace {

class RingImpl final : public StrategyImpl {
 public:
  explicit RingImpl(bool zigzag) : StrategyImpl(zigzag ? StrategyKind::Zigzag : StrategyKind::Ring), zigzag_(zigzag) {}

  Feasibility own_feasibility(const StrategyParams& params, const Workload& workload, int) const override {
    return context_feasibility(ring_config(params, zigzag_), workload);
  }
  std::vector<CommGroup> groups(const StrategyParams& params, int ranks) const override {
    return context_groups(ring_config(params, zigzag_), params, ranks);
  }
  std::vector<FlowSet> flow_sets(const Plan& plan) const override {
    return context_flow_sets(ring_config(plan.params, zigzag_), plan);
  }
  RankProgram build_rank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode) const override {
    return build_context_rank(ring_config(plan.params, zigzag_), plan, rank, pool, mode);
  }

 private:
  bool zigzag_;
};

}  // namespace

std::unique_ptr<StrategyImpl> make_ring_impl(bool zigzag) {
  return std::make_unique<RingImpl>(zigzag);
}

}  // namespace wallfacer::detail
