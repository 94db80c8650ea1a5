// Building a timeline shape (timeline.hpp): each program's waiting order, its folded chains of
// collectives and whom its ops meet. Running one is timeline_run.cpp.
#include "timeline_shape.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include <wallfacer/core/log.hpp>
#include <wallfacer/schedule/per_stream.hpp>

namespace wallfacer::detail {
namespace {

// Dense ids of meeting keys (three numbers), numbered in order of first appearance.
class KeyIds {
 public:
  uint32_t of(int32_t a, int32_t b, int32_t c) {
    const std::pair<uint64_t, uint64_t> key{uint64_t(uint32_t(a)) << 32 | uint32_t(b), uint64_t(uint32_t(c))};
    return ids_.try_emplace(key, uint32_t(ids_.size())).first->second;
  }
  uint32_t count() const { return uint32_t(ids_.size()); }

 private:
  struct KeyHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& k) const {
      return size_t((k.first * 0x9E3779B97F4A7C15ull) ^ (k.second + 0x632BE59BD9B4E019ull + (k.first << 6)));
    }
  };
  std::unordered_map<std::pair<uint64_t, uint64_t>, uint32_t, KeyHash> ids_;
};

}  // namespace

namespace {

std::shared_ptr<const TimelineShape::Impl::Order> order_of(const ProgramView& program) {
  using Impl = TimelineShape::Impl;
  const size_t n = program.size();
  auto l = std::make_shared<Impl::Order>();
  l->waiting.assign(n, 0);
  l->next.assign(n, -1);
  l->first_dependent.assign(n + 1, 0);
  l->kind.assign(n, 0);
  OpPerStream last = no_op_on_any_stream();
  for (size_t i = 0; i < n; ++i) {
    const Op& op = program.op(i);
    l->kind[i] = uint8_t((op.stream == Stream::Compute ? Impl::kCompute : 0) |
                         (op.phase == Phase::Forward ? Impl::kForward : 0));
    int32_t& previous = last[size_t(op.stream)];
    if (previous >= 0) {
      l->next[size_t(previous)] = int32_t(i);
      ++l->waiting[i];
    }
    previous = int32_t(i);
    l->waiting[i] += int32_t(program.deps_end(i) - program.deps_begin(i));
    for (const int32_t* d = program.deps_begin(i); d != program.deps_end(i); ++d)
      ++l->first_dependent[size_t(*d) + 1];
  }
  for (size_t i = 0; i < n; ++i)
    l->first_dependent[i + 1] += l->first_dependent[i];
  l->dependents.resize(l->first_dependent[n]);
  std::vector<uint32_t> fill(l->first_dependent.begin(), l->first_dependent.end() - 1);
  for (size_t i = 0; i < n; ++i)
    for (const int32_t* d = program.deps_begin(i); d != program.deps_end(i); ++d)
      l->dependents[fill[size_t(*d)]++] = int32_t(i);
  return l;
}

}  // namespace

bool same_order(const ProgramView& a, const ProgramView& b) {
  if (!a.flat() || !b.flat() || !a.same_flat(b)) return false;
  const std::vector<Op>&x = a.program().ops, &y = b.program().ops;
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].stream != y[i].stream || x[i].phase != y[i].phase) return false;
  return true;
}

struct OrderLibrary::Impl {
  // Every program's folding seen (null: nothing folds), kept whatever the budget, since the
  // orders and pairings below may be of the folded programs.
  std::vector<std::pair<ProgramView, std::shared_ptr<const FoldedOps>>> folds;
  std::vector<std::pair<ProgramView, std::shared_ptr<const TimelineShape::Impl::Order>>> orders;
  std::vector<std::pair<ProgramView, std::shared_ptr<TimelineShape::Impl::Pairs>>> lone_pairs;
  size_t budget_bytes = 0, bytes = 0;
  // Whether `more` bytes may be kept: past the budget new entries are not kept (an order or a
  // pairing not found is derived again, so this bounds memory, not results).
  bool room_for(size_t more) {
    if (bytes + more > budget_bytes) return false;
    bytes += more;
    return true;
  }
};

OrderLibrary::OrderLibrary(size_t budget_bytes) : impl_(new Impl) {
  impl_->budget_bytes = budget_bytes;
}
OrderLibrary::~OrderLibrary() = default;

// Folds each program's chains of collectives (timeline_fold.hpp), once per way of folding: the
// programs of a step mostly fold alike, and so do a sample's columns (through the library).
void TimelineShape::Impl::fold_programs(OrderLibrary::Impl* library) {
  std::vector<std::pair<ProgramView, std::shared_ptr<const FoldedOps>>> own;
  auto& seen = library ? library->folds : own;  // the library keeps them past this shape
  for (const ProgramView& program : unfolded) {
    if (!program.flat()) {  // only a step's flat programs fold (and a plan's every rank may be many)
      folds.push_back(nullptr);
      programs.push_back(program);
      continue;
    }
    const auto alike =
        std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return folds_alike(s.first, program); });
    std::shared_ptr<const FoldedOps> fold;
    if (alike != seen.end()) {
      fold = alike->second;
    } else {
      fold = fold_collective_chains(program);
      seen.emplace_back(program, fold);
      // Kept past the library's budget too: the orders and pairings it keeps may point at it.
      if (library)
        library->bytes += fold ? 4 * (3 * fold->kept.size() + fold->flat.deps.size() + fold->chain.size()) : 0;
    }
    folds.push_back(fold);
    programs.push_back(fold ? ProgramView(program.program(), fold->flat) : program);
  }
}

void TimelineShape::Impl::add_lanes(const ProgramView& program, OrderLibrary::Impl* library) {
  Lanes& l = lanes.emplace_back();
  for (size_t q : order_owners)
    if (same_order(programs[q], program)) {
      l.order = lanes[q].order;
      break;
    }
  if (!l.order) {
    order_owners.push_back(lanes.size() - 1);
    for (size_t q = 0; library && !l.order && q < library->orders.size(); ++q)
      if (same_order(library->orders[q].first, program)) l.order = library->orders[q].second;
  }
  if (!l.order) {
    l.order = order_of(program);
    const Order& o = *l.order;
    const size_t bytes =
        4 * (o.waiting.size() + o.next.size() + o.first_dependent.size() + o.dependents.size()) + o.kind.size();
    if (library && library->room_for(bytes)) library->orders.emplace_back(program, l.order);
  }
}

namespace {

// Whether a lone program of a sample pairs its ops as `seen` did (pair_symmetric pairs a program's
// message ends by their tags alone): the same flat order, template ops of the same kinds, messages
// of the same tags, and no pipeline stage message, whose pairing needs the rest of its column.
bool pairs_alike(const ProgramView& seen, const ProgramView& program) {
  if (!seen.flat() || !program.flat() || !seen.same_flat(program)) return false;
  const std::vector<Op>&x = seen.program().ops, &y = program.program().ops;
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].kind != y[i].kind) return false;
    if (is_message(x[i]) && (x[i].tag != y[i].tag || is_stage_message(x[i]) || is_stage_message(y[i]))) return false;
  }
  return true;
}

// What lone_bounds reads of a template op, by template op: the copies share it.
struct LoneBrief {
  Stream stream = Stream::Compute;
  bool forward = true;
  bool send = false;
  int32_t tag = -1;  // dense id of a message's tag, -1 for other ops
};

// The phases of the ends of one tag and kind (sends or receives), in program order, while they
// run forward ops first: `forward` of the first `total` are forward.
struct TagEnds {
  uint32_t forward = 0, total = 0;
  bool ordered = true;  // no forward end after a backward one
  void add(bool is_forward) {
    if (is_forward && forward != total) ordered = false;
    forward += is_forward;
    ++total;
  }
};

// Whether the k-th send of each tag has the phase of its k-th receive, for every k both have
// (the pairing of pair_symmetric), by walking the program's messages again.
bool messages_pair_by_phase(const ProgramView& program, const std::vector<LoneBrief>& brief, size_t tags) {
  std::vector<std::vector<bool>> send_forward(tags), recv_forward(tags);
  for (size_t i = 0; i < program.size(); ++i)
    if (const LoneBrief& b = brief[program.origin(i)]; b.tag >= 0)
      (b.send ? send_forward : recv_forward)[size_t(b.tag)].push_back(b.forward);
  for (size_t t = 0; t < tags; ++t) {
    const size_t pairs = std::min(send_forward[t].size(), recv_forward[t].size());
    if (!std::equal(send_forward[t].begin(), send_forward[t].begin() + std::ptrdiff_t(pairs), recv_forward[t].begin()))
      return false;
  }
  return true;
}

}  // namespace

std::optional<LoneBounds> lone_bounds(const ProgramView& program, const std::vector<double>& duration) {
  if (!program.flat()) return std::nullopt;
  const std::vector<Op>& ops = program.program().ops;
  // Message ends pair by tag alone (pair_symmetric): the k-th send of a tag with its k-th receive,
  // in program order. Tags numbered densely by template op.
  std::vector<LoneBrief> brief(ops.size());
  std::unordered_map<int32_t, int32_t> tag_ids;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!(duration[i] >= 0)) return std::nullopt;
    brief[i] = {ops[i].stream, ops[i].phase == Phase::Forward, ops[i].kind == OpKind::Send, -1};
    if (!is_message(ops[i])) continue;
    if (is_stage_message(ops[i])) return std::nullopt;
    brief[i].tag = tag_ids.try_emplace(ops[i].tag, int32_t(tag_ids.size())).first->second;
  }
  LoneBounds bounds;
  double forward_sum = 0;
  bool forward_first = true;  // no forward op waits for or meets an op of the backward
  std::array<bool, kNumStreams> backward_seen{};
  std::vector<TagEnds> sends(tag_ids.size()), receives(tag_ids.size());
  for (size_t i = 0; i < program.size(); ++i) {
    const uint32_t o = program.origin(i);
    const LoneBrief& b = brief[o];
    const double seconds = duration[o];
    bounds.end_s += seconds;
    if (b.stream == Stream::Compute) (b.forward ? bounds.compute_forward_s : bounds.compute_backward_s) += seconds;
    if (b.tag >= 0) (b.send ? sends : receives)[size_t(b.tag)].add(b.forward);
    if (!b.forward) {
      backward_seen[size_t(b.stream)] = true;
      continue;
    }
    forward_sum += seconds;
    if (backward_seen[size_t(b.stream)]) forward_first = false;
    for (const int32_t* d = program.deps_begin(i); d != program.deps_end(i); ++d)
      if (!brief[program.origin(size_t(*d))].forward) forward_first = false;
  }
  // Ends of a tag that run forward first pair by phase when as many of the pairs are forward on
  // both sides; the others are compared one by one.
  bool ordered = true;
  for (size_t t = 0; t < sends.size() && forward_first; ++t) {
    ordered = ordered && sends[t].ordered && receives[t].ordered;
    const uint32_t pairs = std::min(sends[t].total, receives[t].total);
    if (sends[t].ordered && receives[t].ordered)
      forward_first = std::min(sends[t].forward, pairs) == std::min(receives[t].forward, pairs);
  }
  if (forward_first && !ordered) forward_first = messages_pair_by_phase(program, brief, tag_ids.size());
  bounds.forward_end_s = forward_first ? forward_sum : bounds.end_s;
  return bounds;
}

bool times_alike(const ProgramView& a, const ProgramView& b) {
  return same_order(a, b) && pairs_alike(a, b);
}

bool TimelineShape::Impl::pair_lone_from(const OrderLibrary::Impl* library) {
  if (library == nullptr || programs.size() != 1) return false;
  for (const auto& [seen, pairs] : library->lone_pairs)
    if (pairs_alike(seen, programs.front())) {
      lanes.front().pairs = pairs;
      return true;
    }
  return false;
}

void TimelineShape::Impl::keep_lone_pairs(OrderLibrary::Impl* library) const {
  if (library == nullptr || programs.size() != 1 || !programs.front().flat() || !meet_ops.empty()) return;
  for (const Op& op : programs.front().program().ops)
    if (is_message(op) && is_stage_message(op)) return;
  const Pairs* pairs = lanes.front().pairs.get();  // null: nothing meets
  const size_t bytes = pairs ? pairs->meet.size() * sizeof(int32_t) + pairs->partner.size() * sizeof(OpRef) : 0;
  if (library->room_for(bytes)) library->lone_pairs.emplace_back(programs.front(), lanes.front().pairs);
}

// The message ends of every program: `key(op, rank, program index)` gives (a, b, c, side) for an
// end and side -1 for any other op. Each end gets the dense id of its key, numbered in order of
// first appearance, program by program, op by op; the copies of one template op in a flat program
// share its key, found once.
class MessageKeys {
 public:
  template <typename Key>
  MessageKeys(const std::vector<ProgramView>& programs, Key&& key) : programs_(programs), memo_(programs.size()) {
    KeyIds ids;
    for (size_t p = 0; p < programs.size(); ++p) {
      const ProgramView& program = programs[p];
      memo_[p].assign(program.flat() ? program.program().ops.size() : program.size(), kUnknown);
      for (size_t i = 0; i < program.size(); ++i) {
        int64_t& known = memo_[p][program.flat() ? program.origin(i) : i];
        if (known != kUnknown) continue;
        const std::array<int32_t, 4> k = key(program.op(i), program.rank(), int32_t(p));
        known = k[3] < 0 ? kNone : int64_t(ids.of(k[0], k[1], k[2])) << 1 | k[3];
      }
    }
    count_ = ids.count();
  }
  uint32_t count() const { return count_; }
  // Calls visit(ref, id, send) for every end, program by program, op by op.
  template <typename Visit>
  void for_each_end(Visit&& visit) const {
    for (size_t p = 0; p < programs_.size(); ++p) {
      const ProgramView& program = programs_[p];
      const std::vector<int64_t>& memo = memo_[p];
      for (size_t i = 0; i < program.size(); ++i) {
        const int64_t found = memo[program.flat() ? program.origin(i) : i];
        if (found != kNone) visit(OpRef{int32_t(p), int32_t(i)}, uint32_t(found >> 1), (found & 1) == 0);
      }
    }
  }

 private:
  static constexpr int64_t kUnknown = -2, kNone = -1;
  const std::vector<ProgramView>& programs_;
  std::vector<std::vector<int64_t>> memo_;  // by program, by template op or op: id << 1 | side, or kNone
  uint32_t count_ = 0;
};

// Pairs the k-th send of each key with its k-th receive, in the order the ends are listed
// (program by program, op by op: each program's order). Two passes over the ends, counting then
// placing, instead of a list of every end: a step has millions, and a list of them was fresh
// memory, zeroed page by page, on every pricing.
void TimelineShape::Impl::pair_messages(const MessageKeys& ends) {
  const uint32_t keys = ends.count();
  // Counting sort by key, sends then receives, stable.
  std::vector<uint32_t> sends(keys + 1, 0), recvs(keys + 1, 0);
  ends.for_each_end([&](OpRef, uint32_t id, bool send) { ++(send ? sends : recvs)[id + 1]; });
  for (uint32_t k = 0; k < keys; ++k)
    sends[k + 1] += sends[k], recvs[k + 1] += recvs[k];
  std::vector<OpRef> send_refs(sends[keys]), recv_refs(recvs[keys]);
  std::vector<uint32_t> send_fill(sends.begin(), sends.end() - 1), recv_fill(recvs.begin(), recvs.end() - 1);
  ends.for_each_end([&](OpRef ref, uint32_t id, bool send) {
    if (send)
      send_refs[send_fill[id]++] = ref;
    else
      recv_refs[recv_fill[id]++] = ref;
  });
  for (uint32_t k = 0; k < keys; ++k) {
    const uint32_t pairs = std::min(sends[k + 1] - sends[k], recvs[k + 1] - recvs[k]);
    for (uint32_t j = 0; j < pairs; ++j) {
      const OpRef pair[2] = {send_refs[sends[k] + j], recv_refs[recvs[k] + j]};
      add_meet(pair, pair + 2);
    }
  }
}

// A message's ends have the same (source rank, destination rank, tag). `stage_only`: only
// pipeline stage messages, whose ends always meet for real (a sample times whole pipeline
// columns), whatever the mode for the strategy's messages.
void TimelineShape::Impl::pair_matched(bool stage_only) {
  pair_messages(MessageKeys(programs, [stage_only](const Op& op, int32_t rank, int32_t) -> std::array<int32_t, 4> {
    if (stage_only && !is_stage_message(op)) return {0, 0, 0, -1};
    if (op.kind == OpKind::Send) return {rank, op.peer, op.tag, 0};
    if (op.kind == OpKind::Recv) return {op.peer, rank, op.tag, 1};
    return {0, 0, 0, -1};
  }));
}

// Both ends on the timed rank: its send and its receive of the same tag.
void TimelineShape::Impl::pair_symmetric() {
  pair_messages(MessageKeys(programs, [](const Op& op, int32_t, int32_t p) -> std::array<int32_t, 4> {
    if ((op.kind != OpKind::Send && op.kind != OpKind::Recv) || is_stage_message(op)) return {0, 0, 0, -1};
    return {p, op.tag, 0, op.kind == OpKind::Send ? 0 : 1};
  }));
}

// The k-th collective a rank runs on a group meets the k-th of every other member (only when
// every member is timed). Group indices are dense (Plan::groups), so the meeting of (group, k) is
// found by counting, not hashing: a step holds millions of collective copies.
void TimelineShape::Impl::meet_collectives() {
  struct Member {
    OpRef ref;
    int32_t group, k;
  };
  std::vector<Member> ops;
  std::vector<int32_t> seen, most;  // by group: collectives of it so far in this program; most in any
  for (size_t p = 0; p < programs.size(); ++p) {
    std::fill(seen.begin(), seen.end(), 0);
    for (size_t i = 0; i < programs[p].size(); ++i) {
      const Op& op = programs[p].op(i);
      if (!is_collective_stream(op.stream) || op.coll < 0) continue;
      const int32_t group = programs[p].program().collectives[size_t(op.coll)].group;
      if (group < 0) continue;  // no group: nobody to meet
      if (size_t(group) >= seen.size()) seen.resize(size_t(group) + 1, 0), most.resize(size_t(group) + 1, 0);
      const int32_t k = seen[size_t(group)]++;
      most[size_t(group)] = std::max(most[size_t(group)], k + 1);
      ops.push_back({OpRef{int32_t(p), int32_t(i)}, group, k});
    }
  }
  // Key of (group, k): the groups' ranges one after another.
  std::vector<uint32_t> first_key(most.size() + 1, 0);
  for (size_t g = 0; g < most.size(); ++g)
    first_key[g + 1] = first_key[g] + uint32_t(most[g]);
  const uint32_t keys = first_key.back();
  std::vector<uint32_t> begin(keys + 1, 0);
  for (const Member& m : ops)
    ++begin[first_key[size_t(m.group)] + uint32_t(m.k) + 1];
  for (uint32_t k = 0; k < keys; ++k)
    begin[k + 1] += begin[k];
  std::vector<OpRef> members(ops.size());
  std::vector<uint32_t> fill(begin.begin(), begin.end() - 1);
  for (const Member& m : ops)
    members[fill[first_key[size_t(m.group)] + uint32_t(m.k)]++] = m.ref;
  // Meetings in order of first appearance, as the hashed numbering had them: the order of the
  // meetings does not change any time, but keeps the shape's layout as it was.
  std::vector<uint32_t> order;
  order.reserve(keys);
  std::vector<uint8_t> listed(keys, 0);
  for (const Member& m : ops) {
    const uint32_t key = first_key[size_t(m.group)] + uint32_t(m.k);
    if (!listed[key]) listed[key] = 1, order.push_back(key);
  }
  meet_ops.reserve(meet_ops.size() + members.size());
  meet_begin.reserve(meet_begin.size() + keys);
  for (uint32_t k : order) {
    if (begin[k + 1] - begin[k] <= 1) continue;
    // Members meet op by op in the unfolded programs: the chains folded into their ops must match.
    for (uint32_t m = begin[k] + 1; m < begin[k + 1]; ++m)
      if (chain_size(members[m]) != chain_size(members[begin[k]])) misaligned = true;
    add_meet(members.data() + begin[k], members.data() + begin[k + 1]);
  }
}

namespace {

std::vector<ProgramView> views_of(const std::vector<const RankProgram*>& programs) {
  std::vector<ProgramView> views;
  views.reserve(programs.size());
  for (const RankProgram* program : programs)
    views.emplace_back(*program);
  return views;
}

}  // namespace

TimelineShape::TimelineShape(const std::vector<const RankProgram*>& programs, PairMode mode)
    : TimelineShape(views_of(programs), mode) {}

void TimelineShape::Impl::build(std::vector<ProgramView> given, PairMode pairing, OrderLibrary::Impl* library,
                                bool fold) {
  mode = pairing;
  unfolded = std::move(given);
  // Only where collectives meet does a chain cost much unfolded: each of its ops is then a meeting
  // of the group's members. Alone, folding costs about what it saves.
  if (fold && mode == PairMode::Matched) {
    fold_programs(library);
  } else {
    programs = unfolded;
    folds.assign(unfolded.size(), nullptr);
  }
  lanes.reserve(programs.size());
  for (const ProgramView& program : programs)
    add_lanes(program, library);
  if (mode == PairMode::Symmetric && pair_lone_from(library)) return;
  if (mode == PairMode::Matched) {
    pair_matched(false);
    meet_collectives();
  } else if (mode == PairMode::Symmetric) {
    pair_symmetric();
    pair_matched(true);
    keep_lone_pairs(library);
  } else if (mode == PairMode::StagesOnly) {
    pair_matched(true);
  }
}

TimelineShape::TimelineShape(std::vector<ProgramView> programs, PairMode mode, OrderLibrary* library)
    : TimelineShape(std::move(programs), mode, library, true) {}

TimelineShape::TimelineShape(std::vector<ProgramView> programs, PairMode mode, OrderLibrary* library, bool fold)
    : impl_(new Impl) {
  OrderLibrary::Impl* kept = library ? library->impl_.get() : nullptr;
  impl_->build(programs, mode, kept, fold);
  if (!impl_->misaligned) return;
  // Members that folded different chains would meet other ops than unfolded: time them unfolded.
  impl_ = std::make_unique<Impl>();
  impl_->build(std::move(programs), mode, kept, false);
}

TimelineShape::~TimelineShape() = default;
TimelineShape::TimelineShape(TimelineShape&&) noexcept = default;
TimelineShape& TimelineShape::operator=(TimelineShape&&) noexcept = default;

size_t TimelineShape::size() const {
  return impl_->programs.size();
}

const ProgramView& TimelineShape::program(size_t p) const {
  return impl_->unfolded[p];
}

}  // namespace wallfacer::detail
