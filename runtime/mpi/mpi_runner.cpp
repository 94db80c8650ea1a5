#include <wallfacer/runtime/mpi/mpi_runner.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include "mpi_check.hpp"

namespace wallfacer::runtime {

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(name)) return true;
  return false;
}

namespace {

// Rank 0 prints every distinct message of the ranks whose preparation failed.
void report_prepare_errors(const std::string& mine, int rank, int size) {
  int length = int(mine.size());
  std::vector<int> lengths(rank == 0 ? size_t(size) : 0);
  WF_MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::vector<int> displs(lengths.size(), 0);
  int total = 0;
  for (size_t r = 0; r < lengths.size(); ++r)
    displs[r] = total, total += lengths[r];
  std::string all(size_t(total), '\0');
  WF_MPI_CHECK(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(), MPI_CHAR, 0,
                           MPI_COMM_WORLD));
  if (rank != 0) return;
  std::set<std::string> printed;
  for (size_t r = 0; r < lengths.size(); ++r) {
    std::string message = all.substr(size_t(displs[r]), size_t(lengths[r]));
    if (message.empty() || !printed.insert(message).second) continue;
    std::fprintf(stderr, "%s\n", message.c_str());
  }
}

// Runs prepare on this rank; returns the error message ("" when it succeeded).
std::string prepare_rank(const MpiJob& job, int rank, int size) {
  try {
    if (job.prepare) job.prepare(rank, size);
    return {};
  } catch (const InputError& e) {
    return e.what();
  } catch (const ScheduleError& e) {
    return fmt::format("error: invalid schedule: {}", e.what());
  } catch (const std::exception& e) {
    return fmt::format("error: rank {}: {}", rank, e.what());
  }
}

}  // namespace

namespace {

int run_initialised(const MpiJob& job, int rank, int size) {
  const std::string error = prepare_rank(job, rank, size);
  int ok = error.empty() ? 1 : 0, all_ok = 0;
  WF_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
  if (!all_ok) {
    report_prepare_errors(error, rank, size);
    return 2;
  }
  int status = 0;
  {
    auto backend = make_mpi_backend(job.backend);  // frees its communicators before MPI_Finalize
    status = job.run(*backend);
  }
  int worst = 0;
  WF_MPI_CHECK(MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return worst;
}

}  // namespace

int run_mpi_job(const MpiJob& job) {
  int initialised = 0, rank = -1;
  try {
    WF_MPI_CHECK(MPI_Initialized(&initialised));
    if (!initialised) WF_MPI_CHECK(MPI_Init(nullptr, nullptr));
    WF_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int size = 1;
    WF_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    WF_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    const int status = run_initialised(job, rank, size);
    WF_MPI_CHECK(MPI_Finalize());
    return status;
  } catch (const std::exception& e) {
    // Other ranks may be blocked on this one: end them all rather than let them hang.
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
}

}  // namespace wallfacer::runtime
