// The SimGrid actor of one rank: runs the rank's program with the schedule's blocking semantics
// (schedule.hpp) and records every activity in the rank's outcome (replay.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <wallfacer/schedule/schedule.hpp>
#include "replay.hpp"
#include "simgrid_adapter.hpp"

namespace wallfacer::sim {

class alignas(64) RankActor {
 public:
  RankActor(Replay& replay, int rank);
  // Holds pointers into its own storage.
  RankActor(const RankActor&) = delete;
  RankActor& operator=(const RankActor&) = delete;
  // The actor body; never throws (errors go to Replay::fail).
  void run();
  int rank() const { return rank_; }
  // Where the rank waits, for deadlock reports.
  std::string describe_wait() const;

 private:
  // What an activity tag refers to (top byte of the tag).
  enum class TagKind : uint8_t { Compute, Send, Recv, CollectiveSend, CollectiveRecv, CollectiveDelay };
  struct Collective {  // the collective op in flight on a collective stream (collective or sync)
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
    int32_t next_in_stream = -1;    // the op after this one on its stream (-1: the stream ends)
    uint16_t pending = 0;           // explicit dependencies not finished yet
    RunKind kind = RunKind::Compute;
    uint8_t stream = 0;
    bool forward = false;
  };
  // Half a cache line: an event reads the records of a few ops, each out of cache.
  static_assert(sizeof(RunOp) <= 32);

  void loop();
  void index_program();
  void start_ready();
  void start_op(int32_t index);
  void start_collective(int32_t index);
  // `slot`: which collective stream's op (kCollectiveSlot or kSyncSlot); a transfer's tag index
  // carries it above kSlotShift.
  void advance_collective(uint64_t slot);
  void post_collective_send(uint64_t tagged_index);
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
  // Copies the counters kept in the actor into the rank's outcome (once, when the loop ends).
  void publish();

  // What every event reads or writes, in the object's first two cache lines: an actor wakes
  // with its state out of cache (thousands of other actors ran since).
  ActivitySet activities_;
  RunOp* ops_ = nullptr;                     // ops_storage_'s records
  const int32_t* dependents_ = nullptr;      // dependents_storage_'s entries
  std::array<int32_t, kNumStreams> head_{};  // each stream's next op (-1: the stream is done)
  std::array<bool, kNumStreams> busy_{};
  // Streams whose head may have become startable since start_ready() last looked: the stream of
  // an op that completed and the streams of ops whose last dependency finished. The others need
  // no look, which saves two reads of state last touched thousands of actors ago.
  uint8_t unsettled_streams_ = (1u << kNumStreams) - 1;
  bool computing_ = false;
  bool timed_compute_ = false;  // Replay::compute_runs_alone()
  bool slows_compute_ = false;  // Replay::slows_compute()
  int32_t transfers_in_flight_ = 0;
  uint32_t completed_ = 0;
  uint32_t op_count_ = 0;
  int32_t host_ = -1;
  double last_change_ = 0;
  double now_ = 0;  // the engine's clock when the actor last woke (it only runs then)
  // The outcome's counters, kept here while the actor runs so an event touches no memory of the
  // replay's (publish() copies them).
  double compute_s_ = 0, comm_s_ = 0, busy_s_ = 0, forward_finish_ = 0;
  uint32_t activities_run_ = 0, transfers_sent_ = 0;
  bool records_ = false;  // this rank's ops go into the trace
  static constexpr uint64_t kCollectiveSlot = 0, kSyncSlot = 1;
  static constexpr int kSlotShift = 48;
  std::array<Collective, 2> collectives_{};  // in flight on the collective and on the sync stream

  Replay& replay_;
  int rank_;
  const RankProgram& program_;
  RankOutcome& outcome_;
  std::vector<RunOp> ops_storage_;  // one per op, plus a sentinel closing the dependents ranges
  std::vector<int32_t> dependents_storage_;
  std::vector<uint64_t> group_sequence_;  // collectives started per group
};

// Flow id shared by a send and its receive: the sending rank and the send op's index.
inline int64_t flow_id(int src_rank, int64_t send_op) {
  return (int64_t(src_rank) << 32) | send_op;
}

}  // namespace wallfacer::sim
