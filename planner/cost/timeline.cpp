// List schedule of rank programs with paired message ends (timeline.hpp).
#include "timeline.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include <wallfacer/core/log.hpp>
#include <wallfacer/schedule/per_stream.hpp>
#include "timeline_fold.hpp"

namespace wallfacer::detail {
namespace {

constexpr double kNotStarted = -1;

struct OpRef {
  int32_t program = -1;
  int32_t op = -1;
};

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

class MessageKeys;

}  // namespace

// What each op waits for. An op is *posted* once its stream predecessor and its dependencies have
// started (their ends are then known, durations being fixed); it starts when posted, or, when it
// meets other ops (the two ends of a message, the members' ops of one collective), when all of
// them are posted.
struct TimelineShape::Impl {
  // What a program's ops wait for on their own rank: built from its ops' streams, phases and
  // dependencies, and shared by the programs that have the same (a step's ranks mostly share a few
  // unrolled orders, see same_unrolled_order).
  struct Order {
    std::vector<int32_t> waiting;           // by op: predecessors it waits for
    std::vector<int32_t> next;              // by op: the next op of its stream, -1 at the end
    std::vector<uint32_t> first_dependent;  // CSR over `dependents`, by op
    std::vector<int32_t> dependents;        // ops naming this one as a dependency
    std::vector<uint8_t> kind;              // by op: kCompute | kForward (what the totals read)
  };
  // Whom a program's ops meet. Written while the shape pairs its programs, then only read, so a
  // lone program of a sample shares it with the programs that pair alike (OrderLibrary). Made for
  // a program when the first of its ops meets another: none (a null record) means every op starts
  // alone, as in a bound's programs without pipeline stages, which need no record per op.
  struct Pairs {
    std::vector<int32_t> meet;   // by op: its meeting, kAlone or kPaired
    std::vector<OpRef> partner;  // by op: the other end of its pair (kPaired)
  };
  struct Lanes {
    std::shared_ptr<const Order> order;
    std::shared_ptr<Pairs> pairs;
  };
  static constexpr uint8_t kCompute = 1, kForward = 2;
  // Pairs::meet of an op that starts alone, and of one of two ops that meet (most are message
  // ends): a pair is kept in the ops themselves rather than as a meeting, so that a run finds the
  // other end in its record instead of through the meeting lists.
  static constexpr int32_t kAlone = -1, kPaired = -2;
  PairMode mode = PairMode::Matched;
  std::vector<ProgramView> unfolded;                    // the programs as given
  std::vector<ProgramView> programs;                    // as timed: with their chains of collectives folded
  std::vector<std::shared_ptr<const FoldedOps>> folds;  // by program: its folded chains, or null
  bool misaligned = false;                              // a meeting's members folded different chains into their ops
  std::vector<Lanes> lanes;
  std::vector<size_t> order_owners;        // the first program of each distinct Order
  std::vector<OpRef> meet_ops;             // every meeting's ops, one meeting after another
  std::vector<uint32_t> meet_begin = {0};  // meeting m: meet_ops[begin[m], begin[m + 1])

  void build(std::vector<ProgramView> given, PairMode pairing, OrderLibrary::Impl* library, bool fold);
  void fold_programs(OrderLibrary::Impl* library);
  size_t chain_size(OpRef ref) const {
    const FoldedOps* f = folds[size_t(ref.program)].get();
    return f ? f->chain_size(size_t(ref.op)) : 0;
  }
  void add_lanes(const ProgramView& program, OrderLibrary::Impl* library);
  bool pair_lone_from(const OrderLibrary::Impl* library);
  void keep_lone_pairs(OrderLibrary::Impl* library) const;
  Pairs& pairs_of(int32_t program) {
    std::shared_ptr<Pairs>& pairs = lanes[size_t(program)].pairs;
    if (!pairs) {
      const size_t n = programs[size_t(program)].size();
      pairs = std::make_shared<Pairs>(Pairs{std::vector<int32_t>(n, kAlone), std::vector<OpRef>(n)});
    }
    return *pairs;
  }
  void add_meet(const OpRef* begin, const OpRef* end) {
    if (end - begin == 2) {
      for (int k = 0; k < 2; ++k) {
        Pairs& pairs = pairs_of(begin[k].program);
        pairs.meet[size_t(begin[k].op)] = kPaired;
        pairs.partner[size_t(begin[k].op)] = begin[1 - k];
      }
      return;
    }
    const auto index = int32_t(meet_begin.size() - 1);
    for (const OpRef* ref = begin; ref != end; ++ref) {
      pairs_of(ref->program).meet[size_t(ref->op)] = index;
      meet_ops.push_back(*ref);
    }
    meet_begin.push_back(uint32_t(meet_ops.size()));
  }
  void pair_messages(const MessageKeys& ends);
  void pair_matched(bool stage_only);
  void pair_symmetric();
  void meet_collectives();
};

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

// Whether two programs' ops wait for the same ops of their own rank: flat steps of one unrolled
// order whose template ops run on the same streams in the same phases.
bool same_order(const ProgramView& a, const ProgramView& b) {
  if (!a.flat() || !b.flat() || !a.same_flat(b)) return false;
  const std::vector<Op>&x = a.program().ops, &y = b.program().ops;
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].stream != y[i].stream || x[i].phase != y[i].phase) return false;
  return true;
}

}  // namespace

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

bool is_message(const Op& op) {
  return op.kind == OpKind::Send || op.kind == OpKind::Recv;
}

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

}  // namespace

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
namespace {
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
}  // namespace

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
  meet_ops.reserve(meet_ops.size() + sends[keys] + recvs[keys]);
  meet_begin.reserve(meet_begin.size() + (sends[keys] + recvs[keys]) / 2);
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

namespace {

// One run of a shape with given durations. An op's changing state is one record (its ready time
// becomes its end once it starts), so that releasing an op touches one cache line of it rather
// than one per field: a step's timeline holds millions of ops and is bound by memory.
class TimelineRun {
 public:
  // `duration` (by op, or by template op: `by_template`) and the ends taken are of the programs
  // as given (unfolded); `ends`: whether ends will be taken.
  TimelineRun(const TimelineShape::Impl& shape, const std::vector<std::vector<double>>& duration, bool by_template,
              bool ends)
      : shape_(shape),
        duration_(duration),
        by_template_(by_template),
        state_(shape.lanes.size()),
        chain_seconds_(state_.size()),
        folded_ends_(ends ? state_.size() : 0) {
    for (size_t p = 0; p < state_.size(); ++p) {
      const TimelineShape::Impl::Lanes& lanes = shape.lanes[p];
      const FoldedOps* fold = shape.folds[p].get();
      std::vector<OpState>& ops = state_[p];
      const std::vector<int32_t>& waiting = lanes.order->waiting;
      const TimelineShape::Impl::Pairs* pairs = lanes.pairs.get();
      // Each record written once (not zeroed first), and the ops that wait for nothing posted in
      // the same pass, program by program, op by op.
      ops.reserve(waiting.size());
      for (size_t i = 0; i < waiting.size(); ++i) {
        ops.push_back(OpState{0.0, seconds(p, fold ? fold->kept[i] : i), waiting[i], pairs ? pairs->meet[i] : kAlone,
                              pairs ? pairs->partner[i] : OpRef{}});
        if (waiting[i] == 0) posted_.push_back({int32_t(p), int32_t(i)});
      }
      not_started_ += waiting.size();
      if (!fold) continue;
      // A chain folds only with durations of at least zero (each op then ends after the ones before start).
      chain_seconds_[p].reserve(fold->chain.size());
      for (const uint32_t op : fold->chain) {
        chain_seconds_[p].push_back(seconds(p, op));
        if (!(chain_seconds_[p].back() >= 0)) unfold_ = true;
      }
      if (ends) folded_ends_[p].assign(fold->chain.size(), kNotStarted);
    }
    meet_posted_.assign(shape.meet_begin.size() - 1, 0);
    meet_ready_.assign(shape.meet_begin.size() - 1, 0.0);
  }

  std::vector<RankTiming> run();
  // Whether the programs must be timed unfolded: a chain's duration below zero, or a meeting of
  // folded ops called off (called off op by op, unfolded, its members would go on differently).
  bool unfold() const { return unfold_; }
  // Every op's end, by program (valid after run()): kNotStarted for an op that never started.
  // `only`: that program's alone, the others left empty.
  std::vector<std::vector<double>> take_ends(std::optional<size_t> only) const {
    std::vector<std::vector<double>> ends(state_.size());
    for (size_t p = 0; p < state_.size(); ++p) {
      if (only && p != *only) continue;
      const FoldedOps* fold = shape_.folds[p].get();
      if (!fold) {
        ends[p].reserve(state_[p].size());
        for (const OpState& op : state_[p])
          ends[p].push_back(end_of(op));
        continue;
      }
      ends[p].assign(fold->unfolded_size, kNotStarted);
      for (size_t i = 0; i < state_[p].size(); ++i)
        ends[p][fold->kept[i]] = end_of(state_[p][i]);
      for (size_t c = 0; c < fold->chain.size(); ++c)
        ends[p][fold->chain[c]] = folded_ends_[p][c];
    }
    return ends;
  }

 private:
  // OpState::waiting once every predecessor started: posted to its meeting, or started.
  static constexpr int32_t kPosted = -2, kStarted = -1;
  static constexpr int32_t kAlone = TimelineShape::Impl::kAlone, kPaired = TimelineShape::Impl::kPaired;
  struct OpState {
    double time;      // latest end among its started predecessors; its own end once started
    double duration;  // seconds
    int32_t waiting;  // predecessors not started yet, or kPosted, or kStarted
    int32_t meet;     // the shape's meeting (or kPaired), kAlone once called off
    OpRef partner;    // kPaired: the other end
  };
  static double end_of(const OpState& op) { return op.waiting == kStarted ? op.time : kNotStarted; }
  const OpRef* meet_begin(int32_t meet) const { return shape_.meet_ops.data() + shape_.meet_begin[size_t(meet)]; }
  const OpRef* meet_end(int32_t meet) const { return shape_.meet_ops.data() + shape_.meet_begin[size_t(meet) + 1]; }
  void post(OpRef ref);
  double fold_chains(const OpRef* members, size_t count, double at);
  void start(OpRef ref, double at);
  bool dissolve_one_waiting_meet();

  // Seconds op i of program p (as given) lasts.
  double seconds(size_t p, size_t i) const {
    const ProgramView& program = shape_.unfolded[p];
    return duration_[p][by_template_ && program.flat() ? program.origin(i) : i];
  }

  const TimelineShape::Impl& shape_;
  const std::vector<std::vector<double>>& duration_;  // by op, or by template op
  bool by_template_;
  std::vector<std::vector<OpState>> state_;         // by program, by op
  std::vector<std::vector<double>> chain_seconds_;  // by program, by folded op (FoldedOps::chain)
  std::vector<std::vector<double>> folded_ends_;    // by program, by folded op
  std::vector<double> longest_;                     // by chain position: the members' longest op
  bool unfold_ = false;
  size_t not_started_ = 0;            // ops not started yet
  std::vector<int32_t> meet_posted_;  // by meeting: ops posted so far
  std::vector<double> meet_ready_;    // by meeting: latest ready time among them
  std::vector<OpRef> posted_;         // ops posted but not handled yet (work list)
  bool listing_waiting_ = false;      // once a meeting was to be called off
  std::vector<OpRef> waiting_;        // ops that waited in a meeting (some may have started since)
};

// `ref` has every predecessor started: start it now, or count it in its meeting and start the
// meeting once all its ops are posted.
void TimelineRun::post(OpRef ref) {
  OpState& op = state_[size_t(ref.program)][size_t(ref.op)];
  const double ready = op.time;
  const int32_t meet = op.meet;
  if (meet == kAlone) {
    start(ref, fold_chains(&ref, 1, ready));
    return;
  }
  if (meet == kPaired) {
    const OpState& other = state_[size_t(op.partner.program)][size_t(op.partner.op)];
    if (other.waiting != kPosted) {
      op.waiting = kPosted;
      if (listing_waiting_) waiting_.push_back(ref);
      return;
    }
    const OpRef pair[2] = {op.partner, ref};
    const double at = fold_chains(pair, 2, std::max(ready, other.time));
    start(pair[0], at);
    start(ref, at);
    return;
  }
  op.waiting = kPosted;
  if (listing_waiting_) waiting_.push_back(ref);
  meet_ready_[size_t(meet)] = std::max(meet_ready_[size_t(meet)], ready);
  if (++meet_posted_[size_t(meet)] < meet_end(meet) - meet_begin(meet)) return;
  const double at = fold_chains(meet_begin(meet), size_t(meet_end(meet) - meet_begin(meet)), meet_ready_[size_t(meet)]);
  for (const OpRef* other = meet_begin(meet); other != meet_end(meet); ++other)
    start(*other, at);
}

// When the first ops of the members' folded chains (the members of one meeting, all of whose
// chains have the same length) start at `at`: when their last op starts. Unfolded, each op starts
// on every member once all members ended the one before: the members meet op by op.
//
// The k-th ops start at the latest of the members' ends of the ones before: with all of those
// started at `at`, at `at` plus the longest of them, as rounding is monotonic (a longer op never
// ends earlier), so the members' durations are read one member at a time.
double TimelineRun::fold_chains(const OpRef* members, size_t count, double at) {
  const size_t length = shape_.chain_size(members[0]);
  if (length == 0) return at;
  auto chain_of = [&](size_t m) {
    const auto p = size_t(members[m].program);
    return std::pair{p, size_t(shape_.folds[p]->chain_begin[size_t(members[m].op)])};
  };
  longest_.assign(length, 0.0);
  for (size_t m = 0; m < count; ++m) {
    const auto [p, first] = chain_of(m);
    const double* seconds = chain_seconds_[p].data() + first;
    for (size_t k = 0; k < length; ++k)
      longest_[k] = std::max(longest_[k], seconds[k]);
  }
  if (!folded_ends_.empty())
    for (size_t m = 0; m < count; ++m) {
      const auto [p, first] = chain_of(m);
      const double* seconds = chain_seconds_[p].data() + first;
      double start = at;
      for (size_t k = 0; k < length; ++k) {
        folded_ends_[p][first + k] = start + seconds[k];
        start += longest_[k];
      }
    }
  for (size_t k = 0; k < length; ++k)
    at += longest_[k];
  return at;
}

void TimelineRun::start(OpRef ref, double at) {
  std::vector<OpState>& ops = state_[size_t(ref.program)];
  const TimelineShape::Impl::Order& order = *shape_.lanes[size_t(ref.program)].order;
  OpState& op = ops[size_t(ref.op)];
  const double end = at + op.duration;
  op.time = end;
  op.waiting = kStarted;
  --not_started_;
  auto release = [&](int32_t successor) {
    OpState& next = ops[size_t(successor)];
    next.time = std::max(next.time, end);
    if (--next.waiting == 0) posted_.push_back({ref.program, successor});
  };
  if (order.next[size_t(ref.op)] >= 0) release(order.next[size_t(ref.op)]);
  for (uint32_t k = order.first_dependent[size_t(ref.op)]; k < order.first_dependent[size_t(ref.op) + 1]; ++k)
    release(order.dependents[k]);
}

// When nothing can start but ops remain, some posted op waits for a meeting whose other ops are
// never posted under this pairing: the first such meeting is called off, its posted ops start on
// their own and the others will when posted. False when nothing is waiting.
bool TimelineRun::dissolve_one_waiting_meet() {
  auto waits = [&](OpRef ref) {
    const OpState& op = state_[size_t(ref.program)][size_t(ref.op)];
    return op.waiting == kPosted && op.meet != kAlone;
  };
  // The ops waiting in a meeting, listed by one pass over every op the first time (most timings
  // never get here) and by post() from then on; entries that started or were called off since
  // are dropped as they are met, so the many meetings a sampled timing calls off do not each scan
  // every op.
  if (!listing_waiting_) {
    listing_waiting_ = true;
    for (size_t p = 0; p < state_.size(); ++p)
      for (size_t i = 0; i < state_[p].size(); ++i)
        if (waits({int32_t(p), int32_t(i)})) waiting_.push_back({int32_t(p), int32_t(i)});
  }
  // The first waiting op in program order, as a scan of every op would find it.
  size_t kept = 0;
  OpRef first{-1, -1};
  for (const OpRef ref : waiting_) {
    if (!waits(ref)) continue;
    waiting_[kept++] = ref;
    if (first.program < 0 || std::pair(ref.program, ref.op) < std::pair(first.program, first.op)) first = ref;
  }
  waiting_.resize(kept);
  if (first.program < 0) return false;
  for (const OpRef ref : waiting_)
    if (shape_.chain_size(ref) > 0) {
      unfold_ = true;
      return false;
    }
  auto call_off = [&](OpRef ref) {
    OpState& owner = state_[size_t(ref.program)][size_t(ref.op)];
    owner.meet = kAlone;
    if (owner.waiting == kPosted) posted_.push_back(ref);
  };
  const OpState& op = state_[size_t(first.program)][size_t(first.op)];
  if (op.meet == kPaired) {
    const OpRef partner = op.partner;
    call_off(first);
    call_off(partner);
    return true;
  }
  const int32_t meet = op.meet;
  for (const OpRef* other = meet_begin(meet); other != meet_end(meet); ++other)
    call_off(*other);
  return true;
}

std::vector<RankTiming> TimelineRun::run() {
  if (unfold_) return {};
  int called_off = 0;
  for (;;) {
    while (!posted_.empty()) {
      const OpRef ref = posted_.back();
      posted_.pop_back();
      post(ref);
    }
    // Every op started (the usual end): nothing waits in a meeting, no need to look.
    if (not_started_ == 0 || !dissolve_one_waiting_meet()) break;
    ++called_off;
  }
  if (unfold_) return {};
  if (called_off > 0) WF_LOG_DEBUG("cost", "{} meetings of message ends or collectives called off", called_off);

  std::vector<RankTiming> times(state_.size());
  for (size_t p = 0; p < state_.size(); ++p)
    for (size_t i = 0; i < state_[p].size(); ++i) {
      const uint8_t kind = shape_.lanes[p].order->kind[i];
      const bool forward = (kind & TimelineShape::Impl::kForward) != 0;
      const OpState& op = state_[p][i];
      if (kind & TimelineShape::Impl::kCompute)
        (forward ? times[p].compute_forward_s : times[p].compute_backward_s) += op.duration;
      const double end = end_of(op);
      if (forward) times[p].forward_end_s = std::max(times[p].forward_end_s, end);
      times[p].end_s = std::max(times[p].end_s, end);
    }
  return times;
}

}  // namespace

std::vector<RankTiming> TimelineShape::run(const std::vector<std::vector<double>>& duration,
                                           std::vector<std::vector<double>>* op_ends, const RunOptions& options) const {
  TimelineRun timeline(*impl_, duration, options.by_template_op, op_ends != nullptr);
  std::vector<RankTiming> times = timeline.run();
  if (timeline.unfold())
    return TimelineShape(impl_->unfolded, impl_->mode, nullptr, false).run(duration, op_ends, options);
  if (op_ends)
    *op_ends = timeline.take_ends(options.ends_of ? std::optional<size_t>(options.ends_of(times)) : std::nullopt);
  return times;
}

}  // namespace wallfacer::detail
