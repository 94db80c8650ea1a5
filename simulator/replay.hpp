// Replays a schedule on a SimGrid platform: one actor per rank runs its program with the
// schedule's semantics (four streams, each in program order, an op starting once it heads its
// stream and its explicit dependencies finished; a send finishing with its matching receive; a
// collective as point-to-point steps, collective_steps.hpp) and records when every activity ran.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <wallfacer/cost/compute_time.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include <wallfacer/topology/topology.hpp>
#include "collective_steps.hpp"
#include "simgrid_adapter.hpp"

namespace wallfacer::sim {

enum class RecordKind : uint8_t { Compute, Send, Recv, Collective };

// One finished op of a rank, kept for the trace (Compute, Send, Recv: the activity's own span;
// Collective: from the moment it headed the collective stream to its last transfer).
struct Record {
  double start = 0, finish = 0;  // simulated seconds
  int64_t flow = -1;             // Send/Recv: id shared by both ends of a transfer
  int32_t op = -1;               // index in the rank's program
  RecordKind kind = RecordKind::Compute;
};

struct RankOutcome {
  std::vector<Record> records;  // only when tracing
  // Seconds with a compute op running, with any transfer posted and not finished (communication
  // kernels hold their SMs while they wait for the peer), and with either.
  double compute_s = 0, comm_s = 0, busy_s = 0;
  double finish = 0;          // when its last op completed
  double forward_finish = 0;  // when its last Forward op completed
  int64_t activities = 0;     // execs it ran and transfers it sent
  int64_t transfers = 0;      // transfers it sent
  bool finished = false;
};

class RankActor;

// A mailbox's identity: (source rank, destination rank), (group + 1, ring channel).
using ChannelKey = std::pair<uint64_t, uint64_t>;

class Replay {
 public:
  // Checks the schedule against the plan, expands collectives and creates the channels.
  Replay(const Plan& plan, const Topology& topology, const Schedule& schedule, const SimOptions& options,
         SimEngine& engine, std::vector<int> host_of_gpu);
  ~Replay();

  // GPU pairs (source, destination) that exchange data: the routes the platform needs.
  const std::vector<std::pair<int, int>>& gpu_pairs() const { return gpu_pairs_; }
  // Builds each rank's run state (RankActor). Calls nothing of SimGrid's, so it may run on another
  // thread while the caller declares the platform; run() calls it if nobody did.
  void prepare_actors();
  // Starts one actor per rank (after the platform is sealed) and runs the simulation. Throws
  // ScheduleError when the replay deadlocks or a rank meets a broken op.
  void run();

  const std::vector<RankOutcome>& outcomes() const { return outcomes_; }
  const std::vector<double>& resource_bytes() const { return resource_bytes_; }
  const Schedule& schedule() const { return schedule_; }

  // Used by the rank actors.
  int gpu_of_rank(int rank) const { return plan_.ranks[size_t(rank)].gpu; }
  int host_of_rank(int rank) const { return host_of_gpu_[size_t(gpu_of_rank(rank))]; }
  // Channel of a Send or Recv op (-1 for other ops).
  int op_channel(int rank, int32_t op) const { return op_channels_[size_t(rank)][size_t(op)]; }
  const CollectiveSteps& collective_steps(int rank, int coll) const { return steps_[size_t(rank)][size_t(coll)]; }
  // Work in FLOPs of a compute op that takes `seconds` at the host's nominal speed.
  double exec_amount(double seconds) const { return seconds * peak_flops_; }
  bool slows_compute() const { return slowdown_; }
  // True when a compute op always runs at the host's full speed (one rank per GPU, its compute
  // stream running one op at a time, no slowdown under communication): it then lasts exactly
  // its FLOPs over the peak rate and runs as a timer, without an activity in SimGrid's CPU model.
  bool compute_runs_alone() const { return compute_alone_; }
  // Seconds a compute op takes at the host's nominal speed: ComputeTimer's, the cost model's.
  double op_seconds(const Op& op);
  bool records_ops(int rank) const {
    return !options_.trace_path.empty() && (traced_.empty() || traced_[size_t(rank)]);
  }
  SimEngine& engine() { return engine_; }
  RankOutcome& outcome(int rank) { return outcomes_[size_t(rank)]; }
  // A rank actor's error; the run reports the earliest (simulated time, then rank), so the
  // message does not depend on which thread ran which actor first.
  void fail(double at_s, int rank, const std::string& message);

 private:
  void validate_schedule() const;
  void prepare_rank(int rank);
  void prepare_collective(int rank, size_t op_index);
  // The mailbox of transfers from rank src to rank dst: point to point (group -1) or in one ring
  // channel (lane) of a group's collectives.
  int add_channel(int src, int dst, int group, int lane);
  const RingChannels& ring_channels_of(int group);  // cached
  void spread_channel_bytes();
  double route_latency_s(int src_gpu, int dst_gpu);  // cached: merged ring steps ask often
  struct TreeGroup {                                 // a group's tree all-reduce (all_reduce.hpp)
    std::vector<int> members;                        // TreeLayout::members
    TreeRounds rounds;
    double latency_s = 0;  // the longest path's, up and down
  };
  const TreeGroup& tree_group(int group);  // cached

  const Plan& plan_;
  const Topology& topology_;
  const Schedule& schedule_;
  const SimOptions& options_;
  SimEngine& engine_;
  std::vector<int> host_of_gpu_;
  bool slowdown_ = false;
  bool compute_alone_ = false;
  std::vector<bool> traced_;  // by rank, when only some ranks are traced
  double peak_flops_ = 0;
  ExpandOptions expand_options_;
  std::vector<std::vector<CollectiveSteps>> steps_;  // [rank][collective]
  struct ChannelKeyHash {
    size_t operator()(const ChannelKey& key) const noexcept {
      return std::hash<uint64_t>{}(key.first * 0x9e3779b97f4a7c15ULL ^ key.second);
    }
  };
  std::unordered_map<ChannelKey, int, ChannelKeyHash> channels_;  // (src, dst, group, lane) -> channel
  std::vector<std::pair<int, int>> channel_ends_;                 // (src rank, dst rank) per channel
  // Bytes sent per channel: what the schedule sends, counted while preparing (a replay either
  // runs every op or fails), spread over the channel's route after the run.
  std::vector<double> channel_bytes_;
  std::vector<std::vector<int32_t>> op_channels_;  // [rank][op]
  std::vector<std::pair<int, int>> gpu_pairs_;
  ComputeTimer timer_;
  std::vector<std::vector<double>> expanded_bytes_;       // [rank][collective]: the op bytes expanded (-1: none)
  std::unordered_map<uint64_t, double> route_latency_s_;  // by (source GPU, destination GPU)
  std::unordered_map<int, TreeGroup> tree_groups_;        // by group
  std::unordered_map<int, RingChannels> ring_channels_;   // by group
  std::vector<RankOutcome> outcomes_;
  std::vector<double> resource_bytes_;
  std::vector<std::unique_ptr<RankActor>> actors_;
  std::mutex failure_mutex_;  // rank actors may run on several threads
  std::string failure_;       // the earliest failure, the lowest rank's among simultaneous ones
  double failure_at_s_ = 0;
  int failure_rank_ = 0;
};

}  // namespace wallfacer::sim
