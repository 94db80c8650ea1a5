// STATUS: ready to use (API stable; implementation in common.cpp).
//
// The toolkit every strategy builds its schedule with: data-parallel replicas, canonical group
// lists, token layouts (contiguous, zigzag, zigzag-2D), head splits, the tag scheme, collective
// byte counts, and ProgramBuilder, which appends ops to one rank's program and derives their
// dependencies from the buffers they touch. (The pass-KV ring engine behind ring, zigzag,
// Ulysses, USP and double ring is in context_parallel.hpp.)
//
// Data parallelism. P = S * D ranks; logical rank r = d * S + s (replica d, sequence rank s).
// Replica d works on batch rows [d * B / D, (d + 1) * B / D) and runs the strategy over its S
// ranks exactly as a single replica would. A strategy describes ONE replica (local ranks
// 0..S-1); replicate_groups()/replicate_positions() lift that to all P ranks. Canonical group
// order: replica 0's groups, replica 1's groups, ..., then "world" (kind World, every rank) when
// P > 1. Group names get a "d<replica>." prefix when D > 1.
//
// Dependencies. ProgramBuilder tracks, per (buffer, field), the last op that wrote it and the
// ops that read it since, and adds the dependencies that make every op safe:
//   read after write, write after read (a Recv into a double buffer waits for the computes and
//   sends still reading the old contents) and write after write.
// Dependencies on earlier ops of the same stream are dropped (program order implies them), and
// only the latest op per stream is kept, so dependency lists stay short. What each op kind reads
// and writes:
//   AttnFwd  reads [0] Q, [1] K|V; updates [2] O|Lse       AttnBwd reads [0] Q|dO|Lse|D, [1] K|V;
//   BwdPrep  reads [0] O|dO; writes [0] D                           updates [2] dQ, [3] dK|dV
//   Copy     reads [0] fields; writes [1] fields           Send reads [0]; Recv writes [0]
//   AllGather/ReduceScatter/AllToAll read [0], write [1]    AllReduce updates [0]
// Extra explicit dependencies can be passed to every add function.
//
// Buffer rows (see docs/schedule.md): an overwriting op (input binding, Recv, Copy target,
// collective output) sets the buffer's token list to the op's tokens; an accumulator (fp32
// O|Lse, dQ, dK|dV) that was never overwritten starts at zero (Lse = -inf) and mirrors the rows
// of its partner buffer ([0] for AttnFwd [2] and AttnBwd [2], [1] for AttnBwd [3]).
//
// Attention blocks. attn_fwd()/attn_bwd() take the query and key token sets of one step and
// emit as few blocks as possible that compute every live (query, key) pair exactly once:
// query ranges with the same set of live key ranges share a block; fully dead range pairs are
// never part of a block; a block is Mask::None when all its keys lie at or below all its
// queries, Mask::Causal otherwise (always Mask::None for a full mask). FLOPs are exact
// (block_flops with the rank's own batch count). The context strategies (the pass-KV ring engine)
// compute a rank's own tokens against themselves as one causal block whatever its ranges
// (set_diagonal_as_one_block): the zigzag ring's implementations run one causal kernel over the
// rank's two local chunks there, whose dead quarter the kernel skips, and every rank then has the
// same blocks (the middle rank's two chunks are adjacent, one range).
//
// Tags. make_tag(channel, step) keeps (src, dst, tag) unique as long as each channel is used
// for one logical message stream per peer pair and steps stay below 65536.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/per_stream.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer::detail {

// ---- numbers ---------------------------------------------------------------------------------
std::vector<int> divisors(int n);  // ascending
int64_t gcd64(int64_t a, int64_t b);

// ---- data-parallel replicas ------------------------------------------------------------------
struct Replica {
  int index = 0;  // d
  int count = 1;  // D
  int size = 1;   // S, ranks per replica
  int local = 0;  // s, this rank's index inside its replica
  int batch_begin = 0, batch_end = 1;
  int global(int local_rank) const { return index * size + local_rank; }
  int batch() const { return batch_end - batch_begin; }
};
// Replica of logical rank `rank` (S = params.sequence_parallel, D = params.data_parallel).
Replica replica_of(const StrategyParams& params, int rank, int batch);

// Generic rules every strategy shares: S, D >= 1, S * D == ranks, batch % D == 0, seq >= S,
// sane workload dimensions. Returns the first violation.
Feasibility generic_feasibility(const StrategyParams& params, const Workload& workload, int ranks);
// Ulysses head rules for degree u: u <= h, h % u == 0, and h_kv % u == 0 or u % h_kv == 0.
Feasibility ulysses_heads_feasibility(const Workload& workload, int u);
// Candidate data-parallel degrees: every divisor of gcd(ranks, batch).
std::vector<int> data_parallel_splits(const Workload& workload, int ranks);

// All replicas' copies of one replica's groups (local ranks 0..S-1), in canonical order, plus
// the "world" group when ranks > 1.
std::vector<CommGroup> replicate_groups(const StrategyParams& params, int ranks,
                                        const std::vector<CommGroup>& replica_groups);
std::string replica_group_name(const StrategyParams& params, int replica, const std::string& name);
// Index in the canonical list of group k of replica d, for a replica with `per_replica` groups.
inline int replica_group_index(int per_replica, int replica, int k) {
  return replica * per_replica + k;
}
// Index of the "world" group (-1 when there is a single rank).
int world_group_index(const StrategyParams& params, int ranks, int per_replica);
// Lifts a per-replica placement (size S, a permutation of 0..S-1) to all P ranks.
std::vector<int> replicate_positions(const StrategyParams& params, int ranks,
                                     const std::vector<int>& replica_positions);
// Throws InputError unless plan.groups equals `expected` (names, kinds and members in order).
void validate_groups(const Plan& plan, const std::vector<CommGroup>& expected);
// Throws InputError unless the plan's rank count and params pass check_feasible's rules.
void validate_feasible(const Plan& plan, const Feasibility& feasibility);

// ---- token layouts ---------------------------------------------------------------------------
// Contiguous: part i gets [begin_i, end_i); the first seq % parts parts are one token longer.
TokenRange contiguous_range(int64_t seq, int parts, int index);
TokenSet contiguous_shard(int64_t seq, int parts, int index);
// Zigzag: 2 * parts equal chunks; part i holds chunks i and 2 * parts - 1 - i. seq % (2 * parts) == 0.
TokenSet zigzag_shard(int64_t seq, int parts, int index);
// Zigzag-2D (USP, docs/algorithms.md §6): 2 * ring chunks; ring member rho takes chunks rho and
// 2 * ring - 1 - rho, each cut into `ulysses` pieces; rank rho * ulysses + upsilon holds piece
// upsilon of both. seq % (2 * ulysses * ring) == 0.
TokenSet zigzag2d_shard(int64_t seq, int ulysses, int ring, int index);
// Merges adjacent ranges and drops empty ones; keeps row order.
TokenSet canonical(TokenSet set);
// Whether canonical(set) == set (schedule.hpp's).
using wallfacer::is_canonical;
// a followed by b (rows of a first).
TokenSet concat(const TokenSet& a, const TokenSet& b);
// Tokens of a that are also in b, in a's row order.
TokenSet intersect(const TokenSet& a, const TokenSet& b);

// ---- heads -----------------------------------------------------------------------------------
// Part `index` of `parts` equal head ranges (heads % parts == 0).
HeadRange split_heads(int heads, int parts, int index);
// KV heads Ulysses member j of u needs: its share when kv_heads % u == 0, otherwise (u % kv_heads
// == 0, replication) the single kv head of its query heads.
HeadRange ulysses_kv_heads(int heads, int kv_heads, int u, int j);
HeadRange intersect(HeadRange a, HeadRange b);

// ---- tags and flow sets ----------------------------------------------------------------------
constexpr int kTagStepLimit = 1 << 16;
int32_t make_tag(int channel, int step);
// A flow set with one flow per (src, dst) pair, in the order given.
FlowSet make_flow_set(std::string name, std::vector<std::pair<int32_t, int32_t>> flows);

// ---- collectives -----------------------------------------------------------------------------
// Bytes member `member` sends under the semantics of CollectiveSpec (schedule.hpp): the sum over
// other members j of the payload i -> j. Equals (p-1)/p * M for equal shards, the ring
// algorithms' volume. AllReduce: 2 (p-1)/p * elements * 4 (fp32 weight gradients).
int64_t collective_send_bytes(const ScheduleDims& dims, const CollectiveSpec& spec, int member, int group_size,
                              const TokenSetPool& pool, int batch, bool fp32);

// ---- ProgramBuilder --------------------------------------------------------------------------
// Builds one rank's program. Every add function returns the op index (or indices). Under
// BuildMode::ComputeOnly the ops get no dependencies and sends and receives are only counted
// (RankProgram::transfers_left_out): the indices returned are those of the Full program, and
// strategies build both alike.
class ProgramBuilder {
 public:
  ProgramBuilder(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode = BuildMode::Full);

  const Plan& plan() const { return plan_; }
  const Replica& replica() const { return replica_; }
  int rank() const { return program_.rank; }
  // Dims with batch = this rank's batch count (what FLOPs and bytes use).
  const ScheduleDims& local_dims() const { return dims_; }
  TokenSetPool& pool() { return pool_; }
  int32_t intern(const TokenSet& set) { return pool_.intern(set); }

  // Phase stamped on the ops added from now on (Forward at the start).
  void set_phase(Phase phase) { phase_ = phase; }
  Phase phase() const { return phase_; }
  // A query set against the same key set as one causal block (see the header comment).
  void set_diagonal_as_one_block(bool on) { diagonal_as_one_block_ = on; }

  int32_t buffer(const std::string& name, FieldMask fields, HeadRange heads, int64_t capacity_tokens,
                 bool fp32 = false);
  const BufferDecl& decl(int32_t buf) const { return program_.buffers[size_t(buf)]; }
  void input(int32_t buf, Field field, const TokenSet& tokens, HeadRange heads);
  void output(int32_t buf, Field field, const TokenSet& tokens, HeadRange heads);

  // Attention blocks of one step (see the header comment). Returns the ops added (maybe none).
  std::vector<int32_t> attn_fwd(int32_t q_buf, int32_t kv_buf, int32_t acc_buf, const TokenSet& q, const TokenSet& k,
                                HeadRange heads, int step, const std::vector<int32_t>& deps = {});
  std::vector<int32_t> attn_bwd(int32_t q_buf, int32_t kv_buf, int32_t dq_buf, int32_t dkv_buf, const TokenSet& q,
                                const TokenSet& k, HeadRange heads, int step, const std::vector<int32_t>& deps = {});
  // D = rowsum(dO * O) on `buf` (fields O, dO, D) for `tokens`, heads of the buffer.
  int32_t bwd_prep(int32_t buf, const TokenSet& tokens, int step = -1, const std::vector<int32_t>& deps = {});
  int32_t copy(int32_t src, int32_t dst, const TokenSet& tokens, FieldMask fields, int step = -1,
               const std::vector<int32_t>& deps = {});
  // Point-to-point: the whole head range of the buffer; bytes from the buffer's precision.
  int32_t send(int32_t buf, const TokenSet& tokens, FieldMask fields, int peer, int32_t tag, int32_t flow_set, int step,
               const std::vector<int32_t>& deps = {});
  int32_t recv(int32_t buf, const TokenSet& tokens, FieldMask fields, int peer, int32_t tag, int32_t flow_set, int step,
               const std::vector<int32_t>& deps = {});

  // A collective over plan group `group` (AllGather, ReduceScatter or AllToAll): per-member
  // token lists and head ranges in group order. This rank's member index is looked up in the
  // group. Bytes follow collective_send_bytes with the input buffer's precision.
  struct CollectiveArgs {
    OpKind kind = OpKind::AllToAll;
    int32_t group = -1;
    int32_t in_buf = -1, out_buf = -1;
    FieldMask fields = 0;
    Reduction reduction = Reduction::Sum;
    std::vector<TokenSet> in_tokens, out_tokens;
    std::vector<HeadRange> in_heads, out_heads;
    int step = -1;
    // Alternatives for large groups: token lists already interned (used when non-empty instead
    // of in_tokens/out_tokens), and the bytes this member sends when the caller knows them
    // (skips the O(group) intersection count).
    std::vector<int32_t> in_token_ids, out_token_ids;
    int64_t bytes = -1;
  };
  int32_t collective(const CollectiveArgs& args, const std::vector<int32_t>& deps = {});
  // AllReduce of `elements` values held in `buf` over plan group `group`.
  int32_t all_reduce(int32_t group, int32_t buf, FieldMask fields, int64_t elements,
                     const std::vector<int32_t>& deps = {});

  // The last op of each stream so far (-1 when none).
  int32_t last_op(Stream stream) const { return last_of_stream_[size_t(stream)]; }
  const RankProgram& program() const { return program_; }
  // Capacity hint for the op list: `ops` in all, of which `transfers` sends and receives
  // (building stays correct without it).
  void reserve_ops(size_t ops, size_t transfers) {
    if (mode_ == BuildMode::ComputeOnly) {
      program_.ops.reserve(ops - std::min(ops, transfers));
      return;
    }
    program_.ops.reserve(ops);
    program_.deps.reserve(ops * 2);
  }
  RankProgram finish() { return std::move(program_); }

 private:
  int32_t transfer(OpKind kind, int32_t buf, const TokenSet& tokens, FieldMask fields, int peer, int32_t tag,
                   int32_t flow_set, int step, const std::vector<int32_t>& deps);
  struct Access {
    int32_t buf;
    FieldMask fields;
    bool write;
  };
  int32_t append(Op op, std::initializer_list<Access> accesses, const std::vector<int32_t>& extra);
  int32_t add_block(OpKind kind, const int32_t (&bufs)[4], const TokenSet& q, const TokenSet& k, Mask mask,
                    HeadRange heads, int step, const std::vector<int32_t>& deps);
  std::vector<int32_t> add_blocks(OpKind kind, const int32_t (&bufs)[4], const TokenSet& q, const TokenSet& k,
                                  HeadRange heads, int step, const std::vector<int32_t>& deps);
  std::vector<int32_t> add_grouped_blocks(OpKind kind, const int32_t (&bufs)[4], const TokenSet& q, const TokenSet& k,
                                          HeadRange heads, int step, const std::vector<int32_t>& deps);
  int member_of(int32_t group) const;

  // Per (buffer, field): last writer and latest reader per stream since that write.
  struct FieldState {
    int32_t writer = -1;
    uint8_t writer_stream = 0;                    // the writer's stream (read as a dependency's stream)
    OpPerStream readers = no_op_on_any_stream();  // by stream: readers[s] runs on stream s
  };
  const Plan& plan_;
  TokenSetPool& pool_;
  Replica replica_;
  ScheduleDims dims_;
  BuildMode mode_ = BuildMode::Full;
  Phase phase_ = Phase::Forward;
  bool diagonal_as_one_block_ = false;
  RankProgram program_;
  std::vector<std::vector<FieldState>> state_;  // [buffer][field]
  OpPerStream last_of_stream_ = no_op_on_any_stream();
  std::vector<int32_t> scratch_deps_;
  // add_blocks' groups of query ranges, kept between calls: by group, its live key ranges (a bit
  // each), its query ranges, whether no key is above its first query, and the keys of one group.
  std::vector<uint64_t> scratch_live_;
  std::vector<TokenSet> scratch_queries_;
  std::vector<char> scratch_full_;
  TokenSet scratch_keys_;
};

// Schedule dims of a workload (batch = the whole batch).
ScheduleDims dims_of(const Workload& workload);

// The weight-gradient all-reduce that closes every backward pass: an AllReduce of
// Field::WeightGrad, attention_parameters_per_layer() elements, over the "world" group, after
// the last op of every stream. No-op when world_group < 0 (a single rank).
void add_weight_grad_allreduce(ProgramBuilder& builder, int32_t world_group);

}  // namespace wallfacer::detail
