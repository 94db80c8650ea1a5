// Process-level MPI for `wallfacer run`: whether this process was started by mpirun, and a job
// runner that initialises MPI, lets every rank validate its input before any compute (a bad
// input on any rank makes every rank exit with status 2 after rank 0 prints the errors), runs
// the job with the MPI backend, turns a failure during the run into a printed error and
// MPI_Abort (so that no rank hangs), agrees on one exit status and finalises MPI.
#pragma once

#include <functional>

#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/runtime/mpi/mpi_backend.hpp>

namespace wallfacer::runtime {

// True when an MPI launcher (Open MPI's mpirun, or a PMI-based one) started this process.
bool launched_by_mpirun();

struct MpiJob {
  // Every rank, before any communication of the job: reads and checks its input. Throws
  // InputError (or ScheduleError) for bad input.
  std::function<void(int rank, int size)> prepare;
  // Every rank, once all prepared successfully; returns this rank's exit status (rank 0's check
  // result decides: the job's status is the largest over ranks).
  std::function<int(Backend& backend)> run;
  MpiBackendOptions backend;
};

// Returns the process exit status: 2 when prepare failed on some rank, else the largest status
// run returned. A failure inside run prints "rank R: what" and calls MPI_Abort (status 3).
int run_mpi_job(const MpiJob& job);

}  // namespace wallfacer::runtime
