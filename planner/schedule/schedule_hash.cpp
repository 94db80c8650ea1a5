// Fingerprint of a schedule's behaviour (schedule_hash.hpp).
#include <wallfacer/schedule/schedule_hash.hpp>

#include <cstring>
#include <type_traits>

namespace wallfacer {
namespace {

// FNV-1a's step over whole values instead of bytes (one multiply per field, not one per byte: the
// merge of equal schedules hashes every timed rank of every candidate priced), with a final
// xor-shift so that the high bits of each value reach the low bits of the next step's product.
class Fnv {
 public:
  template <typename T>
  void add(const T& value) {
    static_assert((std::is_arithmetic_v<T> || std::is_enum_v<T>)&&sizeof(T) <= sizeof(uint64_t));
    uint64_t word = 0;
    std::memcpy(&word, &value, sizeof(T));
    hash_ = (hash_ ^ word) * 1099511628211ull;
    hash_ ^= hash_ >> 29;
  }
  void add_tokens(const TokenSetPool& pool, int32_t id) {
    if (id < 0) {
      add(int64_t(-1));
      return;
    }
    const TokenSet& set = pool.get(id);
    add(int64_t(set.size()));
    for (const TokenRange& r : set) {
      add(r.begin);
      add(r.end);
    }
  }
  void add_heads(const HeadRange& h) {
    add(h.begin);
    add(h.end);
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 14695981039346656037ull;
};

int gpu_of(const Plan& plan, int rank) {
  return rank >= 0 && rank < plan.num_ranks() ? plan.ranks[size_t(rank)].gpu : -1;
}

void add_op(Fnv& h, const Plan& plan, const TokenSetPool& pool, const RankProgram& program, const Op& op) {
  h.add(op.kind);
  h.add(op.stream);
  h.add(op.phase);
  h.add(op.mask);
  h.add(gpu_of(plan, op.peer));
  for (int32_t b : op.buf)
    h.add(b);
  for (int32_t t : op.tok)
    h.add_tokens(pool, t);
  h.add_heads(op.heads);
  h.add(op.fields);
  h.add(op.bytes);
  h.add(op.flops);
  for (int32_t g : op.gemm)
    h.add(g);
  h.add(op.label);
  h.add(op.part);
  h.add(op.flags);
  h.add(op.dep_count);
  for (const int32_t* d = program.deps_begin(op); d != program.deps_end(op); ++d)
    h.add(*d);
}

void add_collective(Fnv& h, const Plan& plan, const TokenSetPool& pool, const CollectiveSpec& spec) {
  h.add(spec.kind);
  if (spec.group >= 0 && spec.group < int(plan.groups.size()))
    for (int member : plan.groups[size_t(spec.group)].ranks)
      h.add(gpu_of(plan, member));
  h.add(spec.fields);
  h.add(spec.reduction);
  for (int32_t t : spec.in_tokens)
    h.add_tokens(pool, t);
  for (int32_t t : spec.out_tokens)
    h.add_tokens(pool, t);
  for (const HeadRange& r : spec.in_heads)
    h.add_heads(r);
  for (const HeadRange& r : spec.out_heads)
    h.add_heads(r);
  h.add(spec.elements);
  h.add(spec.algorithm);
}

}  // namespace

uint64_t schedule_hash(const Plan& plan, const Schedule& schedule) {
  Fnv h;
  h.add(schedule.dims.seq);
  h.add(schedule.dims.batch);
  h.add(schedule.dims.heads);
  h.add(schedule.dims.kv_heads);
  h.add(schedule.dims.head_dim);
  h.add(schedule.dims.elem_bytes);
  h.add(schedule.dims.grad_elem_bytes);
  h.add(schedule.dims.causal);
  for (const RankProgram& program : schedule.ranks) {
    h.add(gpu_of(plan, program.rank));
    h.add(program.batch_begin);
    h.add(program.batch_end);
    for (const BufferDecl& b : program.buffers) {
      h.add(b.fields);
      h.add_heads(b.heads);
      h.add(b.capacity_tokens);
      h.add(b.fp32);
    }
    h.add(program.ops.size());
    for (const Op& op : program.ops)
      add_op(h, plan, schedule.tokens, program, op);
    for (const CollectiveSpec& spec : program.collectives)
      add_collective(h, plan, schedule.tokens, spec);
  }
  return h.value();
}

}  // namespace wallfacer
