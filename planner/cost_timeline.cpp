// List schedule of rank programs with paired message ends (cost_timeline.hpp).
#include "planner/cost_timeline.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>
#include <utility>

namespace wallfacer::detail {
namespace {

constexpr double kNotStarted = -1;

class Timeline {
 public:
  Timeline(const std::vector<const RankProgram*>& programs, const std::vector<std::vector<double>>& duration)
      : programs_(programs), duration_(duration), lanes_(programs.size()) {
    for (size_t p = 0; p < programs.size(); ++p) {
      Lanes& lanes = lanes_[p];
      lanes.end.assign(programs[p]->ops.size(), kNotStarted);
      lanes.meet.assign(programs[p]->ops.size(), -1);
      for (size_t i = 0; i < programs[p]->ops.size(); ++i)
        lanes.streams[int(programs[p]->ops[i].stream)].push_back(i);
    }
  }

  void pair_matched();
  void pair_symmetric();
  void meet_collectives();
  std::vector<RankTiming> run();

 private:
  struct OpRef {
    int32_t program = -1;
    int32_t op = -1;
    bool valid() const { return program >= 0; }
  };
  struct Lanes {
    std::vector<size_t> streams[kNumStreams];  // ops of each stream, in program order
    size_t head[kNumStreams] = {0, 0, 0, 0};
    double stream_end[kNumStreams] = {0, 0, 0, 0};
    std::vector<double> end;    // by op; kNotStarted until started (durations are fixed)
    std::vector<int32_t> meet;  // by op: index into meets_, -1 when it starts on its own
  };

  // Ops that start together: the two ends of a message, the members' ops of one collective.
  void add_meet(std::vector<OpRef> ops) {
    for (const OpRef& ref : ops)
      lanes_[size_t(ref.program)].meet[size_t(ref.op)] = int32_t(meets_.size());
    meets_.push_back(std::move(ops));
  }
  template <typename Key, typename KeyOf>
  void pair_by(KeyOf key_of);
  double ready_time(OpRef ref) const;
  bool heads(OpRef ref) const;
  void start(OpRef ref, double at);
  bool start_head(size_t p, int stream);
  bool dissolve_one_waiting_meet();
  void enqueue(size_t program) {
    if (queued_[program]) return;
    queued_[program] = 1;
    work_.push_back(program);
  }

  const std::vector<const RankProgram*>& programs_;
  const std::vector<std::vector<double>>& duration_;
  std::vector<Lanes> lanes_;
  std::vector<std::vector<OpRef>> meets_;
  std::deque<size_t> work_;
  std::vector<char> queued_;
};

// Pairs each Send with the Recv of the same key, in program order.
template <typename Key, typename KeyOf>
void Timeline::pair_by(KeyOf key_of) {
  struct Unpaired {
    std::vector<OpRef> ends;
    size_t next = 0;  // first end not paired yet
  };
  std::map<Key, Unpaired> waiting[2];  // [0] sends, [1] receives
  for (size_t p = 0; p < programs_.size(); ++p)
    for (size_t i = 0; i < programs_[p]->ops.size(); ++i) {
      const Op& op = programs_[p]->ops[i];
      if (op.kind != OpKind::Send && op.kind != OpKind::Recv) continue;
      const int side = op.kind == OpKind::Send ? 0 : 1;
      const Key key = key_of(*programs_[p], op);
      const OpRef ref{int32_t(p), int32_t(i)};
      auto other = waiting[1 - side].find(key);
      if (other != waiting[1 - side].end() && other->second.next < other->second.ends.size())
        add_meet({ref, other->second.ends[other->second.next++]});
      else
        waiting[side][key].ends.push_back(ref);
    }
}

void Timeline::pair_matched() {
  using Key = std::tuple<int, int, int32_t>;  // (src rank, dst rank, tag)
  pair_by<Key>([](const RankProgram& program, const Op& op) {
    return op.kind == OpKind::Send ? Key{program.rank, op.peer, op.tag} : Key{op.peer, program.rank, op.tag};
  });
}

void Timeline::pair_symmetric() {
  using Key = std::pair<int, int32_t>;  // (program rank, tag): both ends on the timed rank
  pair_by<Key>([](const RankProgram& program, const Op& op) { return Key{program.rank, op.tag}; });
}

// The k-th collective a rank runs on a group meets the k-th of every other member (only when
// every member is timed).
void Timeline::meet_collectives() {
  std::map<std::pair<int32_t, int32_t>, std::vector<OpRef>> by_occurrence;  // (group, k) -> ops
  std::map<std::pair<size_t, int32_t>, int32_t> seen;                       // (program, group) -> k
  for (size_t p = 0; p < programs_.size(); ++p)
    for (size_t i = 0; i < programs_[p]->ops.size(); ++i) {
      const Op& op = programs_[p]->ops[i];
      if (op.stream != Stream::Collective || op.coll < 0) continue;
      const int32_t group = programs_[p]->collectives[size_t(op.coll)].group;
      by_occurrence[{group, seen[{p, group}]++}].push_back(OpRef{int32_t(p), int32_t(i)});
    }
  for (auto& [key, ops] : by_occurrence)
    if (ops.size() > 1) add_meet(std::move(ops));
}

double Timeline::ready_time(OpRef ref) const {
  const RankProgram& program = *programs_[size_t(ref.program)];
  const Lanes& lanes = lanes_[size_t(ref.program)];
  const Op& op = program.ops[size_t(ref.op)];
  double ready = lanes.stream_end[int(op.stream)];
  for (const int32_t* d = program.deps_begin(op); d != program.deps_end(op); ++d) {
    if (lanes.end[size_t(*d)] == kNotStarted) return kNotStarted;
    ready = std::max(ready, lanes.end[size_t(*d)]);
  }
  return ready;
}

bool Timeline::heads(OpRef ref) const {
  const Lanes& lanes = lanes_[size_t(ref.program)];
  const int s = int(programs_[size_t(ref.program)]->ops[size_t(ref.op)].stream);
  return lanes.head[s] < lanes.streams[s].size() && lanes.streams[s][lanes.head[s]] == size_t(ref.op);
}

void Timeline::start(OpRef ref, double at) {
  Lanes& lanes = lanes_[size_t(ref.program)];
  const int s = int(programs_[size_t(ref.program)]->ops[size_t(ref.op)].stream);
  const double end = at + duration_[size_t(ref.program)][size_t(ref.op)];
  lanes.end[size_t(ref.op)] = end;
  lanes.stream_end[s] = end;
  ++lanes.head[s];
  enqueue(size_t(ref.program));
}

// Starts the op heading stream s of program p, with the ops it meets, if all of them can start.
bool Timeline::start_head(size_t p, int s) {
  Lanes& lanes = lanes_[p];
  if (lanes.head[s] >= lanes.streams[s].size()) return false;
  const OpRef ref{int32_t(p), int32_t(lanes.streams[s][lanes.head[s]])};
  double at = ready_time(ref);
  if (at == kNotStarted) return false;
  const int32_t meet = lanes.meet[size_t(ref.op)];
  if (meet < 0) {
    start(ref, at);
    return true;
  }
  for (const OpRef& other : meets_[size_t(meet)]) {
    const double ready = heads(other) ? ready_time(other) : kNotStarted;
    if (ready == kNotStarted) return false;
    at = std::max(at, ready);
  }
  for (const OpRef& other : meets_[size_t(meet)])
    start(other, at);
  return true;
}

// When nothing can start but ops remain, some op waits for a partner that is never posted under
// this pairing: the first such op's meeting is called off and its ops start on their own. False
// when nothing is waiting.
bool Timeline::dissolve_one_waiting_meet() {
  for (size_t p = 0; p < lanes_.size(); ++p)
    for (int s = 0; s < kNumStreams; ++s) {
      Lanes& lanes = lanes_[p];
      if (lanes.head[s] >= lanes.streams[s].size()) continue;
      const OpRef ref{int32_t(p), int32_t(lanes.streams[s][lanes.head[s]])};
      const int32_t meet = lanes.meet[size_t(ref.op)];
      if (meet < 0 || ready_time(ref) == kNotStarted) continue;
      for (const OpRef& other : meets_[size_t(meet)]) {
        lanes_[size_t(other.program)].meet[size_t(other.op)] = -1;
        enqueue(size_t(other.program));
      }
      return true;
    }
  return false;
}

std::vector<RankTiming> Timeline::run() {
  queued_.assign(lanes_.size(), 1);
  for (size_t p = 0; p < lanes_.size(); ++p)
    work_.push_back(p);
  do {
    while (!work_.empty()) {
      const size_t p = work_.front();
      work_.pop_front();
      queued_[p] = 0;
      for (bool progressed = true; progressed;) {
        progressed = false;
        for (int s = 0; s < kNumStreams; ++s)
          while (start_head(p, s))
            progressed = true;
      }
    }
  } while (dissolve_one_waiting_meet());

  std::vector<RankTiming> times(lanes_.size());
  for (size_t p = 0; p < lanes_.size(); ++p)
    for (size_t i = 0; i < programs_[p]->ops.size(); ++i) {
      const Op& op = programs_[p]->ops[i];
      const bool forward = op.phase == Phase::Forward;
      if (op.stream == Stream::Compute)
        (forward ? times[p].compute_forward_s : times[p].compute_backward_s) += duration_[p][i];
      if (forward) times[p].forward_end_s = std::max(times[p].forward_end_s, lanes_[p].end[i]);
      times[p].end_s = std::max(times[p].end_s, lanes_[p].end[i]);
    }
  return times;
}

}  // namespace

std::vector<RankTiming> time_programs(const std::vector<const RankProgram*>& programs,
                                      const std::vector<std::vector<double>>& duration, PairMode mode) {
  Timeline timeline(programs, duration);
  if (mode == PairMode::Matched) {
    timeline.pair_matched();
    timeline.meet_collectives();
  }
  if (mode == PairMode::Symmetric) timeline.pair_symmetric();
  return timeline.run();
}

}  // namespace wallfacer::detail
