// An in-process backend: P ranks run as threads of one process and exchange data through shared
// mailboxes, so `wallfacer run` and the tests execute any schedule without mpirun. Sends
// rendezvous with their receives (a send completes when the receiver has the data, as the
// blocking semantics of schedule.hpp say); a collective completes when every member has posted
// it. When every live rank is blocked and nothing can complete, the world reports the deadlock
// (which rank waits on what) instead of hanging.
#pragma once

#include <functional>

#include <wallfacer/runtime/cpu_backend.hpp>

namespace wallfacer::runtime {

struct LocalOptions {
  // Offer the optional reduce-scatter entry (tests switch it off to exercise the executor's
  // all-to-all fallback).
  bool reduce_scatter = true;
};

// Thrown on the other ranks when one rank fails, so every thread unwinds.
class LocalAborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs body(backend) on `ranks` threads, one backend per rank. Returns when every thread has
// finished; rethrows the first rank's failure (a deadlock report is a ScheduleError).
void run_local_ranks(int ranks, const std::function<void(Backend&)>& body, const LocalOptions& options = {});

}  // namespace wallfacer::runtime
