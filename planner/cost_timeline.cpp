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
      lanes.partner.assign(programs[p]->ops.size(), OpRef{});
      for (size_t i = 0; i < programs[p]->ops.size(); ++i)
        lanes.streams[int(programs[p]->ops[i].stream)].push_back(i);
    }
  }

  void pair_matched();
  void pair_symmetric();
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
    std::vector<double> end;     // by op; kNotStarted until started (durations are fixed)
    std::vector<OpRef> partner;  // Send <-> Recv ends of one message
  };

  void link(OpRef a, OpRef b) {
    lanes_[size_t(a.program)].partner[size_t(a.op)] = b;
    lanes_[size_t(b.program)].partner[size_t(b.op)] = a;
  }
  template <typename Key, typename KeyOf>
  void pair_by(KeyOf key_of);
  double ready_time(OpRef ref) const;
  bool heads(OpRef ref) const;
  void start(OpRef ref, double at);
  bool start_head(size_t p, int stream);
  bool unpair_one_waiting();
  void enqueue(size_t program) {
    if (queued_[program]) return;
    queued_[program] = 1;
    work_.push_back(program);
  }

  const std::vector<const RankProgram*>& programs_;
  const std::vector<std::vector<double>>& duration_;
  std::vector<Lanes> lanes_;
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
        link(ref, other->second.ends[other->second.next++]);
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

// Starts the op heading stream s of program p, together with its other end, if both can start.
bool Timeline::start_head(size_t p, int s) {
  Lanes& lanes = lanes_[p];
  if (lanes.head[s] >= lanes.streams[s].size()) return false;
  const OpRef ref{int32_t(p), int32_t(lanes.streams[s][lanes.head[s]])};
  const double ready = ready_time(ref);
  if (ready == kNotStarted) return false;
  const OpRef other = lanes.partner[size_t(ref.op)];
  if (!other.valid()) {
    start(ref, ready);
    return true;
  }
  const double other_ready = heads(other) ? ready_time(other) : kNotStarted;
  if (other_ready == kNotStarted) return false;
  const double at = std::max(ready, other_ready);
  start(ref, at);
  start(other, at);
  return true;
}

// When nothing can start but ops remain, some end waits for a partner that is never posted under
// this pairing: let the first such end start on its own. False when nothing is waiting.
bool Timeline::unpair_one_waiting() {
  for (size_t p = 0; p < lanes_.size(); ++p)
    for (int s = 0; s < kNumStreams; ++s) {
      Lanes& lanes = lanes_[p];
      if (lanes.head[s] >= lanes.streams[s].size()) continue;
      const OpRef ref{int32_t(p), int32_t(lanes.streams[s][lanes.head[s]])};
      const OpRef other = lanes.partner[size_t(ref.op)];
      if (!other.valid() || ready_time(ref) == kNotStarted) continue;
      lanes.partner[size_t(ref.op)] = OpRef{};
      lanes_[size_t(other.program)].partner[size_t(other.op)] = OpRef{};
      enqueue(p);
      enqueue(size_t(other.program));
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
  } while (unpair_one_waiting());

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
  if (mode == PairMode::Matched) timeline.pair_matched();
  if (mode == PairMode::Symmetric) timeline.pair_symmetric();
  return timeline.run();
}

}  // namespace wallfacer::detail
