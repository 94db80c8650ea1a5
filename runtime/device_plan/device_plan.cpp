// The device plan: rounds of NCCL calls from a maximal-progress simulation of the schedule's
// blocking semantics (see device_plan.hpp for why).
#include <wallfacer/runtime/device_plan.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/per_stream.hpp>

namespace wallfacer::runtime {
namespace {

bool is_p2p(OpKind kind) {
  return kind == OpKind::Send || kind == OpKind::Recv;
}

// (direction, peer, tag, occurrence) of every point-to-point op, and (group, occurrence) of
// every collective, of one rank.
struct OpKeys {
  std::vector<int> occurrence;  // per op
  std::map<std::tuple<bool, int, int, int>, int32_t> p2p;
  std::map<std::pair<int, int>, int32_t> collective;
};

OpKeys key_ops(const RankProgram& program) {
  OpKeys keys;
  keys.occurrence.assign(program.ops.size(), 0);
  std::map<std::tuple<bool, int, int>, int> p2p_count;
  std::map<int, int> coll_count;
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    if (is_p2p(op.kind)) {
      const bool send = op.kind == OpKind::Send;
      const int k = p2p_count[{send, op.peer, op.tag}]++;
      keys.occurrence[i] = k;
      keys.p2p[{send, op.peer, op.tag, k}] = int32_t(i);
    } else if (is_collective(op.kind)) {
      if (op.coll < 0 || size_t(op.coll) >= program.collectives.size())
        throw ScheduleError(fmt::format("rank {} op {}: collective index {} out of range", program.rank, i, op.coll));
      const int group = program.collectives[size_t(op.coll)].group;
      const int k = coll_count[group]++;
      keys.occurrence[i] = k;
      keys.collective[{group, k}] = int32_t(i);
    }
  }
  return keys;
}

int collective_group(const RankProgram& program, const Op& op) {
  return program.collectives[size_t(op.coll)].group;
}

bool deps_done(const RankProgram& program, const std::vector<char>& done, int32_t i) {
  const Op& op = program.ops[size_t(i)];
  for (const int32_t* d = program.deps_begin(op); d != program.deps_end(op); ++d) {
    if (*d < 0 || *d >= i)
      throw ScheduleError(fmt::format("rank {} op {}: dependency on op {} which is not earlier", program.rank, i, *d));
    if (!done[size_t(*d)]) return false;
  }
  return true;
}

// One rank in the simulation: what is done, where each stream stands, what each communication
// stream has posted and not yet completed.
struct SimRank {
  const RankProgram* program = nullptr;
  OpKeys keys;
  std::vector<char> done;
  std::array<std::vector<int32_t>, kNumStreams> stream_ops;
  std::array<size_t, kNumStreams> head{};
  OpPerStream posted = no_op_on_any_stream();
  int64_t remaining = 0;

  explicit SimRank(const RankProgram& p) : program(&p), keys(key_ops(p)), done(p.ops.size(), 0) {
    for (size_t i = 0; i < p.ops.size(); ++i)
      stream_ops[size_t(p.ops[i].stream)].push_back(int32_t(i));
    remaining = int64_t(p.ops.size());
  }
  // Runs compute ops (they complete at once) and posts communication heads, as far as possible.
  void advance() {
    for (bool progressed = true; progressed;) {
      progressed = false;
      auto& compute = stream_ops[size_t(Stream::Compute)];
      size_t& h = head[size_t(Stream::Compute)];
      while (h < compute.size() && deps_done(*program, done, compute[h])) {
        done[size_t(compute[h++])] = 1;
        --remaining;
        progressed = true;
      }
      for (Stream s : {Stream::Send, Stream::Recv, Stream::Collective, Stream::Sync}) {
        auto& ops = stream_ops[size_t(s)];
        size_t& hs = head[size_t(s)];
        if (posted[size_t(s)] < 0 && hs < ops.size() && deps_done(*program, done, ops[hs])) {
          posted[size_t(s)] = ops[hs++];
          progressed = true;
        }
      }
    }
  }
  std::string waits() const {
    std::string text;
    for (int s = 0; s < kNumStreams; ++s) {
      if (posted[size_t(s)] >= 0) {
        const Op& op = program->ops[size_t(posted[size_t(s)])];
        text += fmt::format(" [{} op {} ({}{}) posted]", to_string(Stream(s)), posted[size_t(s)], to_string(op.kind),
                            is_p2p(op.kind) ? fmt::format(" peer {} tag {}", op.peer, op.tag) : "");
      } else if (head[size_t(s)] < stream_ops[size_t(s)].size()) {
        text += fmt::format(" [{} op {} not ready]", to_string(Stream(s)), stream_ops[size_t(s)][head[size_t(s)]]);
      }
    }
    return text;
  }
};

P2pEntry entry_of(const SimRank& r, int32_t i) {
  const Op& op = r.program->ops[size_t(i)];
  return P2pEntry{i, op.kind == OpKind::Send, op.peer, op.tag, r.keys.occurrence[size_t(i)], op.bytes};
}

// The partner of every send: the receive with the same (source, destination, tag, occurrence).
void check_partners(const std::vector<SimRank>& ranks) {
  for (const SimRank& r : ranks)
    for (const auto& [key, i] : r.keys.p2p) {
      const auto& [send, peer, tag, k] = key;
      const Op& op = r.program->ops[size_t(i)];
      if (peer < 0 || size_t(peer) >= ranks.size())
        throw ScheduleError(fmt::format("rank {} op {}: peer {} is not a rank", r.program->rank, i, peer));
      auto it = ranks[size_t(peer)].keys.p2p.find({!send, r.program->rank, tag, k});
      if (it == ranks[size_t(peer)].keys.p2p.end())
        throw ScheduleError(fmt::format("rank {} op {}: {} #{} {} rank {} tag {} has no matching {}", r.program->rank,
                                        i, send ? "send" : "receive", k, send ? "to" : "from", peer, tag,
                                        send ? "receive" : "send"));
      const Op& other = ranks[size_t(peer)].program->ops[size_t(it->second)];
      if (other.bytes != op.bytes)
        throw ScheduleError(fmt::format("rank {} op {}: {} bytes but its partner (rank {} op {}) has {}",
                                        r.program->rank, i, op.bytes, peer, it->second, other.bytes));
    }
}

// The collectives every rank of the world completes in this round: those whose group members have
// all posted the same (group, occurrence). Members that posted different kinds are an error.
bool collective_complete(const std::vector<SimRank>& ranks, const Plan& plan, const SimRank& r, int32_t i) {
  const Op& op = r.program->ops[size_t(i)];
  const int group = collective_group(*r.program, op);
  if (group < 0 || size_t(group) >= plan.groups.size())
    throw ScheduleError(fmt::format("rank {} op {}: collective on unknown group {}", r.program->rank, i, group));
  const int k = r.keys.occurrence[size_t(i)];
  for (int member : plan.groups[size_t(group)].ranks) {
    const SimRank& m = ranks[size_t(member)];
    const int32_t p = m.posted[size_t(op.stream)];
    if (p < 0) return false;
    const Op& mop = m.program->ops[size_t(p)];
    if (collective_group(*m.program, mop) != group || m.keys.occurrence[size_t(p)] != k) return false;
    if (mop.kind != op.kind)
      throw ScheduleError(fmt::format("group '{}' collective #{}: rank {} runs {} but rank {} runs {}",
                                      plan.groups[size_t(group)].name, k, r.program->rank, to_string(op.kind), member,
                                      to_string(mop.kind)));
  }
  return true;
}

void fill_call_links(const RankProgram& program, RankDevicePlan& rank) {
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    for (const int32_t* d = program.deps_begin(op); d != program.deps_end(op); ++d) {
      const int32_t call = rank.call_of_op[size_t(*d)];
      if (op.stream == Stream::Compute && call >= 0) {
        auto& consumers = rank.calls[size_t(call)].consumers;
        if (consumers.empty() || consumers.back() != int32_t(i)) consumers.push_back(int32_t(i));
      }
      const int32_t mine = rank.call_of_op[i];
      if (mine >= 0 && program.ops[size_t(*d)].stream == Stream::Compute)
        rank.calls[size_t(mine)].after_compute = std::max(rank.calls[size_t(mine)].after_compute, *d);
    }
  }
}

void add_round_calls(SimRank& r, RankDevicePlan& out, std::vector<P2pEntry>& entries,
                     const std::vector<int32_t>& collectives, int round) {
  auto finish = [&](int32_t i) {
    out.call_of_op[size_t(i)] = int32_t(out.calls.size());
    r.done[size_t(i)] = 1;
    --r.remaining;
    r.posted[size_t(r.program->ops[size_t(i)].stream)] = -1;
  };
  if (!entries.empty()) {
    std::sort(entries.begin(), entries.end(), [](const P2pEntry& a, const P2pEntry& b) {
      return std::tuple(a.peer, !a.send, a.tag, a.occurrence) < std::tuple(b.peer, !b.send, b.tag, b.occurrence);
    });
    NcclCall call;
    call.kind = CallKind::P2pGroup;
    call.round = round;
    for (const P2pEntry& e : entries)
      finish(e.op);
    call.entries = std::move(entries);
    out.calls.push_back(std::move(call));
  }
  for (int32_t collective : collectives) {
    const Op& op = r.program->ops[size_t(collective)];
    NcclCall call;
    call.kind = CallKind::Collective;
    call.round = round;
    call.op = collective;
    call.group = collective_group(*r.program, op);
    call.occurrence = r.keys.occurrence[size_t(collective)];
    call.collective = op.kind;
    finish(collective);
    out.calls.push_back(std::move(call));
  }
}

}  // namespace

const char* to_string(DeviceStream stream) {
  return stream == DeviceStream::Compute ? "compute" : "comm";
}
const char* to_string(CallKind kind) {
  return kind == CallKind::P2pGroup ? "p2p-group" : "collective";
}

std::pair<int32_t, int32_t> RankDevicePlan::find_p2p(bool send, int peer, int tag, int occurrence) const {
  for (size_t c = 0; c < calls.size(); ++c)
    for (size_t e = 0; e < calls[c].entries.size(); ++e) {
      const P2pEntry& entry = calls[c].entries[e];
      if (entry.send == send && entry.peer == peer && entry.tag == tag && entry.occurrence == occurrence)
        return {int32_t(c), int32_t(e)};
    }
  return {-1, -1};
}

int32_t RankDevicePlan::find_collective(int group, int occurrence) const {
  for (size_t c = 0; c < calls.size(); ++c)
    if (calls[c].kind == CallKind::Collective && calls[c].group == group && calls[c].occurrence == occurrence)
      return int32_t(c);
  return -1;
}

DevicePlan make_device_plan(const Schedule& schedule, const Plan& plan) {
  const int P = plan.num_ranks();
  if (int(schedule.ranks.size()) != P)
    throw ScheduleError(fmt::format("the device plan needs every rank's program: the schedule holds {} of {} ranks",
                                    schedule.ranks.size(), P));
  DevicePlan device;
  for (size_t g = 0; g < plan.groups.size(); ++g)
    device.splits.push_back(CommSplit{int(g), plan.groups[g].name, plan.groups[g].ranks});
  std::vector<SimRank> ranks;
  ranks.reserve(size_t(P));
  for (int r = 0; r < P; ++r) {
    if (schedule.ranks[size_t(r)].rank != r)
      throw ScheduleError(fmt::format("schedule rank {} is stored at position {}", schedule.ranks[size_t(r)].rank, r));
    ranks.emplace_back(schedule.ranks[size_t(r)]);
    RankDevicePlan rp;
    rp.rank = r;
    for (const Op& op : schedule.ranks[size_t(r)].ops)
      rp.stream_of_op.push_back(op.stream == Stream::Compute ? DeviceStream::Compute : DeviceStream::Comm);
    rp.call_of_op.assign(schedule.ranks[size_t(r)].ops.size(), -1);
    for (size_t g = 0; g < plan.groups.size(); ++g)
      if (std::find(plan.groups[g].ranks.begin(), plan.groups[g].ranks.end(), r) != plan.groups[g].ranks.end())
        rp.groups.push_back(int(g));
    device.ranks.push_back(std::move(rp));
  }
  check_partners(ranks);
  for (int round = 0;; ++round) {
    int64_t remaining = 0;
    for (SimRank& r : ranks) {
      r.advance();
      remaining += r.remaining;
    }
    if (remaining == 0) {
      device.rounds = round;
      break;
    }
    std::vector<std::vector<P2pEntry>> entries(static_cast<size_t>(P));
    std::vector<std::vector<int32_t>> collectives(static_cast<size_t>(P));  // collective stream, then sync
    bool matched = false;
    for (SimRank& r : ranks) {
      const int32_t s = r.posted[size_t(Stream::Send)];
      if (s >= 0) {
        const P2pEntry e = entry_of(r, s);
        SimRank& peer = ranks[size_t(e.peer)];
        const int32_t partner = peer.keys.p2p.at({false, r.program->rank, e.tag, e.occurrence});
        if (peer.posted[size_t(Stream::Recv)] == partner) {
          entries[size_t(r.program->rank)].push_back(e);
          entries[size_t(e.peer)].push_back(entry_of(peer, partner));
          matched = true;
        }
      }
      for (Stream stream : {Stream::Collective, Stream::Sync}) {
        const int32_t c = r.posted[size_t(stream)];
        if (c >= 0 && collective_complete(ranks, plan, r, c)) {
          collectives[size_t(r.program->rank)].push_back(c);
          matched = true;
        }
      }
    }
    if (!matched) {
      std::string report;
      for (const SimRank& r : ranks)
        if (r.remaining > 0) report += fmt::format("\n  rank {}:{}", r.program->rank, r.waits());
      throw ScheduleError(fmt::format("the schedule cannot complete under its blocking semantics:{}", report));
    }
    for (int r = 0; r < P; ++r)
      add_round_calls(ranks[size_t(r)], device.ranks[size_t(r)], entries[size_t(r)], collectives[size_t(r)], round);
  }
  for (int r = 0; r < P; ++r)
    fill_call_links(schedule.ranks[size_t(r)], device.ranks[size_t(r)]);
  return device;
}

CallSequencer::CallSequencer(RankDevicePlan plan) : plan_(std::move(plan)), posted_(plan_.calls.size(), 0) {
  for (size_t c = 0; c < plan_.calls.size(); ++c) {
    const NcclCall& call = plan_.calls[c];
    for (size_t e = 0; e < call.entries.size(); ++e) {
      const P2pEntry& entry = call.entries[e];
      p2p_index_[{entry.send, entry.peer, entry.tag, entry.occurrence}] = Slot{int32_t(c), int32_t(e)};
    }
    if (call.kind == CallKind::Collective) collective_index_[{call.group, call.occurrence}] = int32_t(c);
  }
}

CallSequencer::Slot CallSequencer::post_p2p(bool send, int peer, int tag) {
  const int k = p2p_seen_[{send, peer, tag}]++;
  auto it = p2p_index_.find({send, peer, tag, k});
  if (it == p2p_index_.end())
    throw ScheduleError(fmt::format("rank {}: {} #{} {} rank {} tag {} is not in the device plan", plan_.rank,
                                    send ? "send" : "receive", k, send ? "to" : "from", peer, tag));
  ++posted_[size_t(it->second.call)];
  return it->second;
}

CallSequencer::Slot CallSequencer::post_collective(int group) {
  const int k = collective_seen_[group]++;
  auto it = collective_index_.find({group, k});
  if (it == collective_index_.end())
    throw ScheduleError(
        fmt::format("rank {}: collective #{} on group {} is not in the device plan", plan_.rank, k, group));
  ++posted_[size_t(it->second)];
  return Slot{it->second, -1};
}

std::vector<int32_t> CallSequencer::take_issuable() {
  std::vector<int32_t> ready;
  while (next_ < plan_.calls.size()) {
    const NcclCall& call = plan_.calls[next_];
    const int needed = call.kind == CallKind::P2pGroup ? int(call.entries.size()) : 1;
    if (posted_[next_] < needed) break;
    ready.push_back(int32_t(next_++));
  }
  return ready;
}

void CallSequencer::restart() {
  for (size_t c = next_; c < posted_.size(); ++c)
    if (posted_[c] > 0)
      throw ScheduleError(
          fmt::format("rank {}: the program starts over while call #{} of its device plan ({}, round "
                      "{}) has {} of its ops posted and was never issued",
                      plan_.rank, c, to_string(plan_.calls[c].kind), plan_.calls[c].round, posted_[c]));
  p2p_seen_.clear();
  collective_seen_.clear();
  std::fill(posted_.begin(), posted_.end(), 0);
  next_ = 0;
}

std::string describe_calls(const RankDevicePlan& rank) {
  std::string text = fmt::format("rank {}: {} NCCL calls\n", rank.rank, rank.calls.size());
  for (size_t c = 0; c < rank.calls.size(); ++c) {
    const NcclCall& call = rank.calls[c];
    text += fmt::format("  #{} round {} {}", c, call.round, to_string(call.kind));
    if (call.kind == CallKind::Collective)
      text +=
          fmt::format(" {} on group {} (#{}), op {}", to_string(call.collective), call.group, call.occurrence, call.op);
    for (const P2pEntry& e : call.entries)
      text += fmt::format(" {}{}:tag{}:{}B(op {})", e.send ? "send>" : "recv<", e.peer, e.tag, e.bytes, e.op);
    text += fmt::format("; after compute op {}, {} consumers\n", call.after_compute, call.consumers.size());
  }
  return text;
}

}  // namespace wallfacer::runtime
