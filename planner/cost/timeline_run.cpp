// Running a timeline shape with given op durations (timeline.hpp): the list schedule itself.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <wallfacer/core/log.hpp>
#include "step_parts.hpp"
#include "timeline_shape.hpp"

namespace wallfacer::detail {
namespace {

constexpr double kNotStarted = -1;

// Large blocks of records a thread keeps for its next runs. A sampled column's run of a large step
// holds most of a million op records (24 MiB): allocated afresh each run, such a block is mapped
// from the kernel, zeroed page by page on first touch and returned when freed, a tenth of a
// 1,024-GPU search's time. Blocks of at least kSmallest records are kept, the kKept largest.
template <typename Record>
class SpareBlocks {
 public:
  // A block that holds `size` records, empty: the smallest spare one that fits, if any.
  std::vector<Record> take(size_t size) {
    std::vector<Record> block;
    if (size >= kSmallest) {
      auto best = spares_.end();
      for (auto it = spares_.begin(); it != spares_.end(); ++it)
        if (it->capacity() >= size && (best == spares_.end() || it->capacity() < best->capacity())) best = it;
      if (best != spares_.end()) {
        block = std::move(*best);
        spares_.erase(best);
      }
    }
    block.clear();
    block.reserve(size);
    return block;
  }
  void give(std::vector<Record>&& block) {
    if (block.capacity() < kSmallest) return;
    spares_.push_back(std::move(block));
    std::sort(spares_.begin(), spares_.end(), [](const auto& a, const auto& b) { return a.capacity() > b.capacity(); });
    if (spares_.size() > kKept) spares_.pop_back();
  }

 private:
  static constexpr size_t kSmallest = size_t(1) << 16, kKept = 1;
  std::vector<std::vector<Record>> spares_;
};

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
      ops = spare_states().take(waiting.size());
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
  ~TimelineRun() {
    for (std::vector<OpState>& ops : state_)
      spare_states().give(std::move(ops));
  }
  TimelineRun(const TimelineRun&) = delete;
  TimelineRun& operator=(const TimelineRun&) = delete;

  std::vector<RankTiming> run();
  size_t called_off() const { return called_off_; }
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
  static SpareBlocks<OpState>& spare_states() {
    thread_local SpareBlocks<OpState> spares;
    return spares;
  }
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
  size_t called_off_ = 0;             // meetings called off so far
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
  for (;;) {
    while (!posted_.empty()) {
      const OpRef ref = posted_.back();
      posted_.pop_back();
      post(ref);
    }
    // Every op started (the usual end): nothing waits in a meeting, no need to look.
    if (not_started_ == 0 || !dissolve_one_waiting_meet()) break;
    ++called_off_;
  }
  if (unfold_) return {};
  if (called_off_ > 0) WF_LOG_DEBUG("cost", "{} meetings of message ends or collectives called off", called_off_);

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
  // Bounds (Unpaired, StagesOnly) time compute at full speed: slowed, it only lasts longer.
  const bool bound = impl_->mode == PairMode::Unpaired || impl_->mode == PairMode::StagesOnly;
  const bool slowed = options.compute_kept_under_comm < 1 && !bound;
  TimelineRun timeline(*impl_, duration, options.by_template_op, op_ends != nullptr || slowed);
  std::vector<RankTiming> times = timeline.run();
  if (timeline.unfold())
    return TimelineShape(impl_->unfolded, impl_->mode, nullptr, false).run(duration, op_ends, options);
  if (options.called_off) *options.called_off = timeline.called_off();
  double full_speed_end = 0;
  for (const RankTiming& t : times)
    full_speed_end = std::max(full_speed_end, t.end_s);
  if (options.full_speed_end_s) *options.full_speed_end_s = full_speed_end;
  const bool stop_at_full_speed = slowed && full_speed_end > options.full_speed_stop_s;
  if (stop_at_full_speed && options.stopped_at_full_speed) *options.stopped_at_full_speed = true;
  if (!slowed || stop_at_full_speed) {
    if (op_ends)
      *op_ends = timeline.take_ends(options.ends_of ? std::optional<size_t>(options.ends_of(times)) : std::nullopt);
    return times;
  }
  // Compute slowed by communication: each compute op lengthened by what the timeline at full speed
  // puts under its rank's transfers (ComputeUnderComm), and the programs timed again with those
  // durations, so that a rank's slowed compute also delays the ranks that wait for it.
  const std::vector<std::vector<double>> full_speed_ends = timeline.take_ends(std::nullopt);
  std::vector<std::vector<double>> slowed_durations(times.size());
  std::vector<double> added(times.size(), 0.0);
  for (size_t p = 0; p < times.size(); ++p)
    slowed_durations[p] = lengthened(impl_->unfolded[p], duration[p], options.by_template_op, full_speed_ends[p],
                                     options.compute_kept_under_comm, &added[p]);
  RunOptions again = options;
  again.compute_kept_under_comm = 1;
  again.full_speed_end_s = nullptr;
  again.full_speed_stop_s = std::numeric_limits<double>::infinity();
  again.stopped_at_full_speed = nullptr;
  size_t called_off_again = 0;
  again.called_off = &called_off_again;
  std::vector<RankTiming> slowed_times = run(slowed_durations, op_ends, again);
  if (options.called_off) *options.called_off += called_off_again;
  for (size_t p = 0; p < slowed_times.size(); ++p)
    slowed_times[p].slowdown_s = added[p];
  if (options.slowed_durations) {
    for (size_t p = 0; op_ends && p < slowed_durations.size(); ++p)
      if ((*op_ends)[p].empty()) slowed_durations[p].clear();
    *options.slowed_durations = std::move(slowed_durations);
  }
  return slowed_times;
}

}  // namespace wallfacer::detail
