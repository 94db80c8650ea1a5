// The schedule: for each rank, a program of attention-block computes, point-to-point sends and
// receives, and collectives, with their dependencies. Built deterministically from a Plan
// (strategy.hpp); read by the cost model, the simulator and every runtime backend, which never
// re-derive the algorithm. See docs/schedule.md for the semantics summarised here.
//
// Data model. Global tensors are Q, dO, O, dQ of shape [batch, seq, heads, head_dim], K, V, dK,
// dV of shape [batch, seq, kv_heads, head_dim], and lse, D of shape [batch, heads, seq]. A rank
// holds data in buffers. A buffer has a fixed head range and a set of fields; which tokens it
// holds changes over time: every op that writes a buffer says which tokens it writes (a
// TokenSet, in row order). Buffers hold rows for the rank's batch range [batch_begin, batch_end).
// Query-class fields (Q, O, Lse, dO, D, dQ) index query heads; kv-class fields (K, V, dK, dV)
// index kv heads. Query head j uses kv head j / (heads / kv_heads).
//
// Execution. Each rank runs four streams (compute, send, recv, collective). Ops of one stream
// run in program order; an op starts when it is at the head of its stream and all its explicit
// dependencies have completed. A Send completes together with its matching Recv (same peer pair
// and tag). A collective completes when every member of its group has started it. These are the
// "blocking semantics" the checker proves free of deadlock.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <wallfacer/plan/plan.hpp>

namespace wallfacer {

// WeightGrad, Weight and Activation have no token axis: flat gradient (grad_comm_dtype), parameter (dtype)
// and activation (dtype) vectors of the whole-step schedule's gradient synchronisation, ZeRO
// parameter gathers and tensor-parallel gathers and reduce-scatters.
enum class Field : uint8_t { Q, K, V, O, Lse, dO, D, dQ, dK, dV, WeightGrad, Weight, Activation };
constexpr int kNumFields = 13;
using FieldMask = uint16_t;
constexpr FieldMask field_bit(Field f) {
  return FieldMask(1u << static_cast<int>(f));
}
constexpr FieldMask field_mask(std::initializer_list<Field> fields) {
  FieldMask m = 0;
  for (Field f : fields)
    m |= field_bit(f);
  return m;
}
// Field sets that travel or live together, named once for the strategies and the executor.
namespace fieldset {
inline constexpr FieldMask kQ = field_mask({Field::Q});
inline constexpr FieldMask kKV = field_mask({Field::K, Field::V});
inline constexpr FieldMask kOLse = field_mask({Field::O, Field::Lse});
// What the backward needs of a query block besides K,V: Q, dO, Lse and D.
inline constexpr FieldMask kQueryBundle = field_mask({Field::Q, Field::dO, Field::Lse, Field::D});
// Everything a rank keeps of its own queries across both passes.
inline constexpr FieldMask kLocal = field_mask({Field::Q, Field::O, Field::Lse, Field::dO, Field::D});
inline constexpr FieldMask kDQ = field_mask({Field::dQ});
inline constexpr FieldMask kDKV = field_mask({Field::dK, Field::dV});
inline constexpr FieldMask kWeightGrad = field_mask({Field::WeightGrad});
inline constexpr FieldMask kWeight = field_mask({Field::Weight});
inline constexpr FieldMask kActivation = field_mask({Field::Activation});
}  // namespace fieldset
const char* to_string(Field f);
std::string fields_to_string(FieldMask mask);  // "K|V"
bool is_query_class(Field f);                  // Q, O, Lse, dO, D, dQ
bool is_per_row_scalar(Field f);               // Lse, D: no head_dim axis

struct TokenRange {
  int64_t begin = 0, end = 0;  // global token positions [begin, end)
  int64_t size() const { return end - begin; }
  bool operator==(const TokenRange&) const = default;
};
// An ordered list of disjoint ranges; local row i is the i-th token in this order.
using TokenSet = std::vector<TokenRange>;
int64_t token_count(const TokenSet& set);
// Whether the list has no empty range and no two adjacent ones (the form TokenSetPool interns).
bool is_canonical(const TokenSet& set);

struct HeadRange {
  int32_t begin = 0, end = 0;  // [begin, end)
  int32_t size() const { return end - begin; }
  bool operator==(const HeadRange&) const = default;
};

// Interned token sets shared by all ranks of one schedule (ops store small ids).
class TokenSetPool {
 public:
  int32_t intern(const TokenSet& set);
  const TokenSet& get(int32_t id) const { return sets_[size_t(id)]; }
  size_t size() const { return sets_.size(); }

 private:
  // An open-addressed table of set ids by the hash of their canonical range list: a schedule
  // interns a set per op it builds (millions for a large step search), and a lookup here is one
  // probe of a flat array, where a map of byte-string keys hashed the bytes and chased a node.
  void grow();
  std::vector<TokenSet> sets_;
  std::vector<uint64_t> hashes_;  // by id
  std::vector<int32_t> slots_;    // ids, -1 empty; the size is a power of two
};

enum class OpKind : uint8_t {
  AttnFwd,        // block forward, merged (online softmax) into an O/Lse accumulator
  AttnBwd,        // block backward: adds into dQ and dK/dV accumulators
  BwdPrep,        // D = rowsum(dO * O) for tokens tok[0] of buf[0] (fields O, dO -> D)
  Copy,           // buf[0] -> buf[1], tokens tok[0], fields
  Send,           // buf[0] tokens tok[0] fields -> peer
  Recv,           // peer -> buf[0] tokens tok[0] fields (overwrites)
  AllGather,      // collective, see CollectiveSpec
  ReduceScatter,  // collective
  AllToAll,       // collective
  AllReduce,      // collective
  // Whole-step compute (wallfacer/schedule/step.hpp): they touch no attention buffer.
  Gemm,       // dense matrix product C[m,n] = A[m,k] B[k,n] in the dtype, Op::gemm = {m, n, k}
  Pointwise,  // memory-bound op moving Op::bytes through HBM (norms, activations, the optimizer)
};
// What a whole-step compute op (or a gradient / parameter collective) is, for reports and traces.
enum class StepOp : uint8_t {
  None,  // attention ops of the strategy
  Embedding,
  Norm,
  QProj,
  KProj,
  VProj,
  Rope,
  OutProj,
  Residual,
  MlpGate,
  MlpUp,
  Activation,
  MlpDown,
  LmHead,
  Loss,
  Optimizer,
  GradSync,       // gradient all-reduce / reduce-scatter
  ParamGather,    // ZeRO parameter all-gather
  TensorGather,   // tensor parallel: all-gather of the sequence-parallel activations
  TensorScatter,  // tensor parallel: reduce-scatter of a row-parallel product
  StageTransfer,  // pipeline parallel: activations to the next stage, their gradient to the previous
  Fp8Cast,        // fp8 GEMMs: a GEMM operand cast to fp8 with its transpose (Transformer Engine)
  Fp8Scale,       // fp8 GEMMs: the delayed-scaling amax history and scale update of a layer's tensors
};
const char* to_string(StepOp op);
// Which product of a linear layer a Gemm is.
enum class GemmPart : uint8_t { Forward, DataGrad, WeightGrad };
const char* to_string(GemmPart part);
// Op::flags bits.
inline constexpr uint8_t kOpRecompute = 1;  // recomputation of a forward op inside the backward
// A rank's in-order queues. Sync carries the data-parallel synchronisation of a whole step
// (gradient buckets, ZeRO parameter gathers) on a communicator and stream of its own, as DDP, FSDP
// and Megatron's distributed optimizer run it, so that it does not hold back the strategy's and
// the tensor-parallel collectives. All collectives of one group run on one stream.
enum class Stream : uint8_t { Compute = 0, Send = 1, Recv = 2, Collective = 3, Sync = 4 };
constexpr int kNumStreams = 5;
// Collectives run on these two streams.
constexpr bool is_collective_stream(Stream s) {
  return s == Stream::Collective || s == Stream::Sync;
}
enum class Phase : uint8_t { Forward, Backward };
enum class Mask : uint8_t { None, Causal };  // Causal: key position <= query position
enum class Reduction : uint8_t { Sum, LseMerge };
const char* to_string(OpKind k);
const char* to_string(Stream s);
const char* to_string(Phase p);
bool is_collective(OpKind k);
bool is_step_compute(OpKind k);  // Gemm, Pointwise

// A buffer a rank allocates once. Capacity bounds the tokens it may hold at any time.
struct BufferDecl {
  std::string name;  // e.g. "q", "kv.0", "kv.1", "acc"
  FieldMask fields = 0;
  HeadRange heads;              // query heads for query-class fields, kv heads for kv-class ones
  int64_t capacity_tokens = 0;  // rows per batch element
  bool fp32 = false;            // accumulators (O/Lse, dQ, dK, dV) are fp32; others use the dtype
  bool operator==(const BufferDecl&) const = default;
};

// What every member of a collective contributes and receives. Identical on every member.
// AllGather:     out_j = concatenation of in_i over members in group order (tokens), heads same.
// AllToAll:      member i sends to j the intersection of in_i and out_j (tokens and heads).
// ReduceScatter: out_j = reduction over members i of (in_i restricted to out_j's tokens/heads).
// AllReduce:     element-wise sum of `elements` values of field WeightGrad (or the fields).
// Flat AllGather / ReduceScatter (fields WeightGrad or Weight, `elements` > 0, token lists empty):
//                the vector of `elements` values is cut into equal member shards, gathered from
//                them or reduced into them (ZeRO's gradient reduce-scatter and parameter gather).
struct CollectiveSpec {
  OpKind kind = OpKind::AllGather;
  int32_t group = -1;  // index into Plan::groups
  FieldMask fields = 0;
  Reduction reduction = Reduction::Sum;
  std::vector<int32_t> in_tokens, out_tokens;  // per member (group order): TokenSetPool ids
  std::vector<HeadRange> in_heads, out_heads;  // per member
  int64_t elements = 0;  // AllReduce; AllGather/ReduceScatter of WeightGrad/Weight (flat, see below)
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::Ring;  // AllReduce only: the group's (Plan)
  bool operator==(const CollectiveSpec&) const = default;
};
// A collective over flat vectors (WeightGrad or Weight) rather than token rows.
bool is_flat_collective(const CollectiveSpec& spec);

struct Op {
  OpKind kind = OpKind::AttnFwd;
  Stream stream = Stream::Compute;
  Phase phase = Phase::Forward;
  Mask mask = Mask::None;  // compute ops: whether to apply the causal mask inside the block
  int32_t step = -1;       // round index, for traces and reports
  int32_t peer = -1;       // Send/Recv: the other rank
  int32_t tag = -1;        // Send/Recv: equal on both sides of a pair
  int32_t coll = -1;       // collectives: index into RankProgram::collectives
  int32_t flow_set = -1;   // Send/Recv: index into Schedule::flow_sets (flows that run together)
  // Buffers by kind:
  //   AttnFwd: [0] query buffer (Q), [1] kv buffer (K,V), [2] accumulator (O,Lse; rows = buf[0] rows)
  //   AttnBwd: [0] query bundle (Q,dO,Lse,D), [1] kv buffer (K,V), [2] dQ accumulator, [3] dK/dV accumulator
  //   BwdPrep: [0]; Copy: [0] -> [1]; Send/Recv: [0]; collectives: [0] in, [1] out (AllReduce: [0])
  int32_t buf[4] = {-1, -1, -1, -1};
  // Token sets (TokenSetPool ids): compute ops: [0] query tokens, [1] key tokens (both subsets of
  // the buffers' current contents); Copy/Send/Recv/BwdPrep: [0] the tokens moved or written.
  int32_t tok[2] = {-1, -1};
  HeadRange heads;  // compute ops: query heads computed (kv heads follow from GQA)
  FieldMask fields = 0;
  int64_t bytes = 0;                  // Send/Recv payload; collectives: bytes this member sends
  double flops = 0;                   // compute ops: exact FLOPs (docs/algorithms.md §1.3 convention; Gemm 2mnk)
  int32_t gemm[3] = {0, 0, 0};        // Gemm: m, n, k
  StepOp label = StepOp::None;        // whole-step ops: what the op is
  GemmPart part = GemmPart::Forward;  // Gemm: forward, data or weight gradient
  uint8_t flags = 0;                  // kOpRecompute
  uint32_t dep_begin = 0;             // explicit dependencies: RankProgram::deps[dep_begin, dep_begin+dep_count)
  uint16_t dep_count = 0;
  bool operator==(const Op&) const = default;
};

// A pipeline stage message: a Send or Recv of flat activations (no token rows) between the same
// stage rank of two adjacent stages.
bool is_stage_message(const Op& op);

// A tensor slice a rank reads at the start (inputs) or provides at the end (outputs).
struct Binding {
  int32_t buf = -1;
  Field field = Field::Q;
  int32_t tokens = -1;  // TokenSetPool id: global tokens, in buffer row order
  HeadRange heads;
  bool operator==(const Binding&) const = default;
};

struct RankProgram {
  int rank = 0;
  int batch_begin = 0, batch_end = 1;  // sequences this rank works on
  std::vector<BufferDecl> buffers;
  std::vector<Op> ops;
  std::vector<int32_t> deps;  // op indices (earlier ops of the same rank)
  std::vector<CollectiveSpec> collectives;
  std::vector<Binding> inputs;   // Q, K, V, dO (and WeightGrad) before the first op
  std::vector<Binding> outputs;  // O, Lse, dQ, dK, dV (and WeightGrad) after the last op
  // BuildMode::ComputeOnly: the sends and receives of the Full program, counted, not stored.
  size_t transfers_left_out = 0;
  // The ops of the Full program (op budgets count these, whatever the build mode).
  size_t op_count() const { return ops.size() + transfers_left_out; }
  // Explicit dependencies of op i.
  const int32_t* deps_begin(const Op& op) const { return deps.data() + op.dep_begin; }
  const int32_t* deps_end(const Op& op) const { return deps.data() + op.dep_begin + op.dep_count; }
  // Appends an op with its dependencies; returns its index.
  int32_t add(Op op, std::initializer_list<int32_t> dependencies = {});
  int32_t add(Op op, const std::vector<int32_t>& dependencies);
  bool operator==(const RankProgram&) const = default;
};

// What a builder puts into a rank's program. Full: the program as it runs. ComputeOnly: what
// bounds read off a program without timing it: the same buffers, bindings and batch, the same
// compute ops and collectives (Full's, in Full's order) and the same op_count(), but no
// dependencies, and the sends and receives only counted (transfers and the tracking of who
// waits for whom are most of a build; two ops in three of a ring are transfers). Not for
// timing, checking or running.
enum class BuildMode : uint8_t { Full, ComputeOnly };

class TokenSetPool;
// The program's own query tokens times the heads they are bound for, summed over its Q inputs
// (per sequence: not multiplied by the program's batch).
int64_t query_token_heads(const RankProgram& program, const TokenSetPool& pool);

// Flows that a strategy starts at the same time (e.g. every rank sending K,V to its ring
// successor). The cost model charges contention among the flows of one set.
struct FlowSet {
  std::string name;
  std::vector<std::pair<int32_t, int32_t>> flows;  // (src rank, dst rank)
};

// Sizes the ops refer to, copied from the plan's workload.
struct ScheduleDims {
  int64_t seq = 0;
  int batch = 1;
  int heads = 0, kv_heads = 0, head_dim = 0;
  int elem_bytes = 2;  // dtype of Q, K, V, O, dO; accumulators and Lse/D are fp32
  bool causal = true;
  int grad_elem_bytes = 4;  // the workload's grad_comm_dtype: gradient reduce-scatters and all-reduces
};

struct Schedule {
  ScheduleDims dims;
  TokenSetPool tokens;
  std::vector<FlowSet> flow_sets;
  std::vector<RankProgram> ranks;  // all ranks, or the subset that was asked for
};

// Bytes of `tokens` rows of `fields` over `heads` for `batch` sequences (fp32 for Lse, D and
// when `fp32` is set; elem_bytes otherwise).
int64_t payload_bytes(const ScheduleDims& dims, FieldMask fields, int64_t tokens, int32_t heads, int batch, bool fp32);
// FLOPs of one block: 4 * batch * live (query, key) pairs * heads * head_dim forward, 2.5x that
// backward; live pairs count the causal mask exactly.
double block_flops(const ScheduleDims& dims, const TokenSet& q, const TokenSet& k, Mask mask, int32_t heads,
                   Phase phase);
// Number of (query, key) pairs with key <= query (causal) or all pairs (None).
int64_t live_pairs(const TokenSet& q, const TokenSet& k, Mask mask);

}  // namespace wallfacer
