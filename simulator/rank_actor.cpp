#include "rank_actor.hpp"

#include <fmt/format.h>

#include <exception>

#include <wallfacer/core/errors.hpp>

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
    : timed_compute_(replay.compute_runs_alone()),
      slows_compute_(replay.slows_compute()),
      host_(replay.host_of_rank(rank)),
      records_(replay.records_ops(rank)),
      replay_(replay),
      rank_(rank),
      program_(replay.schedule().ranks[size_t(rank)]),
      outcome_(replay.outcome(rank)) {
  index_program();
  if (records_) outcome_.records.reserve(program_.ops.size());
  activities_.keep_times(records_);
  if (timed_compute_) activities_.set_wake_policy(&RankActor::wakes_for, this);
}

void RankActor::run() {
  try {
    loop();
  } catch (const std::exception& e) {
    replay_.fail(SimEngine::now(), rank_, fmt::format("rank {}: {}", rank_, e.what()));
  }
  publish();
}

void RankActor::publish() {
  outcome_.compute_s = compute_s_;
  outcome_.comm_s = comm_s_;
  outcome_.busy_s = busy_s_;
  outcome_.forward_finish = forward_finish_;
  outcome_.activities = activities_run_;
  outcome_.transfers = transfers_sent_;
}

void RankActor::loop() {
  now_ = SimEngine::now();
  start_ready();
  while (completed_ < op_count_) {
    if (activities_.empty()) return;  // waits on itself: describe_wait() reports it
    Completion done = activities_.wait_any();
    now_ = activities_.woken_at();
    handle(done);
    start_ready();
  }
  outcome_.finished = true;
  outcome_.finish = now_;
}

void RankActor::index_program() {
  const size_t count = program_.ops.size();
  op_count_ = uint32_t(count);  // op indices are int32_t
  ops_storage_.resize(count + 1);
  ops_ = ops_storage_.data();
  std::vector<uint32_t> dependents_count(count + 1, 0);
  head_.fill(-1);
  std::array<int32_t, kNumStreams> last_in_stream;
  last_in_stream.fill(-1);
  for (size_t i = 0; i < count; ++i) {
    const Op& op = program_.ops[i];
    RunOp& run = ops_[i];
    run.pending = op.dep_count;
    run.stream = uint8_t(op.stream);
    run.forward = op.phase == Phase::Forward;
    run.tag = op.tag;
    if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
      run.kind = op.kind == OpKind::Send ? RunKind::Send : RunKind::Recv;
      run.target = replay_.op_channel(rank_, int32_t(i));
      run.amount = double(op.bytes);
    } else if (is_collective(op.kind)) {
      run.kind = RunKind::Collective;
      run.target = op.coll;
    } else {
      run.kind = RunKind::Compute;
      run.amount = replay_.op_seconds(op);
    }
    const size_t stream = size_t(op.stream);
    if (last_in_stream[stream] < 0)
      head_[stream] = int32_t(i);
    else
      ops_[size_t(last_in_stream[stream])].next_in_stream = int32_t(i);
    last_in_stream[stream] = int32_t(i);
    // A dependency that is no op of this rank never finishes: the op waits forever and the
    // replay reports the deadlock.
    for (const int32_t* dep = program_.deps_begin(op); dep != program_.deps_end(op); ++dep)
      if (*dep >= 0 && size_t(*dep) < count) ++dependents_count[size_t(*dep) + 1];
  }
  for (size_t i = 0; i < count; ++i)
    dependents_count[i + 1] += dependents_count[i];
  for (size_t i = 0; i <= count; ++i)
    ops_[i].dependents_begin = dependents_count[i];
  dependents_storage_.resize(dependents_count[count]);
  for (size_t i = 0; i < count; ++i) {
    const Op& op = program_.ops[i];
    for (const int32_t* dep = program_.deps_begin(op); dep != program_.deps_end(op); ++dep)
      if (*dep >= 0 && size_t(*dep) < count) dependents_storage_[dependents_count[size_t(*dep)]++] = int32_t(i);
  }
  dependents_ = dependents_storage_.data();
}

// Starting an op can complete it on the spot (an empty collective), which may free other
// streams, so sweep in stream order until nothing changes.
void RankActor::start_ready() {
  while (unsettled_streams_ != 0) {
    for (size_t s = 0; s < size_t(kNumStreams); ++s) {
      const uint8_t bit = uint8_t(1u << s);
      if (!(unsettled_streams_ & bit)) continue;
      unsettled_streams_ &= uint8_t(~bit);
      const int32_t index = head_[s];
      if (busy_[s] || index < 0 || ops_[size_t(index)].pending != 0) continue;
      busy_[s] = true;
      start_op(index);
    }
  }
}

void RankActor::start_op(int32_t index) {
  const RunOp& op = ops_[size_t(index)];
  switch (op.kind) {
    case RunKind::Send:
      activities_.send(op.target, op.amount, p2p_payload(index, op.tag), make_tag(TagKind::Send, uint64_t(index)));
      transfer_started();
      break;
    case RunKind::Recv:
      activities_.recv(op.target, make_tag(TagKind::Recv, uint64_t(index)));
      transfer_started();
      break;
    case RunKind::Collective:
      start_collective(index);
      break;
    case RunKind::Compute:
      advance_clock(now_);
      computing_ = true;
      if (timed_compute_)
        activities_.timer(op.amount, make_tag(TagKind::Compute, uint64_t(index)));
      else
        activities_.exec(host_, replay_.exec_amount(op.amount), make_tag(TagKind::Compute, uint64_t(index)));
      ++activities_run_;
  }
}

void RankActor::start_collective(int32_t index) {
  const int32_t coll = ops_[size_t(index)].target;
  int group = program_.collectives[size_t(coll)].group;
  if (group_sequence_.size() <= size_t(group)) group_sequence_.resize(size_t(group) + 1, 0);
  const uint64_t slot = ops_[size_t(index)].stream == uint8_t(Stream::Sync) ? kSyncSlot : kCollectiveSlot;
  Collective& c = collectives_[slot];
  c = Collective{};
  c.op = index;
  c.steps = &replay_.collective_steps(rank_, coll);
  c.sequence = group_sequence_[size_t(group)]++;
  c.posted_at = now_;
  advance_collective(slot);
}

// Posts every transfer the step order allows, and completes the op after the last.
void RankActor::advance_collective(uint64_t slot) {
  Collective& c = collectives_[slot];
  const uint64_t in_slot = slot << kSlotShift;
  const CollectiveSteps& steps = *c.steps;
  const bool direct = steps.order == StepOrder::Direct, ring = steps.order == StepOrder::Ring;
  // Ring steps are `width` transfers (one per ring channel): a step starts once the one before it
  // is done. Pairwise chains are steps of one transfer.
  const size_t width = ring ? size_t(steps.width) : 1;
  auto step_start = [width](size_t index) { return index / width * width; };
  while (c.recvs_posted < steps.recvs.size() && (direct || c.recvs_done >= step_start(c.recvs_posted))) {
    activities_.recv(steps.recvs[c.recvs_posted].channel, make_tag(TagKind::CollectiveRecv, in_slot | c.recvs_posted));
    ++c.recvs_posted;
    transfer_started();
  }
  while (c.sends_posted < steps.sends.size() && (direct || (c.sends_done >= step_start(c.sends_posted) &&
                                                            (!ring || c.recvs_done >= step_start(c.sends_posted))))) {
    const CollectiveTransfer& send = steps.sends[c.sends_posted];
    // A merged ring step first spends the latency of the steps it replaces (bar its own).
    if (send.delay > 0) {
      activities_.timer(send.delay, make_tag(TagKind::CollectiveDelay, in_slot | c.sends_posted));
      ++activities_run_;
    } else {
      post_collective_send(in_slot | c.sends_posted);
    }
    ++c.sends_posted;
    transfer_started();
  }
  if (c.sends_done == steps.sends.size() && c.recvs_done == steps.recvs.size()) {
    record(RecordKind::Collective, c.op, c.posted_at, now_);
    int32_t finished = c.op;
    c = Collective{};
    complete_op(finished, now_);
  }
}

void RankActor::post_collective_send(uint64_t tagged_index) {
  const Collective& c = collectives_[tagged_index >> kSlotShift];
  const uint64_t index = tagged_index & ((uint64_t(1) << kSlotShift) - 1);
  const CollectiveTransfer& send = c.steps->sends[index];
  uint64_t step = c.steps->order == StepOrder::Ring ? index : 0;
  activities_.send(send.channel, send.bytes, collective_payload(c.sequence, step),
                   make_tag(TagKind::CollectiveSend, tagged_index));
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
    ++activities_run_;
    ++transfers_sent_;
    complete_op(int32_t(index), done.finish);
  } else if (kind == TagKind::Recv) {
    const P2pPayload sent = decode_p2p_payload(done.payload);
    if (!sent.valid || sent.tag != ops_[index].tag) {
      const Op& op = program_.ops[index];
      throw ScheduleError(
          fmt::format("op {} (recv tag {} from rank {}) paired with a send of tag {}: the ranks "
                      "post their messages in different orders",
                      index, op.tag, op.peer, sent.valid ? sent.tag : -1));
    }
    if (records_)
      record(RecordKind::Recv, int32_t(index), done.start, done.finish,
             flow_id(program_.ops[index].peer, sent.send_op));
    complete_op(int32_t(index), done.finish);
  } else {
    const uint64_t slot = index >> kSlotShift;
    index &= (uint64_t(1) << kSlotShift) - 1;
    Collective& c = collectives_[slot];
    if (kind == TagKind::CollectiveSend) {
      ++activities_run_;
      ++transfers_sent_;
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
    advance_collective(slot);
  }
}

void RankActor::complete_op(int32_t index, double at) {
  const RunOp& op = ops_[size_t(index)];
  for (uint32_t k = op.dependents_begin; k < ops_[size_t(index) + 1].dependents_begin; ++k) {
    RunOp& dependent = ops_[size_t(dependents_[k])];
    if (--dependent.pending == 0) unsettled_streams_ |= uint8_t(1u << dependent.stream);
  }
  ++completed_;
  busy_[op.stream] = false;
  head_[op.stream] = op.next_in_stream;
  unsettled_streams_ |= uint8_t(1u << op.stream);
  if (op.forward) forward_finish_ = std::max(forward_finish_, at);
}

bool RankActor::wakes_for(const void* actor, uint64_t tag) {
  // Merged-step delays post a send when they expire; only compute ops may finish unobserved.
  if (TagKind(tag >> kTagKindShift) != TagKind::Compute) return true;
  return static_cast<const RankActor*>(actor)->completion_enables(int32_t(tag_index(tag)));
}

bool RankActor::completion_enables(int32_t index) const {
  if (completed_ + 1 == op_count_) return true;  // the program's end time
  // An op waiting on this one starts if this is its last dependency and its stream is free at
  // it; the op's own stream frees up too, so its next op may start.
  const RunOp& op = ops_[size_t(index)];
  const size_t own = op.stream;
  auto starts_after = [&](int32_t candidate, uint32_t deps_left) {
    const RunOp& next = ops_[size_t(candidate)];
    size_t s = next.stream;
    bool at_head = s == own ? op.next_in_stream == candidate : !busy_[s] && head_[s] == candidate;
    return at_head && next.pending == deps_left;
  };
  for (uint32_t k = op.dependents_begin; k < ops_[size_t(index) + 1].dependents_begin; ++k)
    if (starts_after(dependents_[k], 1)) return true;
  return op.next_in_stream >= 0 && starts_after(op.next_in_stream, 0);
}

// Communication kernels occupy SMs from launch to completion, waiting included.
void RankActor::transfer_started() {
  advance_clock(now_);
  if (transfers_in_flight_++ == 0 && slows_compute_) SimEngine::set_power_state(host_, 1);
}

void RankActor::transfer_finished() {
  advance_clock(now_);
  if (--transfers_in_flight_ == 0 && slows_compute_) SimEngine::set_power_state(host_, 0);
}

// The actor sees its own events in time order, so the counters integrate exactly.
void RankActor::advance_clock(double at) {
  double elapsed = at - last_change_;
  if (computing_) compute_s_ += elapsed;
  if (transfers_in_flight_ > 0) comm_s_ += elapsed;
  if (computing_ || transfers_in_flight_ > 0) busy_s_ += elapsed;
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
    const int32_t index = head_[s];
    if (index < 0) continue;
    const Op& op = program_.ops[size_t(index)];
    text +=
        fmt::format(" {} stream at op {} ({} step {}{}{})", to_string(Stream(s)), index, to_string(op.kind), op.step,
                    op.peer >= 0 ? fmt::format(" peer {}", op.peer) : "", busy_[s] ? "" : ", dependencies pending");
  }
  return text;
}

}  // namespace wallfacer::sim
