#include "simulator/rank_actor.hpp"

#include <fmt/format.h>

#include <exception>

#include "planner/errors.hpp"

namespace wallfacer::sim {
namespace {

// An activity tag: what it is in the top byte, the op or step index below.
constexpr int kTagKindShift = 56;
template <typename Kind>
uint64_t make_tag(Kind kind, uint64_t index) {
  return (uint64_t(kind) << kTagKindShift) | index;
}
uint64_t tag_index(uint64_t tag) {
  return tag & ((uint64_t(1) << kTagKindShift) - 1);
}

// What a collective transfer carries, so the receiver can check it pairs with the right send.
void* collective_payload(uint64_t sequence, uint64_t step) {
  return reinterpret_cast<void*>(uintptr_t(((sequence << 24) | step) + 1));
}

// What a point-to-point transfer carries: the send op's index and tag, packed into the pointer
// so that the receiver checks the pairing without reading the sender's program (a cache miss per
// transfer at thousands of ranks). A channel joins one sender to one receiver, so the peer is
// known. The top bit keeps the value non-null.
constexpr uint64_t kP2pPayloadBit = uint64_t(1) << 63;
void* p2p_payload(int32_t send_op, int32_t tag) {
  return reinterpret_cast<void*>(uintptr_t(kP2pPayloadBit | (uint64_t(uint32_t(send_op)) << 32) | uint32_t(tag)));
}
struct P2pPayload {
  bool valid = false;
  int32_t send_op = -1, tag = -1;
};
P2pPayload decode_p2p_payload(const void* payload) {
  auto bits = uint64_t(reinterpret_cast<uintptr_t>(payload));
  if (!(bits & kP2pPayloadBit)) return {};
  return {true, int32_t(uint32_t(bits >> 32) & 0x7fffffffu), int32_t(uint32_t(bits))};
}

}  // namespace

RankActor::RankActor(Replay& replay, int rank)
    : replay_(replay),
      rank_(rank),
      host_(replay.host_of_rank(rank)),
      program_(replay.schedule().ranks[size_t(rank)]),
      outcome_(replay.outcome(rank)),
      records_(replay.records_ops(rank)) {
  for (size_t i = 0; i < program_.ops.size(); ++i)
    queue_[size_t(program_.ops[i].stream)].push_back(int32_t(i));
  index_dependencies();
  if (records_) outcome_.records.reserve(program_.ops.size());
  activities_.keep_times(records_);
  if (replay_.compute_runs_alone()) activities_.set_wake_policy(&RankActor::wakes_for, this);
}

void RankActor::run() {
  try {
    loop();
  } catch (const std::exception& e) {
    replay_.fail(fmt::format("rank {}: {}", rank_, e.what()));
  }
}

void RankActor::loop() {
  start_ready();
  while (completed_ < program_.ops.size()) {
    if (activities_.empty()) return;  // waits on itself: describe_wait() reports it
    handle(activities_.wait_any());
    start_ready();
  }
  outcome_.finished = true;
  outcome_.finish = SimEngine::now();
}

void RankActor::index_dependencies() {
  const size_t ops = program_.ops.size();
  pending_deps_.assign(ops, 0);
  dependents_begin_.assign(ops + 1, 0);
  for (size_t i = 0; i < ops; ++i) {
    const Op& op = program_.ops[i];
    pending_deps_[i] = op.dep_count;
    // A dependency that is no op of this rank never finishes: the op waits forever and the
    // replay reports the deadlock.
    for (const int32_t* dep = program_.deps_begin(op); dep != program_.deps_end(op); ++dep)
      if (*dep >= 0 && size_t(*dep) < ops) ++dependents_begin_[size_t(*dep) + 1];
  }
  for (size_t i = 0; i < ops; ++i)
    dependents_begin_[i + 1] += dependents_begin_[i];
  dependents_.resize(dependents_begin_[ops]);
  std::vector<uint32_t> next(dependents_begin_.begin(), dependents_begin_.end() - 1);
  for (size_t i = 0; i < ops; ++i) {
    const Op& op = program_.ops[i];
    for (const int32_t* dep = program_.deps_begin(op); dep != program_.deps_end(op); ++dep)
      if (*dep >= 0 && size_t(*dep) < ops) dependents_[next[size_t(*dep)]++] = int32_t(i);
  }
}

// Starting an op can complete it on the spot (an empty collective), which may free other
// streams, so sweep until nothing changes.
void RankActor::start_ready() {
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t s = 0; s < size_t(kNumStreams); ++s) {
      if (busy_[s] || head_[s] >= queue_[s].size()) continue;
      int32_t index = queue_[s][head_[s]];
      if (!dependencies_done(index)) continue;
      busy_[s] = true;
      start_op(index);
      progress = true;
    }
  }
}

void RankActor::start_op(int32_t index) {
  const Op& op = program_.ops[size_t(index)];
  switch (op.kind) {
    case OpKind::Send:
      activities_.send(replay_.op_channel(rank_, index), double(op.bytes), p2p_payload(index, op.tag),
                       make_tag(TagKind::Send, uint64_t(index)));
      transfer_started();
      break;
    case OpKind::Recv:
      activities_.recv(replay_.op_channel(rank_, index), make_tag(TagKind::Recv, uint64_t(index)));
      transfer_started();
      break;
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllToAll:
    case OpKind::AllReduce:
      start_collective(index);
      break;
    default:
      advance_clock(SimEngine::now());
      computing_ = true;
      if (replay_.compute_runs_alone())
        activities_.timer(replay_.op_seconds(op), make_tag(TagKind::Compute, uint64_t(index)));
      else
        activities_.exec(host_, replay_.exec_amount(op), make_tag(TagKind::Compute, uint64_t(index)));
      ++outcome_.activities;
  }
}

void RankActor::start_collective(int32_t index) {
  const Op& op = program_.ops[size_t(index)];
  int group = program_.collectives[size_t(op.coll)].group;
  if (group_sequence_.size() <= size_t(group)) group_sequence_.resize(size_t(group) + 1, 0);
  collective_ = Collective{};
  collective_.op = index;
  collective_.steps = &replay_.collective_steps(rank_, op.coll);
  collective_.sequence = group_sequence_[size_t(group)]++;
  collective_.posted_at = SimEngine::now();
  advance_collective();
}

// Posts every transfer the step order allows, and completes the op after the last.
void RankActor::advance_collective() {
  Collective& c = collective_;
  const CollectiveSteps& steps = *c.steps;
  const bool direct = steps.order == StepOrder::Direct, ring = steps.order == StepOrder::Ring;
  while (c.recvs_posted < steps.recvs.size() && (direct || c.recvs_posted == c.recvs_done)) {
    activities_.recv(steps.recvs[c.recvs_posted].channel, make_tag(TagKind::CollectiveRecv, c.recvs_posted));
    ++c.recvs_posted;
    transfer_started();
  }
  while (c.sends_posted < steps.sends.size() &&
         (direct || (c.sends_posted == c.sends_done && (!ring || c.recvs_done >= c.sends_posted)))) {
    const CollectiveTransfer& send = steps.sends[c.sends_posted];
    // A merged ring step first spends the latency of the steps it replaces (bar its own).
    if (send.delay > 0) {
      activities_.timer(send.delay, make_tag(TagKind::CollectiveDelay, c.sends_posted));
      ++outcome_.activities;
    } else {
      post_collective_send(c.sends_posted);
    }
    ++c.sends_posted;
    transfer_started();
  }
  if (c.sends_done == steps.sends.size() && c.recvs_done == steps.recvs.size()) {
    record(RecordKind::Collective, c.op, c.posted_at, SimEngine::now());
    int32_t finished = c.op;
    c = Collective{};
    complete_op(finished, SimEngine::now());
  }
}

void RankActor::post_collective_send(uint64_t index) {
  const Collective& c = collective_;
  const CollectiveTransfer& send = c.steps->sends[index];
  uint64_t step = c.steps->order == StepOrder::Ring ? index : 0;
  activities_.send(send.channel, send.bytes, collective_payload(c.sequence, step),
                   make_tag(TagKind::CollectiveSend, index));
}

void RankActor::handle(const Completion& done) {
  auto kind = TagKind(done.tag >> kTagKindShift);
  uint64_t index = tag_index(done.tag);
  if (kind == TagKind::Compute) {
    advance_clock(done.finish);
    computing_ = false;
    record(RecordKind::Compute, int32_t(index), done.start, done.finish);
    complete_op(int32_t(index), done.finish);
    return;
  }
  if (kind == TagKind::CollectiveDelay) {  // the transfer continues: still in flight
    post_collective_send(index);
    return;
  }
  handle_transfer(kind, index, done);
}

void RankActor::handle_transfer(TagKind kind, uint64_t index, const Completion& done) {
  transfer_finished();
  if (kind == TagKind::Send) {
    record(RecordKind::Send, int32_t(index), done.start, done.finish, flow_id(rank_, int64_t(index)));
    ++outcome_.activities;
    ++outcome_.transfers;
    complete_op(int32_t(index), done.finish);
  } else if (kind == TagKind::Recv) {
    const Op& op = program_.ops[index];
    const P2pPayload sent = decode_p2p_payload(done.payload);
    if (!sent.valid || sent.tag != op.tag)
      throw ScheduleError(
          fmt::format("op {} (recv tag {} from rank {}) paired with a send of tag {}: the ranks "
                      "post their messages in different orders",
                      index, op.tag, op.peer, sent.valid ? sent.tag : -1));
    record(RecordKind::Recv, int32_t(index), done.start, done.finish, flow_id(op.peer, sent.send_op));
    complete_op(int32_t(index), done.finish);
  } else {
    Collective& c = collective_;
    if (kind == TagKind::CollectiveSend) {
      ++outcome_.activities;
      ++outcome_.transfers;
      ++c.sends_done;
    } else {
      uint64_t step = c.steps->order == StepOrder::Ring ? index : 0;
      if (done.payload != collective_payload(c.sequence, step))
        throw ScheduleError(
            fmt::format("op {}: collective transfer from rank {} belongs to another collective "
                        "or step; the group's members run its collectives in different orders",
                        c.op, c.steps->recvs[index].peer));
      ++c.recvs_done;
    }
    advance_collective();
  }
}

void RankActor::complete_op(int32_t index, double at) {
  const Op& op = program_.ops[size_t(index)];
  for (uint32_t k = dependents_begin_[size_t(index)]; k < dependents_begin_[size_t(index) + 1]; ++k)
    --pending_deps_[size_t(dependents_[k])];
  ++completed_;
  size_t stream = size_t(op.stream);
  busy_[stream] = false;
  ++head_[stream];
  if (op.phase == Phase::Forward) outcome_.forward_finish = std::max(outcome_.forward_finish, at);
}

bool RankActor::wakes_for(const void* actor, uint64_t tag) {
  // Merged-step delays post a send when they expire; only compute ops may finish unobserved.
  if (TagKind(tag >> kTagKindShift) != TagKind::Compute) return true;
  return static_cast<const RankActor*>(actor)->completion_enables(int32_t(tag_index(tag)));
}

bool RankActor::completion_enables(int32_t index) const {
  if (completed_ + 1 == program_.ops.size()) return true;  // the program's end time
  // An op waiting on this one starts if this is its last dependency and its stream is free at
  // it; the op's own stream frees up too, so its next op may start.
  const size_t own = size_t(program_.ops[size_t(index)].stream);
  auto starts_after = [&](int32_t candidate, uint32_t deps_left) {
    size_t s = size_t(program_.ops[size_t(candidate)].stream);
    bool at_head = s == own ? head_[s] + 1 < queue_[s].size() && queue_[s][head_[s] + 1] == candidate
                            : !busy_[s] && head_[s] < queue_[s].size() && queue_[s][head_[s]] == candidate;
    return at_head && pending_deps_[size_t(candidate)] == deps_left;
  };
  for (uint32_t k = dependents_begin_[size_t(index)]; k < dependents_begin_[size_t(index) + 1]; ++k)
    if (starts_after(dependents_[k], 1)) return true;
  return head_[own] + 1 < queue_[own].size() && starts_after(queue_[own][head_[own] + 1], 0);
}

// Communication kernels occupy SMs from launch to completion, waiting included.
void RankActor::transfer_started() {
  advance_clock(SimEngine::now());
  if (transfers_in_flight_++ == 0 && replay_.slows_compute()) SimEngine::set_power_state(host_, 1);
}

void RankActor::transfer_finished() {
  advance_clock(SimEngine::now());
  if (--transfers_in_flight_ == 0 && replay_.slows_compute()) SimEngine::set_power_state(host_, 0);
}

// The actor sees its own events in time order, so the counters integrate exactly.
void RankActor::advance_clock(double at) {
  double elapsed = at - last_change_;
  if (computing_) outcome_.compute_s += elapsed;
  if (transfers_in_flight_ > 0) outcome_.comm_s += elapsed;
  if (computing_ || transfers_in_flight_ > 0) outcome_.busy_s += elapsed;
  last_change_ = at;
}

void RankActor::record(RecordKind kind, int32_t op, double start, double finish, int64_t flow) {
  if (!records_) return;
  Record r;
  r.start = start;
  r.finish = finish;
  r.flow = flow;
  r.op = op;
  r.kind = kind;
  outcome_.records.push_back(r);
}

std::string RankActor::describe_wait() const {
  std::string text = fmt::format("rank {}:", rank_);
  for (size_t s = 0; s < size_t(kNumStreams); ++s) {
    if (head_[s] >= queue_[s].size()) continue;
    int32_t index = queue_[s][head_[s]];
    const Op& op = program_.ops[size_t(index)];
    text +=
        fmt::format(" {} stream at op {} ({} step {}{}{})", to_string(Stream(s)), index, to_string(op.kind), op.step,
                    op.peer >= 0 ? fmt::format(" peer {}", op.peer) : "", busy_[s] ? "" : ", dependencies pending");
  }
  return text;
}

}  // namespace wallfacer::sim
