// The host-side plan of a GPU run, derived from a schedule alone and free of CUDA and NCCL headers,
// so it is built and tested everywhere: per rank, which device stream each op runs on, the
// communicator splits per plan group with their member order, and the sequence of NCCL calls
// (point-to-point group calls and collectives) with the events each waits on and records.
//
// Why a plan: NCCL operations of one communicator run in the order they are issued, and a send
// kernel does not finish until its peer's receive runs. Issued one by one in the order the
// executor happens to post them, a ring whose ranks all send before they receive deadlocks. The
// plan groups the schedule's transfers into rounds by simulating its blocking semantics with
// every rank advancing as far as it can: round r holds the sends and receives whose partners are
// both posted after rounds < r completed, and the collectives whose members all are. Each rank
// issues its calls in round order, so every call's partners are issued in the same round before
// any later one; verify_device_plan checks this independently (docs/cuda.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::runtime {

// The device streams of one rank: kernels and every copy that packs or unpacks buffers run on
// Compute; NCCL calls run on Comm.
enum class DeviceStream : uint8_t { Compute, Comm };
const char* to_string(DeviceStream stream);

// One send or receive inside a point-to-point group call.
struct P2pEntry {
  int32_t op = -1;  // index in the rank's program
  bool send = false;
  int peer = -1;
  int tag = -1;
  int occurrence = 0;  // k-th transfer of this (direction, peer, tag) on the rank, in program order
  int64_t bytes = 0;
};

enum class CallKind : uint8_t { P2pGroup, Collective };
const char* to_string(CallKind kind);

// One NCCL call of a rank: a ncclGroupStart/End around point-to-point entries on the world
// communicator, or one collective op on its group's communicator. Before it the Comm stream
// waits on an event the Compute stream records after packing the call's send data (after
// compute op `after_compute`, -1 when none precedes it); after it Comm records `done`, which
// the Compute stream waits on before the first op that reads what the call delivered.
struct NcclCall {
  CallKind kind = CallKind::P2pGroup;
  int round = 0;
  std::vector<P2pEntry> entries;  // P2pGroup: sends and receives, sorted by (peer, send first, tag)
  int32_t op = -1;                // Collective: the op index
  int group = -1;                 // Collective: plan group
  int occurrence = 0;             // Collective: k-th collective of this rank on `group`
  OpKind collective = OpKind::AllGather;
  int32_t after_compute = -1;
  std::vector<int32_t> consumers;  // compute ops that depend directly on an op of this call
};

// The communicator of a plan group: ncclCommSplit with color = group index; a member's rank in
// it is its position in `members` (the group's order, which collectives use for member order).
struct CommSplit {
  int group = -1;
  std::string name;
  std::vector<int> members;
};

struct RankDevicePlan {
  int rank = 0;
  std::vector<DeviceStream> stream_of_op;  // per op
  std::vector<int32_t> call_of_op;         // per op: index in `calls`, -1 for compute ops
  std::vector<NcclCall> calls;             // in issue order (rounds ascending)
  std::vector<int> groups;                 // plan groups this rank belongs to
  // The call and entry that the k-th send (or receive) of `tag` to (from) `peer` belongs to, or
  // {-1, -1}: how a backend maps the executor's posts to the plan.
  std::pair<int32_t, int32_t> find_p2p(bool send, int peer, int tag, int occurrence) const;
  // The call of the k-th collective on `group`, or -1.
  int32_t find_collective(int group, int occurrence) const;
};

struct DevicePlan {
  int rounds = 0;
  std::vector<CommSplit> splits;  // one per plan group, in plan order
  std::vector<RankDevicePlan> ranks;
};

// Builds the device plan of every rank of `schedule` (which must hold all of the plan's ranks).
// Throws ScheduleError when a send has no matching receive (or the sizes differ), when the
// members of a group disagree on a collective, or when the schedule cannot complete under its
// blocking semantics (naming what each rank waits on).
DevicePlan make_device_plan(const Schedule& schedule, const Plan& plan);

// Checks `device` against `schedule` independently of how it was built: every communication op
// of every rank is in exactly one call and compute ops in none; each entry's partner sits in a
// call of the same round on its peer with the same tag, occurrence and size; all members of a
// collective issue it in the same round on the group's split; and issuing every rank's calls in
// order on one serial NCCL queue, each call only once the executor could post all its ops,
// completes every call. Returns the problems found (empty when the plan is sound).
std::vector<std::string> verify_device_plan(const DevicePlan& device, const Schedule& schedule, const Plan& plan);

// The host logic of the NCCL transport, free of NCCL: matches one rank's posts (in the order the
// executor makes them) to the calls of its device plan, by direction, peer, tag and occurrence for
// transfers and by group and occurrence for collectives, and releases calls strictly in plan
// order once every op of a call has been posted.
class CallSequencer {
 public:
  explicit CallSequencer(RankDevicePlan plan);
  struct Slot {
    int32_t call = -1;
    int32_t entry = -1;  // the P2pEntry; -1 for a collective
  };
  // Throws ScheduleError when the plan has no such op (the executor and the plan disagree).
  Slot post_p2p(bool send, int peer, int tag);
  Slot post_collective(int group);
  // The calls that became issuable since the last call, in plan order.
  std::vector<int32_t> take_issuable();
  // Starts the plan over for the next run of the same program (a training step after the last):
  // nothing posted, nothing issued. Calls the last run did not reach are dropped, as they are on
  // every rank when all stop at the same op. Throws ScheduleError when a call has some of its ops
  // posted but was not issued: its partners may have issued it and wait for it.
  void restart();
  bool issued(int32_t call) const { return call < int32_t(next_); }
  // The first call not yet issued and how many of its ops are posted (for error messages).
  size_t next_call() const { return next_; }
  int posted(int32_t call) const { return posted_.at(size_t(call)); }
  const RankDevicePlan& plan() const { return plan_; }

 private:
  RankDevicePlan plan_;
  std::map<std::tuple<bool, int, int, int>, Slot> p2p_index_;
  std::map<std::pair<int, int>, int32_t> collective_index_;
  std::map<std::tuple<bool, int, int>, int> p2p_seen_;
  std::map<int, int> collective_seen_;
  std::vector<int> posted_;
  size_t next_ = 0;
};

// A readable listing of one rank's calls, for logs and docs.
std::string describe_calls(const RankDevicePlan& rank);

}  // namespace wallfacer::runtime
