// The device plan against the schedules it is derived from: every strategy and parameter set the
// planner enumerates on 1, 2, 4 and 8 ranks yields a plan the independent verifier accepts; a
// ring pairs each step's send with its receive in one group call; splits keep the group order;
// the verifier rejects a plan that issues a ring's transfers one by one, partners in different
// rounds, and a lost op; a schedule that cannot complete is refused with what each rank waits on.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/device_plan.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "runtime/hand_programs.hpp"

namespace wallfacer::testing {
namespace {

using runtime::CallKind;
using runtime::DevicePlan;
using runtime::make_device_plan;
using runtime::verify_device_plan;

const Topology& eight_gpus() {
  static const Topology topology = Topology::load("dgx-h100");
  return topology;
}

std::string joined(const std::vector<std::string>& problems) {
  std::string text;
  for (const auto& p : problems)
    text += "\n  " + p;
  return text;
}

TEST(DevicePlan, EveryStrategyIsSound) {
  int plans = 0;
  for (const Workload& w : {tiny_workload(64, 8, 4, 16, 2, true), tiny_workload(50, 4, 2, 16, 1, false)})
    for (StrategyKind kind : all_strategies())
      for (int P : {1, 2, 4, 8})
        for (const StrategyParams& params : enumerate_params(kind, w, P)) {
          if (!check_feasible(kind, params, w, P).ok) continue;
          SCOPED_TRACE(
              fmt::format("{} P={} S={} D={}", to_string(kind), P, params.sequence_parallel, params.data_parallel));
          const Plan plan = make_plan(kind, params, w, eight_gpus(), P);
          const Schedule schedule = build_schedule(plan);
          const DevicePlan device = make_device_plan(schedule, plan);
          const auto problems = verify_device_plan(device, schedule, plan);
          EXPECT_TRUE(problems.empty()) << joined(problems);
          ASSERT_EQ(device.splits.size(), plan.groups.size());
          for (size_t g = 0; g < plan.groups.size(); ++g)
            EXPECT_EQ(device.splits[g].members, plan.groups[g].ranks);
          // Each rank's calls hold all of its communication ops.
          for (int r = 0; r < P; ++r) {
            size_t comm = 0, in_calls = 0;
            for (const Op& op : schedule.ranks[size_t(r)].ops)
              comm += op.stream != Stream::Compute;
            for (const auto& call : device.ranks[size_t(r)].calls)
              in_calls += call.entries.size() + (call.kind == CallKind::Collective);
            EXPECT_EQ(in_calls, comm) << "rank " << r;
          }
          ++plans;
        }
  EXPECT_GE(plans, 30);
}

Plan ring_plan(int P) {
  StrategyParams params;
  params.sequence_parallel = P;
  return make_plan(StrategyKind::Ring, params, tiny_workload(64, 4, 2, 16, 1, true), eight_gpus(), P);
}

TEST(DevicePlan, RingPairsSendAndReceiveInOneGroupCall) {
  const Plan plan = ring_plan(4);
  const Schedule schedule = build_schedule(plan);
  const DevicePlan device = make_device_plan(schedule, plan);
  for (int r = 0; r < 4; ++r) {
    int paired = 0;
    for (const auto& call : device.ranks[size_t(r)].calls) {
      if (call.kind != CallKind::P2pGroup) continue;
      bool to_next = false, from_prev = false;
      for (const auto& e : call.entries) {
        to_next |= e.send && e.peer == (r + 1) % 4;
        from_prev |= !e.send && e.peer == (r + 3) % 4;
      }
      paired += to_next && from_prev;
    }
    // Forward K,V and backward K,V,dK,dV pass around the ring: at least 3 steps each way.
    EXPECT_GE(paired, 6) << runtime::describe_calls(device.ranks[size_t(r)]);
  }
  // Under the causal mask the last rank computes with every received K,V block: its compute ops
  // wait on the calls that deliver them.
  int consumed = 0;
  for (const auto& call : device.ranks[3].calls)
    consumed += !call.consumers.empty();
  EXPECT_GE(consumed, 3) << runtime::describe_calls(device.ranks[3]);
}

// The same transfers, each in a call of its own and sends before receives: every rank's send
// waits for a receive queued behind its peer's send.
TEST(DevicePlan, VerifierRejectsOneByOneRing) {
  const Plan plan = ring_plan(4);
  const Schedule schedule = build_schedule(plan);
  DevicePlan device = make_device_plan(schedule, plan);
  for (auto& rank : device.ranks) {
    std::vector<runtime::NcclCall> calls;
    for (const auto& call : rank.calls) {
      if (call.kind != CallKind::P2pGroup) {
        calls.push_back(call);
        continue;
      }
      for (bool send : {true, false})
        for (const auto& e : call.entries)
          if (e.send == send) {
            runtime::NcclCall one = call;
            one.entries = {e};
            calls.push_back(one);
          }
    }
    rank.calls = calls;
    for (size_t c = 0; c < rank.calls.size(); ++c)
      for (const auto& e : rank.calls[c].entries)
        rank.call_of_op[size_t(e.op)] = int32_t(c);
    for (size_t c = 0; c < rank.calls.size(); ++c)
      if (rank.calls[c].kind == CallKind::Collective) rank.call_of_op[size_t(rank.calls[c].op)] = int32_t(c);
  }
  const auto problems = verify_device_plan(device, schedule, plan);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(joined(problems).find("the replay stops"), std::string::npos) << joined(problems);
}

TEST(DevicePlan, VerifierRejectsPartnersInDifferentRoundsAndLostOps) {
  const Plan plan = ring_plan(2);
  const Schedule schedule = build_schedule(plan);
  DevicePlan device = make_device_plan(schedule, plan);
  DevicePlan shifted = device;
  for (auto& call : shifted.ranks[1].calls)
    call.round += 1;
  EXPECT_NE(joined(verify_device_plan(shifted, schedule, plan)).find("round"), std::string::npos);
  DevicePlan lost = device;
  auto& first = lost.ranks[0].calls.front();
  ASSERT_FALSE(first.entries.empty());
  first.entries.pop_back();
  EXPECT_FALSE(verify_device_plan(lost, schedule, plan).empty());
}

// Two ranks that each receive before they send, the send waiting on the receive: no interleaving
// completes, and the plan says so instead of producing calls that would hang.
TEST(DevicePlan, RefusesScheduleThatCannotComplete) {
  const Workload w = tiny_workload(32, 2, 2, 8, 1, false);
  HandCase c{"cross", bare_plan(2, w), {}};
  c.schedule.dims = ScheduleDims{w.seq, w.batch, w.heads, w.kv_heads, w.head_dim, 4, false};
  for (int r = 0; r < 2; ++r) {
    HandBuilder b(c.schedule, r, 1);
    const TokenSet mine = contiguous_part(32, 2, r), theirs = contiguous_part(32, 2, 1 - r);
    const int32_t kv = b.buffer("kv", field_mask({Field::K, Field::V}), HeadRange{0, 2}, 16);
    const int32_t other = b.buffer("other", field_mask({Field::K, Field::V}), HeadRange{0, 2}, 16);
    b.input(kv, Field::K, mine, HeadRange{0, 2});
    b.input(kv, Field::V, mine, HeadRange{0, 2});
    const int32_t recv = b.recv(other, theirs, field_mask({Field::K, Field::V}), HeadRange{0, 2}, 1 - r, 7);
    b.send(kv, mine, field_mask({Field::K, Field::V}), HeadRange{0, 2}, 1 - r, 7, {recv});
    c.schedule.ranks.push_back(b.finish());
  }
  try {
    make_device_plan(c.schedule, c.plan);
    FAIL() << "expected a ScheduleError";
  } catch (const ScheduleError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot complete"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1:"), std::string::npos) << what;
  }
}

// The sequencer holds a call until all of its ops are posted, whatever their order, releases
// calls strictly in plan order, and refuses a post the plan does not have.
TEST(CallSequencer, ReleasesWholeCallsInPlanOrder) {
  const Plan plan = ring_plan(4);
  const Schedule schedule = build_schedule(plan);
  const DevicePlan device = make_device_plan(schedule, plan);
  const auto& calls = device.ranks[1].calls;
  ASSERT_GE(calls.size(), 2u);
  ASSERT_EQ(calls[0].entries.size(), 2u);
  runtime::CallSequencer sequencer(device.ranks[1]);
  // The second call's ops first: nothing may be released before the first call is complete.
  for (const auto& e : calls[1].entries)
    EXPECT_EQ(sequencer.post_p2p(e.send, e.peer, e.tag).call, 1);
  EXPECT_TRUE(sequencer.take_issuable().empty());
  const auto& recv = calls[0].entries[0].send ? calls[0].entries[1] : calls[0].entries[0];
  const auto& send = calls[0].entries[0].send ? calls[0].entries[0] : calls[0].entries[1];
  EXPECT_EQ(sequencer.post_p2p(recv.send, recv.peer, recv.tag).call, 0);
  EXPECT_TRUE(sequencer.take_issuable().empty());
  EXPECT_EQ(sequencer.posted(0), 1);
  EXPECT_EQ(sequencer.post_p2p(send.send, send.peer, send.tag).call, 0);
  EXPECT_EQ(sequencer.take_issuable(), (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(sequencer.issued(1));
  EXPECT_FALSE(sequencer.issued(2));
  EXPECT_THROW(sequencer.post_p2p(true, 3, 999999), ScheduleError);
  EXPECT_THROW(sequencer.post_collective(12345), ScheduleError);
}

// A program run again (the next training step) starts the plan over: the same posts map to the
// same calls from the first. Calls a run never reached are dropped; a call with some of its ops
// posted but not issued is refused, since its partners may have issued it.
TEST(CallSequencer, RestartsForTheNextRunOfTheProgram) {
  const Plan plan = ring_plan(4);
  const DevicePlan device = make_device_plan(build_schedule(plan), plan);
  const auto& calls = device.ranks[1].calls;
  ASSERT_GE(calls.size(), 2u);
  runtime::CallSequencer sequencer(device.ranks[1]);
  auto post_call = [&](size_t c) {
    for (const auto& e : calls[c].entries)
      EXPECT_EQ(sequencer.post_p2p(e.send, e.peer, e.tag).call, int32_t(c));
    if (calls[c].kind == CallKind::Collective) {
      EXPECT_EQ(sequencer.post_collective(calls[c].group).call, int32_t(c));
    }
  };
  for (int run = 0; run < 2; ++run) {
    for (size_t c = 0; c < calls.size(); ++c)
      post_call(c);
    EXPECT_EQ(sequencer.take_issuable().size(), calls.size()) << "run " << run;
    EXPECT_EQ(sequencer.next_call(), calls.size());
    sequencer.restart();
    EXPECT_EQ(sequencer.next_call(), 0u);
  }
  post_call(0);  // a run that stops after its first call
  EXPECT_EQ(sequencer.take_issuable(), (std::vector<int32_t>{0}));
  sequencer.restart();
  post_call(0);
  EXPECT_EQ(sequencer.take_issuable(), (std::vector<int32_t>{0}));
  ASSERT_EQ(calls[1].entries.size(), 2u);
  const auto& e = calls[1].entries.front();  // half of the second call
  sequencer.post_p2p(e.send, e.peer, e.tag);
  EXPECT_THROW(sequencer.restart(), ScheduleError);
}

TEST(DevicePlan, RefusesUnmatchedSend) {
  const Plan plan = ring_plan(2);
  Schedule schedule = build_schedule(plan);
  for (Op& op : schedule.ranks[1].ops)
    if (op.kind == OpKind::Recv) {
      op.tag += 1000;
      break;
    }
  EXPECT_THROW(make_device_plan(schedule, plan), ScheduleError);
}

}  // namespace
}  // namespace wallfacer::testing
