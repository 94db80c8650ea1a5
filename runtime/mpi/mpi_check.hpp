// Internal to runtime/mpi: the check every MPI call goes through. A failing call throws MpiError
// naming the source file, line, world rank, the call and MPI's error string; the runner prints it
// and calls MPI_Abort so that every rank exits. Communicators use MPI_ERRORS_RETURN so that errors
// reach this check instead of MPI's default abort without context.
#pragma once

#include <mpi.h>

#include <wallfacer/runtime/mpi/mpi_backend.hpp>

namespace wallfacer::runtime::detail {

[[noreturn]] void mpi_fail(int code, const char* call, const char* file, int line);
inline void mpi_check(int code, const char* call, const char* file, int line) {
  if (code != MPI_SUCCESS) mpi_fail(code, call, file, line);
}

}  // namespace wallfacer::runtime::detail

#define WF_MPI_CHECK(call) ::wallfacer::runtime::detail::mpi_check((call), #call, __FILE__, __LINE__)
