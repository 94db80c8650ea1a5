// An independent check of a device plan: structural agreement with the schedule, and a replay of
// every rank's NCCL calls on one serial queue per rank under NCCL's rule (a call runs once the
// calls before it on its queue have finished, and finishes once every partner call runs too). It
// does not use the rounds the plan was built from except to compare them between partners.
#include <wallfacer/runtime/device_plan.hpp>
#include <wallfacer/schedule/per_stream.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace wallfacer::runtime {
namespace {

using Problems = std::vector<std::string>;

// The calls of other ranks that call c of rank r needs issued before it can finish.
std::vector<std::pair<int, int32_t>> partners(const DevicePlan& device, const Plan& plan, int r, size_t c,
                                              Problems& problems) {
  std::vector<std::pair<int, int32_t>> out;
  const NcclCall& call = device.ranks[size_t(r)].calls[c];
  if (call.kind == CallKind::P2pGroup) {
    for (const P2pEntry& e : call.entries) {
      if (e.peer < 0 || size_t(e.peer) >= device.ranks.size()) {
        problems.push_back(fmt::format("rank {} call {}: peer {} is not a rank", r, c, e.peer));
        continue;
      }
      const RankDevicePlan& peer = device.ranks[size_t(e.peer)];
      auto [pc, pe] = peer.find_p2p(!e.send, r, e.tag, e.occurrence);
      if (pc < 0) {
        problems.push_back(fmt::format("rank {} call {}: no partner for {} rank {} tag {} #{}", r, c,
                                       e.send ? "send to" : "receive from", e.peer, e.tag, e.occurrence));
        continue;
      }
      const NcclCall& other = peer.calls[size_t(pc)];
      if (other.round != call.round)
        problems.push_back(fmt::format("rank {} call {} (round {}) and its partner rank {} call {} (round {})", r, c,
                                       call.round, e.peer, pc, other.round));
      if (other.entries[size_t(pe)].bytes != e.bytes)
        problems.push_back(fmt::format("rank {} call {}: {} bytes against {} at rank {}", r, c, e.bytes,
                                       other.entries[size_t(pe)].bytes, e.peer));
      out.emplace_back(e.peer, pc);
    }
    return out;
  }
  if (call.group < 0 || size_t(call.group) >= plan.groups.size()) {
    problems.push_back(fmt::format("rank {} call {}: unknown group {}", r, c, call.group));
    return out;
  }
  for (int member : plan.groups[size_t(call.group)].ranks) {
    const int32_t mc = device.ranks[size_t(member)].find_collective(call.group, call.occurrence);
    if (mc < 0) {
      problems.push_back(fmt::format("rank {} call {}: member {} never issues collective #{} of group '{}'", r, c,
                                     member, call.occurrence, plan.groups[size_t(call.group)].name));
      continue;
    }
    const NcclCall& other = device.ranks[size_t(member)].calls[size_t(mc)];
    if (other.round != call.round || other.collective != call.collective)
      problems.push_back(fmt::format("rank {} call {}: member {} issues it as {} in round {}, here {} in round {}", r,
                                     c, member, to_string(other.collective), other.round, to_string(call.collective),
                                     call.round));
    out.emplace_back(member, mc);
  }
  return out;
}

// Every communication op in exactly one call, which names it faithfully; compute ops in none.
void check_structure(const DevicePlan& device, const Schedule& schedule, Problems& problems) {
  for (size_t r = 0; r < device.ranks.size(); ++r) {
    const RankDevicePlan& rank = device.ranks[r];
    const RankProgram& program = schedule.ranks[r];
    std::vector<int> seen(program.ops.size(), 0);
    for (size_t c = 0; c < rank.calls.size(); ++c) {
      const NcclCall& call = rank.calls[c];
      if (c > 0 && call.round < rank.calls[c - 1].round)
        problems.push_back(
            fmt::format("rank {} call {}: round {} after round {}", r, c, call.round, rank.calls[c - 1].round));
      std::vector<int32_t> ops;
      for (const P2pEntry& e : call.entries) {
        ops.push_back(e.op);
        const Op& op = program.ops.at(size_t(e.op));
        if (op.kind != (e.send ? OpKind::Send : OpKind::Recv) || op.peer != e.peer || op.tag != e.tag)
          problems.push_back(fmt::format("rank {} call {}: entry for op {} does not describe it", r, c, e.op));
      }
      if (call.kind == CallKind::Collective) {
        ops.push_back(call.op);
        const Op& op = program.ops.at(size_t(call.op));
        if (op.kind != call.collective || program.collectives.at(size_t(op.coll)).group != call.group)
          problems.push_back(fmt::format("rank {} call {}: does not describe op {}", r, c, call.op));
      }
      for (int32_t i : ops) {
        ++seen[size_t(i)];
        if (rank.call_of_op[size_t(i)] != int32_t(c))
          problems.push_back(
              fmt::format("rank {} op {}: call_of_op says {}, call {} holds it", r, i, rank.call_of_op[size_t(i)], c));
      }
    }
    for (size_t i = 0; i < program.ops.size(); ++i) {
      const bool comm = program.ops[i].stream != Stream::Compute;
      if (seen[i] != (comm ? 1 : 0))
        problems.push_back(
            fmt::format("rank {} op {} ({}) is in {} calls", r, i, to_string(program.ops[i].kind), seen[i]));
      if (rank.stream_of_op[i] != (comm ? DeviceStream::Comm : DeviceStream::Compute))
        problems.push_back(fmt::format("rank {} op {}: on the wrong device stream", r, i));
    }
  }
}

// The executor's view of one rank during the replay: an op can be posted (or a compute op run)
// once its stream predecessor and its dependencies are complete.
struct ReplayRank {
  const RankProgram* program;
  std::vector<char> complete;
  std::vector<int32_t> prev_on_stream;
  std::vector<int32_t> compute_ops;
  size_t compute_head = 0;
  explicit ReplayRank(const RankProgram& p) : program(&p), complete(p.ops.size(), 0), prev_on_stream(p.ops.size(), -1) {
    OpPerStream last = no_op_on_any_stream();
    for (size_t i = 0; i < p.ops.size(); ++i) {
      prev_on_stream[i] = last[size_t(p.ops[i].stream)];
      last[size_t(p.ops[i].stream)] = int32_t(i);
      if (p.ops[i].stream == Stream::Compute) compute_ops.push_back(int32_t(i));
    }
  }
  bool can_start(int32_t i) const {
    const Op& op = program->ops[size_t(i)];
    if (prev_on_stream[size_t(i)] >= 0 && !complete[size_t(prev_on_stream[size_t(i)])]) return false;
    for (const int32_t* d = program->deps_begin(op); d != program->deps_end(op); ++d)
      if (!complete[size_t(*d)]) return false;
    return true;
  }
  void run_compute() {
    while (compute_head < compute_ops.size() && can_start(compute_ops[compute_head]))
      complete[size_t(compute_ops[compute_head++])] = 1;
  }
};

std::vector<int32_t> ops_of(const NcclCall& call) {
  std::vector<int32_t> ops;
  for (const P2pEntry& e : call.entries)
    ops.push_back(e.op);
  if (call.kind == CallKind::Collective) ops.push_back(call.op);
  return ops;
}

void replay(const DevicePlan& device, const Schedule& schedule, const Plan& plan, Problems& problems) {
  const size_t P = device.ranks.size();
  std::vector<ReplayRank> ranks;
  for (size_t r = 0; r < P; ++r)
    ranks.emplace_back(schedule.ranks[r]);
  std::vector<std::vector<std::vector<std::pair<int, int32_t>>>> needs(P);
  for (size_t r = 0; r < P; ++r)
    for (size_t c = 0; c < device.ranks[r].calls.size(); ++c)
      needs[r].push_back(partners(device, plan, int(r), c, problems));
  if (!problems.empty()) return;
  std::vector<size_t> issued(P, 0), finished(P, 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (size_t r = 0; r < P; ++r) {
      ranks[r].run_compute();
      const auto& calls = device.ranks[r].calls;
      // Issue the next call once the executor could have posted every op in it.
      while (issued[r] < calls.size()) {
        const auto ops = ops_of(calls[issued[r]]);
        if (!std::all_of(ops.begin(), ops.end(), [&](int32_t i) { return ranks[r].can_start(i); })) break;
        ++issued[r];
        progressed = true;
      }
      // The call at the head of the queue runs; it finishes once every partner call runs too (is
      // issued and at the head of its own queue) or has finished.
      while (finished[r] < issued[r]) {
        const auto& need = needs[r][finished[r]];
        if (!std::all_of(need.begin(), need.end(), [&](auto p) {
              return issued[size_t(p.first)] > size_t(p.second) && finished[size_t(p.first)] >= size_t(p.second);
            }))
          break;
        for (int32_t i : ops_of(calls[finished[r]]))
          ranks[r].complete[size_t(i)] = 1;
        ++finished[r];
        progressed = true;
      }
    }
  }
  for (size_t r = 0; r < P; ++r) {
    if (finished[r] < device.ranks[r].calls.size())
      problems.push_back(fmt::format("rank {}: the replay stops at call {} of {} (issued {})", r, finished[r],
                                     device.ranks[r].calls.size(), issued[r]));
    else if (std::count(ranks[r].complete.begin(), ranks[r].complete.end(), 0) > 0)
      problems.push_back(fmt::format("rank {}: compute ops left after every call finished", r));
  }
}

}  // namespace

std::vector<std::string> verify_device_plan(const DevicePlan& device, const Schedule& schedule, const Plan& plan) {
  Problems problems;
  if (device.ranks.size() != schedule.ranks.size() || int(device.ranks.size()) != plan.num_ranks()) {
    problems.push_back(fmt::format("the device plan has {} ranks, the schedule {}, the plan {}", device.ranks.size(),
                                   schedule.ranks.size(), plan.num_ranks()));
    return problems;
  }
  if (device.splits.size() != plan.groups.size())
    problems.push_back(fmt::format("{} communicator splits for {} groups", device.splits.size(), plan.groups.size()));
  for (size_t g = 0; g < std::min(device.splits.size(), plan.groups.size()); ++g)
    if (device.splits[g].members != plan.groups[g].ranks || device.splits[g].group != int(g))
      problems.push_back(fmt::format("split {} does not list group '{}' in its order", g, plan.groups[g].name));
  for (size_t r = 0; r < device.ranks.size(); ++r)
    if (device.ranks[r].call_of_op.size() != schedule.ranks[r].ops.size() ||
        device.ranks[r].stream_of_op.size() != schedule.ranks[r].ops.size()) {
      problems.push_back(fmt::format("rank {}: per-op tables do not cover its program", r));
      return problems;
    }
  check_structure(device, schedule, problems);
  if (problems.empty()) replay(device, schedule, plan, problems);
  return problems;
}

}  // namespace wallfacer::runtime
