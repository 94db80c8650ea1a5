// One engine behind ring, zigzag, Ulysses, USP and double-ring attention. Each is a point of
// one design: a Ulysses stage of degree u (all-to-all sequence -> head) around a pass-KV context
// ring of c = S / u members cut into c / w windows of w (docs/algorithms.md §3, §4, §6, §7):
//   ring        u = 1, w = c = S, contiguous tokens
//   zigzag      u = 1, w = c = S, zigzag tokens
//   ulysses     u = S, c = 1, contiguous tokens, one block over the whole sequence
//   usp         u x r, w = c = r, zigzag-2D tokens when causal
//   double-ring u x c, windows of w, zigzag-2D tokens when causal
// Logical sequence rank s = x * u + v (context index x, Ulysses index v), so Ulysses groups are
// contiguous ("head-first"); context-first placement is a GPU permutation (positions()).
#pragma once

#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "strategies/common.hpp"

namespace wallfacer::detail {

struct ContextConfig {
  int u = 1;                       // Ulysses (head-parallel) degree
  int c = 1;                       // context ring members
  int w = 1;                       // window (inner ring) length; w == c is a flat ring
  bool zigzag = false;             // zigzag-2D token layout (else contiguous, uneven sizes allowed)
  bool ring_groups = true;         // emit context-ring groups (not for plain Ulysses)
  std::string ring_name = "ring";  // flat context-ring group name ("ring", "ring<v>" when u > 1)
  std::string kv_flow = "kv-ring", dkv_flow = "dkv-ring";  // flat-ring flow-set names
  int windows() const { return c / w; }
};

// Configuration of each of the five strategies for given params (S from params).
ContextConfig ring_config(const StrategyParams& params, bool zigzag);
ContextConfig ulysses_config(const StrategyParams& params);
ContextConfig usp_config(const StrategyParams& params, bool causal);
ContextConfig double_ring_config(const StrategyParams& params, bool causal);

// Tokens a sequence rank holds before the Ulysses stage, and the tokens context member x works on.
TokenSet sequence_shard(const ContextConfig& cfg, int64_t seq, int s);
TokenSet context_tokens(const ContextConfig& cfg, int64_t seq, int x);

// Canonical groups of one replica (Ulysses groups first), all replicas via replicate_groups.
std::vector<CommGroup> context_replica_groups(const ContextConfig& cfg);
std::vector<CommGroup> context_groups(const ContextConfig& cfg, const StrategyParams& params, int ranks);
// Context-first placement: sequence rank x * u + v runs on position v * c + x of its replica.
std::vector<int> context_positions(const ContextConfig& cfg, const StrategyParams& params, int ranks,
                                   bool context_first);
std::vector<FlowSet> context_flow_sets(const ContextConfig& cfg, const Plan& plan);
RankProgram build_context_rank(const ContextConfig& cfg, const Plan& plan, int rank, TokenSetPool& pool,
                               BuildMode mode = BuildMode::Full);
// Rules shared by the five strategies: Ulysses head rules on u, c % w == 0, zigzag divisibility.
Feasibility context_feasibility(const ContextConfig& cfg, const Workload& workload);

// ---- internals shared by ring.cpp and usp.cpp ------------------------------------------------
// Index of group kinds inside one replica's canonical list.
int context_groups_per_replica(const ContextConfig& cfg);
int ulysses_group_local_index(const ContextConfig& cfg, int x);

// What one rank's context loops work on.
struct ContextRank {
  int x = 0, v = 0;  // context index, Ulysses index
  HeadRange q_heads, kv_heads;
  int32_t q = -1, kv = -1, acc = -1, dq = -1;        // query bundle, own K|V, fp32 O|Lse, fp32 dQ
  int64_t kv_capacity = 0;                           // largest context block
  int32_t outer[2] = {-1, -1}, inner[2] = {-1, -1};  // K|V receive buffers, declared on first use
};
// Pass-KV forward over the context ring (flat or windowed), merging into rank.acc.
void context_forward(ProgramBuilder& builder, const ContextConfig& cfg, ContextRank& rank);
// Backward: K|V around again and dK|dV accumulators for c hops; returns the buffer holding this
// member's final dK|dV (fp32).
int32_t context_backward(ProgramBuilder& builder, const ContextConfig& cfg, ContextRank& rank);

}  // namespace wallfacer::detail
