// Noticing a frozen rank on any host. The process check of peer_watch.hpp sees only ranks on
// the waiting rank's own host; a rank stopped on another host, or stuck in a device call, holds
// its peers until their stall limit. So every rank beats: whenever the executor calls the
// backend (a wait, a test, the progress call between compute slices, which --progress-rows
// keeps short), a rank posts a small message to every other rank on a communicator of its own,
// at most once per interval; a waiting rank takes in the beats that arrived and declares an
// awaited rank lost when none came from it for the timeout. A slow rank still beats between
// its slices; a stopped process, a hung main thread or an unreachable host does not. Internal
// to the MPI backend.
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>
#include <vector>

namespace wallfacer::runtime::detail {

class Heartbeat {
 public:
  using Clock = std::chrono::steady_clock;

  // Collective over `world` (it duplicates it). timeout_seconds 0: no beats, never lost.
  Heartbeat(MPI_Comm world, double timeout_seconds);
  // Leaves pending beats as they are: only reached without finish() on a failure, which aborts.
  ~Heartbeat() = default;
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  bool enabled() const { return timeout_ > 0; }
  double timeout_seconds() const { return timeout_; }

  // Takes in the beats that arrived and, when the interval has passed, sends the next. Cheap
  // enough to call on every poll.
  void beat();
  // "" when each of `ranks` beat within the timeout; else "rank 2: no heartbeat for 15.2 s"
  // for the one silent longest.
  std::string silent(const std::vector<int>& ranks);

  // The run's normal end, collective: keeps beating until every rank has got here (one may
  // still be computing the reference while the others wait), then takes in every beat sent to
  // this rank, so that no message is left in flight, and frees the communicator.
  void finish();

 private:
  void take_in();
  void post_receive();

  double timeout_ = 0, interval_ = 1;
  int rank_ = 0, size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Request receive_ = MPI_REQUEST_NULL;
  int incoming_ = 0;
  std::vector<MPI_Request> sends_;
  std::vector<long long> sent_, received_;
  std::vector<Clock::time_point> last_heard_;
  Clock::time_point last_sent_;
};

}  // namespace wallfacer::runtime::detail
