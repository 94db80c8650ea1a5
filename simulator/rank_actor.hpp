// The SimGrid actor of one rank: runs the rank's program with the schedule's blocking semantics
// (schedule.hpp) and records every activity in the rank's outcome (replay.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/schedule.hpp"
#include "simulator/replay.hpp"
#include "simulator/simgrid_adapter.hpp"

namespace wallfacer::sim {

class RankActor {
 public:
  RankActor(Replay& replay, int rank);
  // The actor body; never throws (errors go to Replay::fail).
  void run();
  int rank() const { return rank_; }
  // Where the rank waits, for deadlock reports.
  std::string describe_wait() const;

 private:
  // What an activity tag refers to (top byte of the tag).
  enum class TagKind : uint8_t { Compute, Send, Recv, CollectiveSend, CollectiveRecv, CollectiveDelay };
  struct Collective {  // the collective op in flight on the collective stream
    int32_t op = -1;
    const CollectiveSteps* steps = nullptr;
    size_t sends_posted = 0, sends_done = 0, recvs_posted = 0, recvs_done = 0;
    uint64_t sequence = 0;  // how many collectives of this group the rank ran before
    double posted_at = 0;
  };

  // What the actor needs of an op while it runs, in one table built before the run: compute
  // durations are calibrated once, and an event reads one record instead of the planner's op
  // and the replay's side tables.
  enum class RunKind : uint8_t { Compute, Send, Recv, Collective };
  struct RunOp {
    double amount = 0;              // Compute: seconds at nominal speed; Send: bytes
    int32_t target = -1;            // Send/Recv: channel; Collective: index in the program's collectives
    int32_t tag = -1;               // Send/Recv: the message tag
    uint32_t dependents_begin = 0;  // dependents_[dependents_begin, next op's dependents_begin)
    uint16_t pending = 0;           // explicit dependencies not finished yet
    RunKind kind = RunKind::Compute;
    uint8_t stream = 0;
    bool forward = false;
  };

  void loop();
  void index_program();
  void start_ready();
  void start_op(int32_t index);
  void start_collective(int32_t index);
  void advance_collective();
  void post_collective_send(uint64_t index);
  void handle(const Completion& done);
  void handle_transfer(TagKind kind, uint64_t index, const Completion& done);
  void complete_op(int32_t index, double at);
  // Whether finishing this op lets the rank start another op or end its program: only then must
  // the actor wake when its timer expires (ActivitySet::set_wake_policy).
  bool completion_enables(int32_t index) const;
  static bool wakes_for(const void* actor, uint64_t tag);
  void transfer_started();
  void transfer_finished();
  // Adds the time up to `at` since the last change of what the rank is doing to its outcome's
  // counters (`at` may lie before the engine's clock for a timer handed out late).
  void advance_clock(double at);
  void record(RecordKind kind, int32_t op, double start, double finish, int64_t flow = -1);

  // Hot state first: what every event reads or writes.
  ActivitySet activities_;
  std::vector<RunOp> ops_;  // one per op, plus a sentinel closing the dependents ranges
  std::vector<int32_t> dependents_;
  std::array<const int32_t*, kNumStreams> next_{};  // each stream's next op (index into its queue)
  std::array<const int32_t*, kNumStreams> end_{};
  std::array<bool, kNumStreams> busy_{};
  bool computing_ = false;
  int transfers_in_flight_ = 0;
  size_t completed_ = 0;
  double last_change_ = 0;
  double now_ = 0;  // the engine's clock when the actor last woke (it only runs then)
  Collective collective_;

  Replay& replay_;
  int rank_;
  int host_;
  const RankProgram& program_;
  RankOutcome& outcome_;
  const bool records_;                                   // this rank's ops go into the trace
  std::array<std::vector<int32_t>, kNumStreams> queue_;  // op indices per stream, in program order
  std::vector<uint64_t> group_sequence_;                 // collectives started per group
};

// Flow id shared by a send and its receive: the sending rank and the send op's index.
inline int64_t flow_id(int src_rank, int64_t send_op) {
  return (int64_t(src_rank) << 32) | send_op;
}

}  // namespace wallfacer::sim
