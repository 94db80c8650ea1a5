// Hand-built plans and schedules for the executor tests, written without the planner's strategy
// builders so that the executor is tested on its own: a pass-KV ring, an all-gather of K,V with
// a reduce-scatter of dK,dV and a WeightGrad all-reduce, a Ulysses all-to-all, and a key-split
// scheme whose partial outputs meet in an LseMerge reduce-scatter.
#pragma once

#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::testing {

struct HandCase {
  std::string name;
  Plan plan;
  Schedule schedule;
};

Workload tiny_workload(int64_t seq, int heads, int kv_heads, int head_dim, int batch, bool causal);

// Tokens [begin, end) of part `index` of `parts` near-equal contiguous parts.
TokenSet contiguous_part(int64_t seq, int parts, int index);

HandCase hand_ring(int ranks, const Workload& workload);
HandCase hand_gather(int ranks, const Workload& workload);
HandCase hand_ulysses(int ranks, const Workload& workload);
HandCase hand_key_split(int ranks, const Workload& workload);

// A plan over `ranks` ranks with groups "world" (index 0) and "ring" (index 1), no topology.
Plan bare_plan(int ranks, const Workload& workload);

// Appends ops to one rank's program with explicit dependencies.
class HandBuilder {
 public:
  HandBuilder(Schedule& schedule, int rank, int batch);
  int32_t buffer(const std::string& name, FieldMask fields, HeadRange heads, int64_t capacity);
  void input(int32_t buf, Field field, const TokenSet& tokens, HeadRange heads);
  void output(int32_t buf, Field field, const TokenSet& tokens, HeadRange heads);
  int32_t fwd(int32_t q, int32_t kv, int32_t acc, const TokenSet& qt, const TokenSet& kt, HeadRange heads, Mask mask,
              std::vector<int32_t> deps = {});
  int32_t bwd(int32_t q, int32_t kv, int32_t dq, int32_t dkv, const TokenSet& qt, const TokenSet& kt, HeadRange heads,
              Mask mask, std::vector<int32_t> deps = {});
  int32_t prep(int32_t buf, const TokenSet& tokens, HeadRange heads, std::vector<int32_t> deps = {});
  int32_t copy(int32_t src, int32_t dst, const TokenSet& tokens, FieldMask fields, HeadRange heads,
               std::vector<int32_t> deps = {});
  int32_t send(int32_t buf, const TokenSet& tokens, FieldMask fields, HeadRange heads, int peer, int tag,
               std::vector<int32_t> deps = {});
  int32_t recv(int32_t buf, const TokenSet& tokens, FieldMask fields, HeadRange heads, int peer, int tag,
               std::vector<int32_t> deps = {});
  int32_t collective(OpKind kind, int group, int32_t in, int32_t out, FieldMask fields, Reduction reduction,
                     const std::vector<TokenSet>& in_tokens, const std::vector<TokenSet>& out_tokens,
                     const std::vector<HeadRange>& in_heads, const std::vector<HeadRange>& out_heads,
                     std::vector<int32_t> deps = {});
  int32_t all_reduce(int group, int32_t buf, FieldMask fields, int64_t elements, std::vector<int32_t> deps = {});
  RankProgram& program() { return program_; }
  RankProgram finish() { return std::move(program_); }

 private:
  Schedule& schedule_;
  RankProgram program_;
};

}  // namespace wallfacer::testing
