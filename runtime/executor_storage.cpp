#include "executor_storage.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::runtime::detail {

std::optional<RowRuns> map_rows(const TokenSet& holder, const TokenSet& subset) {
  std::vector<int64_t> first_row(holder.size());
  int64_t row = 0;
  for (size_t k = 0; k < holder.size(); ++k) {
    first_row[k] = row;
    row += holder[k].size();
  }
  RowRuns runs;
  size_t hint = 0;  // subsets usually follow the holder's order: start the search where the last run ended
  for (const TokenRange& range : subset) {
    int64_t pos = range.begin;
    while (pos < range.end) {
      size_t k = hint;
      size_t tried = 0;
      while (tried < holder.size() && !(holder[k].begin <= pos && pos < holder[k].end)) {
        k = (k + 1) % holder.size();
        ++tried;
      }
      if (tried == holder.size() || holder.empty()) return std::nullopt;
      int64_t len = std::min(range.end, holder[k].end) - pos;
      int64_t at = first_row[k] + (pos - holder[k].begin);
      if (!runs.empty() && runs.back().row + runs.back().count == at)
        runs.back().count += len;
      else
        runs.push_back({at, len});
      pos += len;
      hint = k;
    }
  }
  return runs;
}

RowRuns identity_runs(int64_t count) {
  if (count == 0) return {};
  return {{0, count}};
}

TokenSet intersect(const TokenSet& a, const TokenSet& b) {
  TokenSet out;
  for (const auto& x : a)
    for (const auto& y : b) {
      int64_t lo = std::max(x.begin, y.begin), hi = std::min(x.end, y.end);
      if (lo < hi) out.push_back({lo, hi});
    }
  std::sort(out.begin(), out.end(), [](const TokenRange& p, const TokenRange& q) { return p.begin < q.begin; });
  TokenSet merged;
  for (const auto& r : out) {
    if (!merged.empty() && merged.back().end == r.begin)
      merged.back().end = r.end;
    else
      merged.push_back(r);
  }
  return merged;
}

HeadRange intersect(HeadRange a, HeadRange b) {
  HeadRange r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

bool contains(HeadRange outer, HeadRange inner) {
  return outer.begin <= inner.begin && inner.end <= outer.end;
}

std::vector<int64_t> positions(const TokenSet& set) {
  std::vector<int64_t> pos;
  pos.reserve(size_t(token_count(set)));
  for (const auto& r : set)
    for (int64_t t = r.begin; t < r.end; ++t)
      pos.push_back(t);
  return pos;
}

std::vector<TokenSet> split_tokens(const TokenSet& set, int64_t max_tokens) {
  std::vector<TokenSet> pieces(1);
  int64_t in_piece = 0;
  for (TokenRange r : set) {
    while (r.size() > 0) {
      if (in_piece == max_tokens) {
        pieces.emplace_back();
        in_piece = 0;
      }
      int64_t take = std::min(r.size(), max_tokens - in_piece);
      pieces.back().push_back({r.begin, r.begin + take});
      in_piece += take;
      r.begin += take;
    }
  }
  return pieces;
}

std::string describe(const TokenSet& set) {
  if (set.empty()) return "{}";
  std::string s;
  for (size_t i = 0; i < set.size() && i < 8; ++i)
    s += fmt::format("{}[{},{})", i ? "+" : "", set[i].begin, set[i].end);
  if (set.size() > 8) s += fmt::format("+... ({} ranges)", set.size());
  return s;
}

std::string describe(HeadRange heads) {
  return fmt::format("heads [{},{})", heads.begin, heads.end);
}

bool mask_has_query_field(FieldMask fields) {
  for (int f = 0; f < kNumFields; ++f)
    if ((fields & (1u << f)) && Field(f) != Field::WeightGrad && is_query_class(Field(f))) return true;
  return false;
}

HeadRange field_heads(Field field, HeadRange heads, bool heads_are_query, int group) {
  if (is_query_class(field) || !heads_are_query || field == Field::WeightGrad) return heads;
  if (heads.size() == 0) return {heads.begin / group, heads.begin / group};
  return {heads.begin / group, (heads.end - 1) / group + 1};
}

int64_t Storage::elements(Field f) const {
  if (f == Field::WeightGrad) return weight_elements;
  return int64_t(batches) * capacity * heads_of(f).size() * width(f);
}

Storage packed_shape(FieldMask fields, int64_t tokens, HeadRange heads, bool heads_are_query, int batches, int head_dim,
                     int group, ElemType type) {
  return Storage{.fields = fields,
                 .heads = heads,
                 .heads_are_query = heads_are_query,
                 .batches = batches,
                 .capacity = tokens,
                 .head_dim = head_dim,
                 .group = group,
                 .type = type};
}

int64_t packed_elements(const Storage& shape) {
  int64_t n = 0;
  for (int f = 0; f < kNumFields; ++f)
    if (shape.has(Field(f))) n += shape.elements(Field(f));
  return n;
}

void place_packed(Storage& shape, void* block) {
  char* p = static_cast<char*>(block);
  for (int f = 0; f < kNumFields; ++f) {
    if (!shape.has(Field(f))) continue;
    shape.base[size_t(f)] = p;
    p += size_t(shape.elements(Field(f))) * elem_size(shape.type);
  }
}

namespace {

// Copies one field for one pair of aligned row segments.
void copy_segment(Backend& backend, const Storage& src, int64_t src_row, const Storage& dst, int64_t dst_row,
                  int64_t rows, Field f, HeadRange heads) {
  const size_t es = elem_size(src.type);
  const HeadRange sh = src.heads_of(f), dh = dst.heads_of(f);
  const int64_t s_off = heads.begin - sh.begin, d_off = heads.begin - dh.begin;
  const int64_t nh = heads.size();
  for (int b = 0; b < src.batches; ++b) {
    if (is_per_row_scalar(f)) {
      const char* s = src.base[size_t(f)] + size_t(((b * sh.size() + s_off) * src.capacity + src_row)) * es;
      char* d = dst.base[size_t(f)] + size_t(((b * dh.size() + d_off) * dst.capacity + dst_row)) * es;
      backend.copy_2d(d, size_t(dst.capacity) * es, s, size_t(src.capacity) * es, size_t(rows) * es, size_t(nh));
    } else {
      const int64_t d_dim = src.head_dim;
      const char* s = src.base[size_t(f)] + size_t(((b * src.capacity + src_row) * sh.size() + s_off) * d_dim) * es;
      char* d = dst.base[size_t(f)] + size_t(((b * dst.capacity + dst_row) * dh.size() + d_off) * d_dim) * es;
      backend.copy_2d(d, size_t(dh.size() * d_dim) * es, s, size_t(sh.size() * d_dim) * es, size_t(nh * d_dim) * es,
                      size_t(rows));
    }
  }
}

}  // namespace

void copy_rows(Backend& backend, const Storage& src, const RowRuns& src_runs, const Storage& dst,
               const RowRuns& dst_runs, FieldMask fields, HeadRange heads, bool heads_are_query) {
  if (src.batches != dst.batches || src.type != dst.type || src.head_dim != dst.head_dim)
    throw ScheduleError("copy between storages of different batch, type or head_dim");
  for (int fi = 0; fi < kNumFields; ++fi) {
    Field f = Field(fi);
    if (!(fields & field_bit(f))) continue;
    if (f == Field::WeightGrad) throw ScheduleError("WeightGrad moves only by all-reduce");
    if (!src.has(f) || !dst.has(f))
      throw ScheduleError(fmt::format("field {} missing from the {} side of a copy", to_string(f),
                                      src.has(f) ? "destination" : "source"));
    HeadRange h = field_heads(f, heads, heads_are_query, src.group);
    if (!contains(src.heads_of(f), h) || !contains(dst.heads_of(f), h))
      throw ScheduleError(fmt::format("field {}: {} not held by both sides ({} and {})", to_string(f), describe(h),
                                      describe(src.heads_of(f)), describe(dst.heads_of(f))));
    // Walk both run lists together, copying the longest segment consecutive on both sides.
    size_t i = 0, j = 0;
    int64_t si = 0, dj = 0;  // tokens consumed of src_runs[i] / dst_runs[j]
    while (i < src_runs.size() && j < dst_runs.size()) {
      int64_t len = std::min(src_runs[i].count - si, dst_runs[j].count - dj);
      copy_segment(backend, src, src_runs[i].row + si, dst, dst_runs[j].row + dj, len, f, h);
      si += len;
      dj += len;
      if (si == src_runs[i].count) ++i, si = 0;
      if (dj == dst_runs[j].count) ++j, dj = 0;
    }
    if (i != src_runs.size() || j != dst_runs.size()) throw ScheduleError("copy_rows: run lists of different lengths");
  }
}

DeviceBlock& DeviceBlock::operator=(DeviceBlock&& o) noexcept {
  if (this != &o) {
    reset();
    backend_ = o.backend_;
    bytes_ = o.bytes_;
    data_ = o.data_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBlock::reset() {
  if (data_) backend_->release(data_);
  data_ = nullptr;
  bytes_ = 0;
}

PackedBlock make_packed(Backend& backend, FieldMask fields, int64_t tokens, HeadRange heads, bool heads_are_query,
                        int batches, int head_dim, int group, ElemType type) {
  PackedBlock block;
  block.shape = packed_shape(fields, tokens, heads, heads_are_query, batches, head_dim, group, type);
  block.elements = packed_elements(block.shape);
  block.memory = DeviceBlock(backend, size_t(block.elements) * elem_size(type));
  place_packed(block.shape, block.memory.data());
  return block;
}

}  // namespace wallfacer::runtime::detail
