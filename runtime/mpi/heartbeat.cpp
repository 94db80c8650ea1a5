#include "heartbeat.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "mpi_check.hpp"

namespace wallfacer::runtime::detail {

namespace {

constexpr int kBeatTag = 1;
const int kBeat = 0;  // the payload; only the arrival counts

double seconds_between(Heartbeat::Clock::time_point from, Heartbeat::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

Heartbeat::Heartbeat(MPI_Comm world, double timeout_seconds) : timeout_(std::max(0.0, timeout_seconds)) {
  if (!enabled()) return;
  // A tenth of the timeout, at most a second: a few missed beats never look like silence.
  interval_ = std::min(1.0, timeout_ / 10);
  WF_MPI_CHECK(MPI_Comm_dup(world, &comm_));
  WF_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  WF_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  WF_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  sends_.assign(size_t(size_), MPI_REQUEST_NULL);
  sent_.assign(size_t(size_), 0);
  received_.assign(size_t(size_), 0);
  const Clock::time_point now = Clock::now();
  last_heard_.assign(size_t(size_), now);
  last_sent_ = now - std::chrono::hours(1);
  post_receive();
}

void Heartbeat::post_receive() {
  WF_MPI_CHECK(MPI_Irecv(&incoming_, 1, MPI_INT, MPI_ANY_SOURCE, kBeatTag, comm_, &receive_));
}

void Heartbeat::take_in() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    WF_MPI_CHECK(MPI_Test(&receive_, &flag, &status));
    if (!flag) return;
    const size_t from = size_t(status.MPI_SOURCE);
    ++received_[from];
    last_heard_[from] = Clock::now();
    post_receive();
  }
}

void Heartbeat::beat() {
  if (!enabled()) return;
  take_in();
  const Clock::time_point now = Clock::now();
  if (seconds_between(last_sent_, now) < interval_) return;
  last_sent_ = now;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request& send = sends_[size_t(peer)];
    int done = 1;
    // A peer that has not taken in the last beat (busy, or frozen) gets no second one: beats
    // never pile up behind a silent rank.
    if (send != MPI_REQUEST_NULL) WF_MPI_CHECK(MPI_Test(&send, &done, MPI_STATUS_IGNORE));
    if (!done) continue;
    WF_MPI_CHECK(MPI_Isend(&kBeat, 1, MPI_INT, peer, kBeatTag, comm_, &send));
    ++sent_[size_t(peer)];
  }
}

std::string Heartbeat::silent(const std::vector<int>& ranks) {
  if (!enabled()) return {};
  take_in();
  const Clock::time_point now = Clock::now();
  int worst = -1;
  double worst_seconds = timeout_;
  for (int rank : ranks) {
    if (rank < 0 || rank >= size_ || rank == rank_) continue;
    const double quiet = seconds_between(last_heard_[size_t(rank)], now);
    if (quiet > worst_seconds) worst = rank, worst_seconds = quiet;
  }
  if (worst < 0) return {};
  return fmt::format("rank {}: no heartbeat for {:.1f} s", worst, worst_seconds);
}

void Heartbeat::finish() {
  if (!enabled() || comm_ == MPI_COMM_NULL) return;
  MPI_Request everyone = MPI_REQUEST_NULL;
  WF_MPI_CHECK(MPI_Ibarrier(comm_, &everyone));
  auto pause = std::chrono::microseconds(10);
  for (int done = 0;;) {
    WF_MPI_CHECK(MPI_Test(&everyone, &done, MPI_STATUS_IGNORE));
    if (done) break;
    beat();
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  // Nobody beats any more: learn how many beats each rank sent here and take them all in.
  std::vector<long long> expected(size_t(size_), 0);
  WF_MPI_CHECK(MPI_Alltoall(sent_.data(), 1, MPI_LONG_LONG, expected.data(), 1, MPI_LONG_LONG, comm_));
  auto missing = [&] {
    for (int r = 0; r < size_; ++r)
      if (received_[size_t(r)] < expected[size_t(r)]) return true;
    return false;
  };
  while (missing()) {
    MPI_Status status;
    WF_MPI_CHECK(MPI_Wait(&receive_, &status));
    ++received_[size_t(status.MPI_SOURCE)];
    post_receive();
  }
  WF_MPI_CHECK(MPI_Cancel(&receive_));
  WF_MPI_CHECK(MPI_Wait(&receive_, MPI_STATUS_IGNORE));
  WF_MPI_CHECK(MPI_Waitall(int(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE));
  WF_MPI_CHECK(MPI_Comm_free(&comm_));
}

}  // namespace wallfacer::runtime::detail
