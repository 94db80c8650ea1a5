// Internal to the executor: how a rank's buffers are laid out in backend memory, how global
// tokens map to rows, and the one copy routine that packs messages, unpacks them and gathers
// kernel operands. Not part of the public runtime interface.
//
// Layout of a field of a buffer with capacity `cap` rows, head range of `nh` heads, for the
// rank's `nb` sequences: [nb][cap][nh][head_dim] for vector fields, [nb][nh][cap] for the per-row
// scalars (Lse, D), and a flat array for WeightGrad. A packed block (a message, a kernel operand)
// is the same layout with cap = its token count, one field after another in Field order, so it is
// itself a Storage and every move is a copy between two Storages.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::runtime::detail {

// `count` consecutive tokens of a token set that sit in rows [row, row + count) of a holder.
struct RowRun {
  int64_t row = 0, count = 0;
};
using RowRuns = std::vector<RowRun>;

// Rows of every token of `subset` (in subset order) inside a holder that holds `holder` in row
// order; nullopt when some token is not held.
std::optional<RowRuns> map_rows(const TokenSet& holder, const TokenSet& subset);
// Rows [0, count) as one run.
RowRuns identity_runs(int64_t count);
// Tokens in both sets, in ascending global order (both sides of a collective compute the same).
TokenSet intersect(const TokenSet& a, const TokenSet& b);
HeadRange intersect(HeadRange a, HeadRange b);
bool contains(HeadRange outer, HeadRange inner);
std::vector<int64_t> positions(const TokenSet& set);
// Consecutive pieces of `set` (in its order) of at most `max_tokens` tokens each.
std::vector<TokenSet> split_tokens(const TokenSet& set, int64_t max_tokens);
std::string describe(const TokenSet& set);  // "[0,16)+[48,64)"
std::string describe(HeadRange heads);      // "heads [0,4)"

// Head ranges are stated once for a buffer or an op, in query heads when any of its fields is
// query-class and in kv heads otherwise; a kv-class field of a query-head range covers the kv
// heads those query heads use (GQA group `group`).
bool mask_has_query_field(FieldMask fields);
HeadRange field_heads(Field field, HeadRange heads, bool heads_are_query, int group);

// Fields in Field order, each with its own base pointer into backend memory.
struct Storage {
  FieldMask fields = 0;
  HeadRange heads;
  bool heads_are_query = true;
  int batches = 1;
  int64_t capacity = 0;         // rows per batch element
  int64_t weight_elements = 0;  // length of the flat WeightGrad field
  int head_dim = 0;
  int group = 1;
  ElemType type = ElemType::F32;
  std::array<char*, kNumFields> base{};

  bool has(Field f) const { return (fields & field_bit(f)) != 0; }
  HeadRange heads_of(Field f) const { return field_heads(f, heads, heads_are_query, group); }
  int64_t width(Field f) const { return is_per_row_scalar(f) ? 1 : head_dim; }
  int64_t elements(Field f) const;  // elements the field occupies
  template <typename T>
  T* ptr(Field f) const {
    return reinterpret_cast<T*>(base[size_t(f)]);
  }
  // Field f of batch element b, where the kernels take it (any field but the flat WeightGrad).
  template <typename T>
  T* batch_ptr(Field f, int b) const {
    return ptr<T>(f) + int64_t(b) * capacity * heads_of(f).size() * width(f);
  }
};

// Shape of a packed block of `fields` over `tokens` rows and `heads` (stated as in
// field_heads), and its total element count.
Storage packed_shape(FieldMask fields, int64_t tokens, HeadRange heads, bool heads_are_query, int batches, int head_dim,
                     int group, ElemType type);
int64_t packed_elements(const Storage& shape);
// Points the fields of a packed shape into `block` (backend memory of packed_elements elements).
void place_packed(Storage& shape, void* block);

// Copies `fields` over `heads` (stated as in field_heads) for the tokens described by
// src_runs/dst_runs (the same tokens in the same order, possibly split differently).
void copy_rows(Backend& backend, const Storage& src, const RowRuns& src_runs, const Storage& dst,
               const RowRuns& dst_runs, FieldMask fields, HeadRange heads, bool heads_are_query);

// Backend memory released on destruction.
class DeviceBlock {
 public:
  DeviceBlock() = default;
  DeviceBlock(Backend& backend, size_t bytes) : backend_(&backend), bytes_(bytes), data_(backend.allocate(bytes)) {}
  ~DeviceBlock() { reset(); }
  DeviceBlock(DeviceBlock&& o) noexcept { *this = std::move(o); }
  DeviceBlock& operator=(DeviceBlock&& o) noexcept;
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  void reset();
  char* data() const { return static_cast<char*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  Backend* backend_ = nullptr;
  size_t bytes_ = 0;
  void* data_ = nullptr;
};

// A packed block with its own memory.
struct PackedBlock {
  Storage shape;
  DeviceBlock memory;
  int64_t elements = 0;
};
PackedBlock make_packed(Backend& backend, FieldMask fields, int64_t tokens, HeadRange heads, bool heads_are_query,
                        int batches, int head_dim, int group, ElemType type);

}  // namespace wallfacer::runtime::detail
