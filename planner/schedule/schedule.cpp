// Schedule primitives: names, token-set interning, payload sizes and exact block FLOPs.
#include <wallfacer/schedule/schedule.hpp>

#include <algorithm>
#include <iterator>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/hash_mix.hpp>

namespace wallfacer {

const char* to_string(Field f) {
  switch (f) {
    case Field::Q:
      return "Q";
    case Field::K:
      return "K";
    case Field::V:
      return "V";
    case Field::O:
      return "O";
    case Field::Lse:
      return "Lse";
    case Field::dO:
      return "dO";
    case Field::D:
      return "D";
    case Field::dQ:
      return "dQ";
    case Field::dK:
      return "dK";
    case Field::dV:
      return "dV";
    case Field::WeightGrad:
      return "WeightGrad";
    case Field::Weight:
      return "Weight";
    case Field::Activation:
      return "Activation";
  }
  return "?";
}

std::string fields_to_string(FieldMask mask) {
  std::string out;
  for (int i = 0; i < kNumFields; ++i) {
    if (!(mask & (1u << i))) continue;
    if (!out.empty()) out += '|';
    out += to_string(static_cast<Field>(i));
  }
  return out;
}

bool is_query_class(Field f) {
  switch (f) {
    case Field::Q:
    case Field::O:
    case Field::Lse:
    case Field::dO:
    case Field::D:
    case Field::dQ:
      return true;
    default:
      return false;
  }
}

bool is_per_row_scalar(Field f) {
  return f == Field::Lse || f == Field::D;
}

int64_t token_count(const TokenSet& set) {
  int64_t n = 0;
  for (const auto& r : set)
    n += r.size();
  return n;
}

bool is_canonical(const TokenSet& set) {
  for (size_t i = 0; i < set.size(); ++i) {
    if (set[i].size() <= 0) return false;
    if (i > 0 && set[i - 1].end == set[i].begin) return false;
  }
  return true;
}

namespace {

// Two independent multiply chains over the range ends, mixed once: sets of hundreds of ranges
// are hashed per op built, and a full mix per value made the hash most of interning.
uint64_t hash_of(const TokenSet& set) {
  uint64_t a = set.size(), b = 0x9e3779b97f4a7c15ULL;
  for (const TokenRange& r : set) {
    a = (a ^ uint64_t(r.begin)) * 0xff51afd7ed558ccdULL;
    b = (b ^ uint64_t(r.end)) * 0xc4ceb9fe1a85ec53ULL;
  }
  return splitmix64_mix(a ^ (b << 32 | b >> 32));
}

}  // namespace

int32_t TokenSetPool::intern(const TokenSet& set) {
  // Canonical form: empty ranges dropped, adjacent ranges merged (row order is unchanged).
  if (!is_canonical(set)) {
    TokenSet canon;
    canon.reserve(set.size());
    for (const auto& r : set) {
      if (r.size() <= 0) continue;
      if (!canon.empty() && canon.back().end == r.begin) {
        canon.back().end = r.end;
      } else {
        canon.push_back(r);
      }
    }
    return intern(canon);
  }
  if (2 * (sets_.size() + 1) > slots_.size()) grow();
  const uint64_t hash = hash_of(set);
  const size_t mask = slots_.size() - 1;
  size_t slot = size_t(hash) & mask;
  for (; slots_[slot] >= 0; slot = (slot + 1) & mask) {
    const auto id = size_t(slots_[slot]);
    if (hashes_[id] == hash && sets_[id] == set) return int32_t(id);
  }
  const auto id = int32_t(sets_.size());
  slots_[slot] = id;
  sets_.push_back(set);
  hashes_.push_back(hash);
  return id;
}

void TokenSetPool::grow() {
  std::vector<int32_t> slots(std::max<size_t>(64, 2 * slots_.size()), -1);
  const size_t mask = slots.size() - 1;
  for (size_t id = 0; id < sets_.size(); ++id) {
    size_t slot = size_t(hashes_[id]) & mask;
    while (slots[slot] >= 0)
      slot = (slot + 1) & mask;
    slots[slot] = int32_t(id);
  }
  slots_ = std::move(slots);
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::AttnFwd:
      return "AttnFwd";
    case OpKind::AttnBwd:
      return "AttnBwd";
    case OpKind::BwdPrep:
      return "BwdPrep";
    case OpKind::Copy:
      return "Copy";
    case OpKind::Send:
      return "Send";
    case OpKind::Recv:
      return "Recv";
    case OpKind::AllGather:
      return "AllGather";
    case OpKind::ReduceScatter:
      return "ReduceScatter";
    case OpKind::AllToAll:
      return "AllToAll";
    case OpKind::AllReduce:
      return "AllReduce";
    case OpKind::Gemm:
      return "Gemm";
    case OpKind::Pointwise:
      return "Pointwise";
  }
  return "?";
}

const char* to_string(Stream s) {
  switch (s) {
    case Stream::Compute:
      return "compute";
    case Stream::Send:
      return "send";
    case Stream::Recv:
      return "recv";
    case Stream::Collective:
      return "collective";
    case Stream::Sync:
      return "sync";
  }
  return "?";
}

const char* to_string(Phase p) {
  return p == Phase::Forward ? "forward" : "backward";
}

const char* to_string(StepOp op) {
  static constexpr const char* kNames[] = {
      "attention",     "embedding",      "norm",           "q_proj",    "k_proj",    "v_proj",
      "rope",          "out_proj",       "residual",       "mlp_gate",  "mlp_up",    "activation",
      "mlp_down",      "lm_head",        "loss",           "optimizer", "grad_sync", "param_gather",
      "tensor_gather", "tensor_scatter", "stage_transfer", "fp8_cast",  "fp8_scale"};
  const auto i = size_t(op);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* to_string(GemmPart part) {
  switch (part) {
    case GemmPart::Forward:
      return "fwd";
    case GemmPart::DataGrad:
      return "dgrad";
    case GemmPart::WeightGrad:
      return "wgrad";
  }
  return "?";
}

bool is_step_compute(OpKind k) {
  return k == OpKind::Gemm || k == OpKind::Pointwise;
}

bool is_flat_collective(const CollectiveSpec& spec) {
  const FieldMask flat = field_mask({Field::WeightGrad, Field::Weight, Field::Activation});
  return spec.kind == OpKind::AllReduce || ((spec.fields & flat) != 0 && spec.elements > 0);
}

bool is_stage_message(const Op& op) {
  return (op.kind == OpKind::Send || op.kind == OpKind::Recv) && op.fields == fieldset::kActivation;
}

bool is_collective(OpKind k) {
  return k == OpKind::AllGather || k == OpKind::ReduceScatter || k == OpKind::AllToAll || k == OpKind::AllReduce;
}

int32_t RankProgram::add(Op op, std::initializer_list<int32_t> dependencies) {
  return add(std::move(op), std::vector<int32_t>(dependencies));
}

int32_t RankProgram::add(Op op, const std::vector<int32_t>& dependencies) {
  const auto index = int32_t(ops.size());
  WF_ASSERT(dependencies.size() <= 0xffff, "too many dependencies on one op");
  op.dep_begin = uint32_t(deps.size());
  op.dep_count = uint16_t(dependencies.size());
  for (int32_t d : dependencies) {
    WF_ASSERT(d >= 0 && d < index, "a dependency must be an earlier op of the same rank");
    deps.push_back(d);
  }
  ops.push_back(std::move(op));
  return index;
}

int64_t payload_bytes(const ScheduleDims& dims, FieldMask fields, int64_t tokens, int32_t heads, int batch, bool fp32) {
  int64_t per_token_head = 0;
  for (int i = 0; i < kNumFields; ++i) {
    if (!(fields & (1u << i))) continue;
    const auto f = static_cast<Field>(i);
    if (f == Field::WeightGrad || f == Field::Weight || f == Field::Activation)
      continue;  // not per token: flat collectives count elements
    const int64_t width = is_per_row_scalar(f) ? 1 : dims.head_dim;
    const int64_t elem = (fp32 || is_per_row_scalar(f)) ? 4 : dims.elem_bytes;
    per_token_head += width * elem;
  }
  return per_token_head * tokens * heads * batch;
}

namespace {

// Sum of (q - k0 + 1) over q in [a, b), each term clamped to [0, k1 - k0]: the causal pairs of
// query range [a, b) against key range [k0, k1).
int64_t causal_pairs(TokenRange q, TokenRange k) {
  if (q.size() <= 0 || k.size() <= 0) return 0;
  int64_t total = 0;
  // Queries below k.begin see nothing. Queries in [k.begin, k.end) see q - k.begin + 1 keys.
  const int64_t ramp_begin = std::max(q.begin, k.begin);
  const int64_t ramp_end = std::min(q.end, k.end);
  if (ramp_end > ramp_begin) {
    const int64_t first = ramp_begin - k.begin + 1, last = ramp_end - 1 - k.begin + 1;
    total += (first + last) * (ramp_end - ramp_begin) / 2;
  }
  // Queries at or above k.end see every key.
  const int64_t full_begin = std::max(q.begin, k.end);
  if (q.end > full_begin) total += (q.end - full_begin) * k.size();
  return total;
}

}  // namespace

int64_t live_pairs(const TokenSet& q, const TokenSet& k, Mask mask) {
  if (mask == Mask::None) return token_count(q) * token_count(k);
  int64_t total = 0;
  for (const auto& qr : q)
    for (const auto& kr : k)
      total += causal_pairs(qr, kr);
  return total;
}

double block_flops(const ScheduleDims& dims, const TokenSet& q, const TokenSet& k, Mask mask, int32_t heads,
                   Phase phase) {
  const double forward = 4.0 * dims.batch * double(live_pairs(q, k, mask)) * heads * dims.head_dim;
  return phase == Phase::Forward ? forward : 2.5 * forward;
}

int64_t query_token_heads(const RankProgram& program, const TokenSetPool& pool) {
  int64_t token_heads = 0;
  for (const Binding& b : program.inputs)
    if (b.field == Field::Q) token_heads += token_count(pool.get(b.tokens)) * b.heads.size();
  return token_heads;
}

}  // namespace wallfacer
