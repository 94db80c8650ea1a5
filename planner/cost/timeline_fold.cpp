// Folding chains of collectives (timeline_fold.hpp).
#include "timeline_fold.hpp"

#include <algorithm>

#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::detail {
namespace {

constexpr int32_t kNotCollective = -2;

// The group of a collective that may meet (-1: none), or kNotCollective.
int32_t collective_group(const ProgramView& program, const Op& op) {
  if (!is_collective(op.kind) || !is_collective_stream(op.stream) || op.coll < 0) return kNotCollective;
  return program.program().collectives[size_t(op.coll)].group;
}

bool depends_on(const ProgramView& program, size_t op, int32_t target) {
  return std::find(program.deps_begin(op), program.deps_end(op), target) != program.deps_end(op);
}

// Whether op b may absorb op a, the op before it on its stream, whose chain begins at `head`.
bool absorbs(const ProgramView& program, size_t a, size_t b, size_t head, const std::vector<uint8_t>& has_dependent) {
  const Op &x = program.op(a), &y = program.op(b);
  const int32_t group = collective_group(program, x);
  if (group == kNotCollective || group != collective_group(program, y) || x.phase != y.phase || has_dependent[a])
    return false;
  for (const int32_t* d = program.deps_begin(b); d != program.deps_end(b); ++d)
    if (*d != int32_t(a) && !depends_on(program, head, *d)) return false;
  return true;
}

}  // namespace

std::shared_ptr<const FoldedOps> fold_collective_chains(const ProgramView& program) {
  if (!program.flat()) return nullptr;
  const size_t n = program.size();
  std::vector<uint8_t> has_dependent(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (const int32_t* d = program.deps_begin(i); d != program.deps_end(i); ++d)
      has_dependent[size_t(*d)] = 1;
  std::vector<int32_t> into(n, -1);  // by op: the op it folds into
  std::vector<uint32_t> head(n);     // by op: the first op of its chain (itself without one)
  int32_t last[kNumStreams];
  std::fill(std::begin(last), std::end(last), -1);
  size_t folded = 0;
  for (size_t b = 0; b < n; ++b) {
    head[b] = uint32_t(b);
    int32_t& a = last[size_t(program.op(b).stream)];
    if (a >= 0 && absorbs(program, size_t(a), b, head[size_t(a)], has_dependent)) {
      into[size_t(a)] = int32_t(b);
      head[b] = head[size_t(a)];
      ++folded;
    }
    a = int32_t(b);
  }
  if (folded == 0) return nullptr;
  auto out = std::make_shared<FoldedOps>();
  out->unfolded_size = n;
  std::vector<int32_t> at(n, -1);  // by op: its kept index
  out->kept.reserve(n - folded);
  for (size_t i = 0; i < n; ++i)
    if (into[i] < 0) {
      at[i] = int32_t(out->kept.size());
      out->kept.push_back(uint32_t(i));
    }
  FlatStep& flat = out->flat;
  flat.origin.reserve(out->kept.size());
  flat.dep_begin.reserve(out->kept.size() + 1);
  flat.dep_begin.push_back(0);
  out->chain_begin.reserve(out->kept.size() + 1);
  out->chain_begin.push_back(0);
  out->chain.reserve(folded);
  for (const uint32_t b : out->kept) {
    flat.origin.push_back(program.origin(b));
    // A folded op has no dependents, so every dependency is a kept op.
    const size_t first = head[b];
    for (const int32_t* d = program.deps_begin(first); d != program.deps_end(first); ++d)
      flat.deps.push_back(at[size_t(*d)]);
    flat.dep_begin.push_back(uint32_t(flat.deps.size()));
    for (size_t op = first; op != b; op = size_t(into[op]))
      out->chain.push_back(uint32_t(op));
    out->chain_begin.push_back(uint32_t(out->chain.size()));
  }
  return out;
}

bool folds_alike(const ProgramView& a, const ProgramView& b) {
  if (!a.flat() || !b.flat() || !a.same_flat(b)) return false;
  const std::vector<Op>&x = a.program().ops, &y = b.program().ops;
  if (x.size() != y.size()) return false;
  std::vector<int32_t> to, from;  // group of a -> group of b and back, plus one (0: not seen yet)
  auto same_grouping = [&](int32_t g, int32_t h) {
    if (g == kNotCollective || h == kNotCollective) return g == h;
    if (g < 0 || h < 0) return g == h;
    if (size_t(g) >= to.size()) to.resize(size_t(g) + 1, 0);
    if (size_t(h) >= from.size()) from.resize(size_t(h) + 1, 0);
    if (to[size_t(g)] == 0 && from[size_t(h)] == 0) to[size_t(g)] = h + 1, from[size_t(h)] = g + 1;
    return to[size_t(g)] == h + 1 && from[size_t(h)] == g + 1;
  };
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].stream != y[i].stream || x[i].phase != y[i].phase ||
        !same_grouping(collective_group(a, x[i]), collective_group(b, y[i])))
      return false;
  return true;
}

}  // namespace wallfacer::detail
