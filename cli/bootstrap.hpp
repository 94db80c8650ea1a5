// --bootstrap: how the ranks of a GPU run started by a launcher find each other. Under mpirun (or
// srun with an MPI plugin) MPI carries NCCL's unique id and the control calls; under srun alone
// the ranks meet rank 0 over TCP at an address the scheduler's environment gives
// (wallfacer/runtime/rendezvous.hpp). A job runner for the latter, like run_mpi_job.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>

#include <wallfacer/runtime/rendezvous.hpp>
#ifdef WALLFACER_WITH_MPI
#include <wallfacer/runtime/mpi/mpi_runner.hpp>
#endif

namespace wallfacer::cli {

struct BootstrapFlags {
  std::string bootstrap = "auto";
  double connect_timeout = 300;
};
// --bootstrap and --rendezvous-timeout, with their defaults in --help.
void add_bootstrap_flags(CLI::App* app, BootstrapFlags& flags);

enum class Bootstrap { None, Mpi, Env };
// auto: MPI when launched by mpirun (or srun with an MPI plugin), the scheduler's environment
// when srun started several tasks, else none (every rank in this process). InputError for mpi in
// a build without MPI.
Bootstrap resolve_bootstrap(const BootstrapFlags& flags);

struct SchedulerJob {
  // Every rank, before the rendezvous's first control call: reads and checks its input.
  std::function<void(int rank, int size)> prepare;
  // Every rank, once all prepared; returns this rank's exit status.
  std::function<int(runtime::ControlChannel& control)> run;
  runtime::RendezvousOptions rendezvous;
};
// Meets the other ranks (launch_environment, TcpControlChannel), prepares, and runs. A rank
// whose preparation failed rethrows its error (exit 2), the others stop with an InputError
// saying another rank failed; the exit status is the largest over the ranks. A failure inside
// run prints "rank R: what" and ends this process at once (status 3), which closes its
// connections so the other ranks' next control call fails naming it.
int run_scheduler_job(const SchedulerJob& job);

// One process per rank, started by a launcher: `prepare(rank, size)` on every rank, then
// `run(control)` with the launcher's control channel (a ControlChannel under srun alone, the MPI
// backend under mpirun, so `run` takes either). `configure_mpi(job)` may set the MPI backend's
// options first. Returns the exit status, or nothing when no launcher started this process.
template <typename Prepare, typename Run, typename ConfigureMpi>
std::optional<int> run_launched_ranks(const BootstrapFlags& flags, Prepare prepare, Run run,
                                      [[maybe_unused]] ConfigureMpi configure_mpi) {
  const Bootstrap bootstrap = resolve_bootstrap(flags);
  if (bootstrap == Bootstrap::Env) {
    SchedulerJob job;
    job.rendezvous.connect_timeout_seconds = flags.connect_timeout;
    job.prepare = prepare;
    job.run = [&](runtime::ControlChannel& control) { return run(control); };
    return run_scheduler_job(job);
  }
#ifdef WALLFACER_WITH_MPI
  if (bootstrap == Bootstrap::Mpi) {
    runtime::MpiJob job;
    configure_mpi(job);
    job.prepare = prepare;
    job.run = [&](runtime::Backend& control) { return run(control); };
    return runtime::run_mpi_job(job);
  }
#endif
  return std::nullopt;
}

}  // namespace wallfacer::cli
