// --bootstrap and the job runner of a start without MPI (bootstrap.hpp).
#include "bootstrap.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include "common.hpp"
#ifdef WALLFACER_WITH_MPI
#include <wallfacer/runtime/mpi/mpi_runner.hpp>
#endif

namespace wallfacer::cli {

void add_bootstrap_flags(CLI::App* app, BootstrapFlags& flags) {
  app->add_option("--bootstrap", flags.bootstrap,
                  "--backend cuda: how the ranks of a launched job meet: mpi (mpirun, or srun with an MPI plugin), "
                  "env (srun alone: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and rank 0's address from "
                  "MASTER_ADDR/MASTER_PORT or the first host of SLURM_STEP_NODELIST), or auto (mpi under mpirun, "
                  "env when srun started several tasks, else every rank in this process)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "mpi", "env"}));
  app->add_option("--rendezvous-timeout", flags.connect_timeout,
                  "--bootstrap env: seconds rank 0 waits for every rank to connect, and the others keep trying to "
                  "reach it")
      ->capture_default_str()
      ->check(finite_at_least(0, false));
}

Bootstrap resolve_bootstrap(const BootstrapFlags& flags) {
  if (flags.bootstrap == "env") return Bootstrap::Env;
#ifdef WALLFACER_WITH_MPI
  if (flags.bootstrap == "mpi" || runtime::launched_by_mpirun()) return Bootstrap::Mpi;
#else
  if (flags.bootstrap == "mpi") throw InputError("--bootstrap mpi: this build has no MPI support");
#endif
  return runtime::scheduler_launch(runtime::process_environment()) ? Bootstrap::Env : Bootstrap::None;
}

int run_scheduler_job(const SchedulerJob& job) {
  const runtime::LaunchEnvironment launch = runtime::launch_environment(runtime::process_environment());
  WF_LOG_INFO("cli", "rank {} of {}: rendezvous with rank 0 at {}:{} ({})", launch.rank, launch.size, launch.address,
              launch.port, launch.origin);
  runtime::TcpControlChannel control(launch, job.rendezvous);
  std::exception_ptr failure;
  try {
    job.prepare(launch.rank, launch.size);
  } catch (...) {
    failure = std::current_exception();
  }
  if (!control.all_ok(failure == nullptr)) {
    if (failure) std::rethrow_exception(failure);
    throw InputError(
        fmt::format("rank {}: stopping before the run: another rank could not prepare it (its error "
                    "is in its output)",
                    launch.rank));
  }
  int status = 0;
  try {
    status = job.run(control);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", launch.rank, e.what());
    std::fflush(stderr);
    std::_Exit(3);
  }
  return int(control.max_over_ranks(double(status)));
}

}  // namespace wallfacer::cli
