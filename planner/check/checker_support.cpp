// Token-set arithmetic, grid coverage counting and the blocking-semantics execution used by the
// schedule checker.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/per_stream.hpp>
#include "checker_detail.hpp"

namespace wallfacer::detail::check {

TokenSet normalize(TokenSet set) {
  std::sort(set.begin(), set.end(), [](const TokenRange& a, const TokenRange& b) { return a.begin < b.begin; });
  TokenSet out;
  for (const TokenRange& r : set) {
    if (!out.empty() && r.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, r.end);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

TokenSet merge_adjacent(const TokenSet& set) {
  TokenSet out;
  for (const TokenRange& r : set) {
    if (!out.empty() && out.back().end == r.begin) {
      out.back().end = r.end;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

bool is_subset(const TokenSet& a, const TokenSet& b) {
  size_t j = 0;
  for (const TokenRange& r : a) {
    while (j < b.size() && b[j].end <= r.begin)
      ++j;
    if (j == b.size() || b[j].begin > r.begin || b[j].end < r.end) return false;
  }
  return true;
}

int64_t overlap(const TokenSet& a, const TokenSet& b) {
  int64_t total = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    total += std::max<int64_t>(0, std::min(a[i].end, b[j].end) - std::max(a[i].begin, b[j].begin));
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

int64_t causal_pairs(TokenRange q, TokenRange k) {
  if (q.size() <= 0 || k.size() <= 0) return 0;
  // Query x sees keys [k.begin, min(k.end, x + 1)): rows from k.end - 1 on see the whole range,
  // rows in [k.begin, k.end - 1) see a growing prefix.
  int64_t total = 0;
  int64_t full_from = std::max(q.begin, k.end - 1);
  if (full_from < q.end) total += (q.end - full_from) * k.size();
  int64_t lo = std::max(q.begin, k.begin), hi = std::min(q.end, k.end - 1);
  if (lo < hi) total += (hi - lo) * (lo - k.begin + 1) + (hi - lo) * (hi - lo - 1) / 2;
  return total;
}

std::string describe(const TokenSet& set) {
  std::string out;
  for (const TokenRange& r : set)
    out += fmt::format("{}[{}, {})", out.empty() ? "" : " ", r.begin, r.end);
  return out.empty() ? "(none)" : out;
}

namespace {

int32_t head_overlap(HeadRange a, HeadRange b) {
  return std::max(0, std::min(a.end, b.end) - std::max(a.begin, b.begin));
}

std::string gather_problem(const CollectiveSpec& spec, const TokenSetPool& pool) {
  TokenSet concat;
  for (size_t i = 0; i < spec.in_tokens.size(); ++i) {
    const TokenSet& in = pool.get(spec.in_tokens[i]);
    concat.insert(concat.end(), in.begin(), in.end());
    if (!(spec.in_heads[i] == spec.in_heads[0])) return "all-gather members contribute different heads";
  }
  concat = merge_adjacent(concat);
  for (size_t j = 0; j < spec.out_tokens.size(); ++j)
    if (merge_adjacent(pool.get(spec.out_tokens[j])) != concat || !(spec.out_heads[j] == spec.in_heads[0]))
      return fmt::format("member {}'s output is not the concatenation of the inputs", j);
  return "";
}

// Inputs pairwise disjoint, and every output (token, head) found in exactly one input.
std::string all_to_all_problem(const CollectiveSpec& spec, const TokenSetPool& pool,
                               const std::vector<TokenSet>& norm) {
  const size_t m = spec.in_tokens.size();
  auto n = [&](int32_t id) -> const TokenSet& { return norm[size_t(id)]; };
  for (size_t i = 0; i < m; ++i)
    for (size_t k = i + 1; k < m; ++k)
      if (overlap(n(spec.in_tokens[i]), n(spec.in_tokens[k])) * head_overlap(spec.in_heads[i], spec.in_heads[k]) > 0)
        return fmt::format("all-to-all inputs of members {} and {} overlap", i, k);
  for (size_t j = 0; j < m; ++j) {
    int64_t got = 0;
    for (size_t i = 0; i < m; ++i)
      got += overlap(n(spec.in_tokens[i]), n(spec.out_tokens[j])) * head_overlap(spec.in_heads[i], spec.out_heads[j]);
    if (got != token_count(pool.get(spec.out_tokens[j])) * spec.out_heads[j].size())
      return fmt::format("all-to-all output of member {} is not covered by the inputs", j);
  }
  return "";
}

// Every (token, head) of each output must lie in some member's input.
std::string reduce_problem(const CollectiveSpec& spec, const std::vector<TokenSet>& norm) {
  std::set<std::tuple<int32_t, int32_t, int32_t>> ins;  // distinct (tokens, heads) inputs
  for (size_t i = 0; i < spec.in_tokens.size(); ++i)
    ins.insert({spec.in_tokens[i], spec.in_heads[i].begin, spec.in_heads[i].end});
  for (size_t j = 0; j < spec.out_tokens.size(); ++j) {
    const HeadRange oh = spec.out_heads[j];
    std::vector<int32_t> hb{oh.begin, oh.end};
    for (auto [t, b, e] : ins) {
      if (b > oh.begin && b < oh.end) hb.push_back(b);
      if (e > oh.begin && e < oh.end) hb.push_back(e);
    }
    std::sort(hb.begin(), hb.end());
    hb.erase(std::unique(hb.begin(), hb.end()), hb.end());
    for (size_t s = 0; s + 1 < hb.size(); ++s) {
      TokenSet covered;
      for (auto [t, b, e] : ins)
        if (b <= hb[s] && e >= hb[s + 1]) covered.insert(covered.end(), norm[size_t(t)].begin(), norm[size_t(t)].end());
      if (!is_subset(norm[size_t(spec.out_tokens[j])], normalize(covered)))
        return fmt::format("reduce-scatter output of member {} (heads [{}, {})) is not covered by the inputs", j, hb[s],
                           hb[s + 1]);
    }
  }
  return "";
}

}  // namespace

std::string collective_spec_problem(const CollectiveSpec& spec, const TokenSetPool& pool,
                                    const std::vector<TokenSet>& normalized) {
  const FieldMask all = FieldMask((1u << kNumFields) - 1);
  if (spec.fields == 0 || (spec.fields & ~all) != 0) return "no or unknown fields";
  const FieldMask olse = field_bit(Field::O) | field_bit(Field::Lse);
  if (spec.reduction == Reduction::LseMerge && spec.fields != olse)
    return "an LSE merge needs exactly the fields O|Lse, not " + fields_to_string(spec.fields);
  if (spec.kind == OpKind::AllGather) return gather_problem(spec, pool);
  if (spec.kind == OpKind::AllToAll) return all_to_all_problem(spec, pool, normalized);
  return reduce_problem(spec, normalized);
}

namespace {

// The distinct box boundaries of one axis (plus 0 and the extent) and the index of each. Axes up
// to kDenseExtent positions use a presence map and a direct lookup table; longer ones sort.
class Axis {
 public:
  static constexpr int64_t kDenseExtent = int64_t(1) << 26;

  Axis(const std::vector<Box>& boxes, size_t axis, int64_t extent) : dense_(extent <= kDenseExtent) {
    if (dense_) {
      std::vector<uint8_t> present(size_t(extent) + 1, 0);
      present[0] = present[size_t(extent)] = 1;
      for (const Box& box : boxes)
        present[size_t(box.lo[axis])] = present[size_t(box.hi[axis])] = 1;
      index_.assign(size_t(extent) + 1, -1);
      for (int64_t x = 0; x <= extent; ++x)
        if (present[size_t(x)]) index_[size_t(x)] = int32_t(bounds_.size()), bounds_.push_back(x);
      return;
    }
    bounds_ = {0, extent};
    for (const Box& box : boxes)
      bounds_.insert(bounds_.end(), {box.lo[axis], box.hi[axis]});
    std::sort(bounds_.begin(), bounds_.end());
    bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  }
  size_t size() const { return bounds_.size(); }
  int64_t operator[](size_t i) const { return bounds_[i]; }
  size_t index_of(int64_t x) const {
    if (dense_) return size_t(index_[size_t(x)]);
    return size_t(std::lower_bound(bounds_.begin(), bounds_.end(), x) - bounds_.begin());
  }

 private:
  bool dense_;
  std::vector<int64_t> bounds_;
  std::vector<int32_t> index_;
};

}  // namespace

void count_cover(const std::vector<Box>& boxes, const std::array<int64_t, 3>& extent,
                 const std::function<void(const GridCell&)>& visit) {
  const std::array<Axis, 3> b = {Axis(boxes, 0, extent[0]), Axis(boxes, 1, extent[1]), Axis(boxes, 2, extent[2])};
  const size_t n0 = b[0].size(), n1 = b[1].size(), n2 = b[2].size();
  std::vector<int32_t> diff(n0 * n1 * n2, 0);
  auto at = [&](size_t i, size_t j, size_t k) -> int32_t& { return diff[(i * n1 + j) * n2 + k]; };
  for (const Box& box : boxes) {
    size_t lo[3], hi[3];
    for (size_t a = 0; a < 3; ++a)
      lo[a] = b[a].index_of(box.lo[a]), hi[a] = b[a].index_of(box.hi[a]);
    for (int c = 0; c < 8; ++c)
      at((c & 1) ? hi[0] : lo[0], (c & 2) ? hi[1] : lo[1], (c & 4) ? hi[2] : lo[2]) +=
          (__builtin_popcount(c) & 1) ? -1 : 1;
  }
  // One prefix-sum pass per axis turns corner marks into per-cell counts.
  for (size_t i = 1; i < n0; ++i)
    for (size_t x = 0; x < n1 * n2; ++x)
      diff[i * n1 * n2 + x] += diff[(i - 1) * n1 * n2 + x];
  for (size_t i = 0; i < n0; ++i)
    for (size_t j = 1; j < n1; ++j)
      for (size_t k = 0; k < n2; ++k)
        at(i, j, k) += at(i, j - 1, k);
  for (size_t i = 0; i < n0; ++i)
    for (size_t j = 0; j < n1; ++j)
      for (size_t k = 1; k < n2; ++k)
        at(i, j, k) += at(i, j, k - 1);
  GridCell cell;
  for (size_t i = 0; i + 1 < n0; ++i)
    for (size_t j = 0; j + 1 < n1; ++j)
      for (size_t k = 0; k + 1 < n2; ++k) {
        cell.lo = {b[0][i], b[1][j], b[2][k]};
        cell.hi = {b[0][i + 1], b[1][j + 1], b[2][k + 1]};
        cell.count = at(i, j, k);
        visit(cell);
      }
}

namespace {

// Successor lists (stream order and explicit dependencies) in compressed form, plus the number
// of unfinished predecessors of each op. Global op ids fit 32 bits (checked by the caller).
struct Graph {
  std::vector<uint32_t> begin, succ;
  std::vector<int32_t> pending;
};

template <typename Visit>
void for_each_edge(const Schedule& schedule, const std::vector<int64_t>& offset, Visit&& visit) {
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    const RankProgram& prog = schedule.ranks[r];
    const auto base = uint32_t(offset[r]);
    OpPerStream last = no_op_on_any_stream();
    for (int32_t i = 0; i < int32_t(prog.ops.size()); ++i) {
      const Op& op = prog.ops[size_t(i)];
      int32_t& prev = last[size_t(op.stream)];
      if (prev >= 0) visit(base + uint32_t(prev), base + uint32_t(i));
      prev = i;
      for (const int32_t* d = prog.deps_begin(op); d != prog.deps_end(op); ++d)
        visit(base + uint32_t(*d), base + uint32_t(i));
    }
  }
}

Graph build_graph(const Schedule& schedule, const std::vector<int64_t>& offset) {
  const size_t total = size_t(offset.back());
  Graph g;
  g.begin.assign(total + 1, 0);
  g.pending.assign(total, 0);
  for_each_edge(schedule, offset, [&](uint32_t from, uint32_t to) { ++g.begin[from + 1], ++g.pending[to]; });
  for (size_t x = 0; x < total; ++x)
    g.begin[x + 1] += g.begin[x];
  g.succ.resize(g.begin[total]);
  std::vector<uint32_t> fill(g.begin.begin(), g.begin.end() - 1);
  for_each_edge(schedule, offset, [&](uint32_t from, uint32_t to) { g.succ[fill[from]++] = to; });
  return g;
}

}  // namespace

std::vector<BlockedOp> run_blocking(const Schedule& schedule, const Rendezvous& rv,
                                    std::vector<int32_t>& started_members) {
  const std::vector<int64_t>& offset = rv.offset;
  const size_t total = size_t(offset.back());
  WF_ASSERT(total < size_t(UINT32_MAX), "op ids of the execution graph must fit 32 bits");
  Graph g = build_graph(schedule, offset);
  std::vector<OpKind> kind(total);
  for (size_t r = 0; r < schedule.ranks.size(); ++r)
    for (size_t i = 0; i < schedule.ranks[r].ops.size(); ++i)
      kind[size_t(offset[r]) + i] = schedule.ranks[r].ops[i].kind;
  std::vector<uint8_t> started(total, 0), done(total, 0);
  started_members.assign(rv.instances.size(), 0);
  std::vector<int64_t> ready, finished;
  for (size_t x = 0; x < total; ++x)
    if (g.pending[x] == 0) ready.push_back(int64_t(x));
  auto complete = [&](int64_t x) { done[size_t(x)] = 1, finished.push_back(x); };
  while (!ready.empty() || !finished.empty()) {
    if (!finished.empty()) {  // release successors first: keeps the ready list short
      int64_t x = finished.back();
      finished.pop_back();
      for (uint32_t e = g.begin[size_t(x)]; e < g.begin[size_t(x) + 1]; ++e)
        if (--g.pending[g.succ[e]] == 0) ready.push_back(g.succ[e]);
      continue;
    }
    int64_t x = ready.back();
    ready.pop_back();
    started[size_t(x)] = 1;
    if (kind[size_t(x)] == OpKind::Send || kind[size_t(x)] == OpKind::Recv) {
      int64_t p = rv.partner[size_t(x)];
      if (p >= 0 && started[size_t(p)]) complete(x), complete(p);
    } else if (is_collective(kind[size_t(x)])) {
      int32_t inst = rv.instance_of[size_t(x)];
      if (++started_members[size_t(inst)] == int32_t(rv.instances[size_t(inst)].size()))
        for (int64_t m : rv.instances[size_t(inst)])
          complete(m);
    } else {
      complete(x);
    }
  }
  std::vector<BlockedOp> blocked;
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    std::array<bool, kNumStreams> seen{};
    for (int32_t i = 0; i < int32_t(schedule.ranks[r].ops.size()); ++i) {
      size_t x = size_t(offset[r] + i);
      size_t s = size_t(schedule.ranks[r].ops[size_t(i)].stream);
      if (done[x] || seen[s]) continue;
      seen[s] = true;
      blocked.push_back({int(r), i, started[x] != 0});
    }
  }
  return blocked;
}

}  // namespace wallfacer::detail::check
