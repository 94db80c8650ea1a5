// The CPU/MPI backend: one MPI process per rank, host memory and the CPU kernels (CpuBackend),
// non-blocking point-to-point (MPI_Isend/MPI_Irecv on MPI_COMM_WORLD, tags from the schedule),
// one communicator per plan group (MPI_Comm_split, members ordered as in the group), and
// non-blocking collectives (MPI_Iallgatherv, MPI_Ialltoallv, MPI_Ireduce_scatter,
// MPI_Iallreduce) that the executor tests with MPI_Test while it computes. This header includes
// no MPI header, so the CLI can use it without MPI's include paths.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include <wallfacer/runtime/backend.hpp>

namespace wallfacer::runtime {

// A failed MPI call: "FILE:LINE: rank R: MPI_Isend(...) failed: <MPI error string>".
class MpiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct MpiBackendOptions {
  // wait_any gives up (MpiError naming what it waits on) after this long without any request
  // completing, so a mismatched schedule ends the run instead of hanging it. 0: wait forever.
  double stall_seconds = 300;
  // How often a waiting rank checks that the ranks it waits on are alive and not stopped (on
  // its own host; peer_watch.hpp). 0: never.
  double peer_check_seconds = 2;
  // A waiting rank declares an awaited rank on any host lost after this long without a
  // heartbeat from it (heartbeat.hpp): ranks beat whenever they wait, test or progress between
  // compute slices. 0: no heartbeat.
  double heartbeat_seconds = 15;
  // Fault injection for the tests: rank `fault_rank` stops itself (SIGSTOP, "stop"), dies
  // (SIGKILL, "kill") or sleeps 8 s in slices with progress calls between them ("sleep", a slow
  // rank) as it posts its `fault_after_posts`-th transfer or collective.
  // Empty `fault`: none.
  std::string fault;
  int fault_rank = -1;
  int fault_after_posts = 1;
};

// Needs MPI to be initialised (run_mpi_job in mpi_runner.hpp does it). Uses MPI_COMM_WORLD.
std::unique_ptr<Backend> make_mpi_backend(const MpiBackendOptions& options = {});

}  // namespace wallfacer::runtime
