// `wallfacer run`: executes one attention layer, forward and backward, of a plan for real on
// CPUs or GPUs, on seeded or loaded inputs, and optionally checks every result against the fp64
// naive reference. Under mpirun (in a build with MPI) each process is one rank of the MPI
// backend; otherwise all of the plan's ranks run as threads of this process (local backend).
// `--backend cuda` runs on GPUs: one process per GPU with NCCL under mpirun, otherwise every
// rank as a thread with its own streams on one GPU (docs/cuda.md). Every input problem is
// reported before any compute, with exit status 2; a failed check exits with 1.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/layer_runner.hpp>
#include <wallfacer/runtime/memory_estimate.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "bootstrap.hpp"
#include "commands.hpp"
#include "common.hpp"
#ifdef WALLFACER_WITH_MPI
#include <wallfacer/runtime/mpi/mpi_runner.hpp>
#endif
#ifdef WALLFACER_WITH_CUDA
#include <wallfacer/runtime/cuda/cuda_backend.hpp>
#include <wallfacer/runtime/device_plan.hpp>
#endif

namespace wallfacer::cli {
namespace {

struct RunFlags {
  std::string plan, topology, load, save, backend = "auto";
  bool check = false, fp64 = false, json = false;
  std::optional<int> nodes;
  uint64_t seed = 1;
  double tolerance = 0;
  int64_t progress_rows = -1;  // -1: 0 for the local and CUDA backends, 256 for MPI
  double stall_seconds = 300;
  double peer_check_seconds = 2;
  double heartbeat_seconds = 15;
  std::string memory_check = "on";
  BootstrapFlags bootstrap;
};

struct Prepared {
  Plan plan;
  Schedule schedule;
  runtime::LayerInputs inputs;
};

// The plan against --topology, or against the topology it names (as `simulate` does) when that
// is a preset or a file here: a plan edited by hand or made for another cluster is refused.
void check_topology(const RunFlags& flags, const Plan& plan) {
  // A plan made from a topology file names it: the file, when its hash matches, or --topology.
  if (!flags.topology.empty() || !plan.topology_file.empty()) {
    const Topology topology =
        plan_topology(plan, flags.plan, TopologyFlags{flags.topology, flags.nodes}, !flags.topology.empty());
    check_plan_against_topology(plan, topology, flags.plan);
    return;
  }
  TopologyFlags which{plan.topology_name, flags.nodes};
  if (flags.topology.empty()) {
    const auto presets = Topology::preset_names();
    std::error_code ec;
    if (std::find(presets.begin(), presets.end(), which.topology) == presets.end() &&
        !std::filesystem::exists(which.topology, ec)) {
      WF_LOG_WARN("cli",
                  "{}: topology '{}' is neither a preset nor a file here; its hash is not checked (give "
                  "--topology)",
                  flags.plan, plan.topology_name);
      return;
    }
  }
  Topology topology = load(which);
  if (!which.nodes && topology.num_nodes() != plan.topology_nodes && plan.topology_nodes > 0) {
    which.nodes = plan.topology_nodes;
    topology = load(which);
  }
  check_plan_against_topology(plan, topology, flags.plan);
}

// Everything that can be wrong with the input, checked before any compute.
std::unique_ptr<Prepared> prepare(const RunFlags& flags, int launched_ranks, int rank = -1) {
  auto p = std::make_unique<Prepared>();
  p->plan = read_plan_file(flags.plan);
  if (launched_ranks > 0 && launched_ranks != p->plan.num_ranks())
    throw InputError(flags.plan, 0,
                     fmt::format("the plan has {} ranks but {} processes were started; run it with mpirun -np {}",
                                 p->plan.num_ranks(), launched_ranks, p->plan.num_ranks()));
  check_topology(flags, p->plan);
  p->schedule = build_schedule(p->plan);
  // Before the inputs or any rank's buffers exist: refused with the figures, not killed later.
  const auto estimate = runtime::estimate_run_memory(p->plan, p->schedule, flags.fp64, flags.check,
                                                     processes_on_this_node(launched_ranks));
  WF_LOG_INFO("cli", "run memory estimate: {}", estimate.describe());
  if (flags.memory_check == "on" && first_process_on_this_node(rank))
    runtime::check_run_memory(estimate, runtime::available_memory_bytes(), flags.plan);
  const Workload& w = p->plan.workload;
  p->inputs = flags.load.empty() ? runtime::seeded_inputs(w, flags.seed, flags.fp64)
                                 : runtime::load_inputs(flags.load, w, flags.fp64);
  if (!flags.save.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(flags.save, ec);
    if (ec) throw InputError(fmt::format("--save {}: cannot create the directory: {}", flags.save, ec.message()));
  }
  return p;
}

runtime::LayerRunOptions layer_options(const RunFlags& flags, bool mpi) {
  runtime::LayerRunOptions options;
  options.fp64 = flags.fp64;
  options.check = flags.check;
  options.tolerance = flags.tolerance;
  options.executor.progress_rows = flags.progress_rows >= 0 ? flags.progress_rows : (mpi ? 256 : 0);
  return options;
}

nlohmann::json to_json(const runtime::ErrorStats& s) {
  return {{"max_abs", s.max_abs}, {"max_ref", s.max_ref}, {"relative", s.relative}, {"finite", s.finite}};
}

// GPU backends: the share of the device's communication time that ran while the compute stream
// was busy, as a lower bound: communication not hidden shows as compute-stream idle time.
double hidden_fraction(const runtime::LayerRunResult& r) {
  if (r.comm_seconds <= 0) return 0;
  return std::clamp(1.0 - r.wait_seconds / r.comm_seconds, 0.0, 1.0);
}

nlohmann::json summary_json(const RunFlags& flags, const Plan& plan, const runtime::LayerRunResult& r) {
  nlohmann::json j;
  j["plan"] = flags.plan;
  j["strategy"] = to_string(plan.strategy);
  j["ranks"] = r.ranks;
  j["backend"] = r.backend;
  j["precision"] = r.fp64 ? "fp64" : "fp32";
  j["seed"] = flags.seed;
  j["inputs"] = flags.load.empty() ? std::string("seeded") : flags.load;
  j["workload"] = cli::to_json(plan.workload);
  j["wall_ms"] = r.seconds * 1e3;
  j["compute_ms"] = r.compute_seconds * 1e3;
  j["wait_ms"] = r.wait_seconds * 1e3;
  j["comm_ms"] = r.comm_seconds * 1e3;
  if (r.comm_seconds > 0) j["comm_hidden_fraction"] = hidden_fraction(r);
  j["flops"] = r.flops;
  j["gflops_per_s"] = r.seconds > 0 ? r.flops / r.seconds * 1e-9 : 0.0;
  j["bytes_sent"] = r.bytes_sent;
  if (flags.check) {
    nlohmann::json check;
    for (const auto& c : r.checks) {
      nlohmann::json t = to_json(c.stats);
      t["tolerance"] = c.tolerance;
      t["ok"] = c.ok;
      check["tensors"][c.name] = t;
    }
    check["weight_grad"] = {{"present", r.weight_grad.present},
                            {"elements", r.weight_grad.elements},
                            {"mismatches", r.weight_grad.mismatches},
                            {"ok", r.weight_grad.ok}};
    check["ok"] = r.ok;
    j["check"] = check;
  }
  j["ok"] = !flags.check || r.ok;
  return j;
}

void print_text(const RunFlags& flags, const Plan& plan, const runtime::LayerRunResult& r) {
  const Workload& w = plan.workload;
  std::printf("wallfacer run: %s plan '%s', %d ranks, backend %s, %s, %s inputs\n", to_string(plan.strategy),
              flags.plan.c_str(), r.ranks, r.backend.c_str(), r.fp64 ? "fp64" : "fp32",
              flags.load.empty() ? fmt::format("seeded (seed {})", flags.seed).c_str() : flags.load.c_str());
  std::printf("workload: batch %d, seq %lld, heads %d (kv %d), head_dim %d, %s\n", w.batch, (long long)w.seq, w.heads,
              w.kv_heads, w.head_dim, w.causal ? "causal" : "full mask");
  std::printf(
      "layer forward+backward: %.3f ms (slowest rank; compute %.3f ms, blocked on communication %.3f ms), "
      "%.4g GFLOP, %.3g GFLOP/s\n",
      r.seconds * 1e3, r.compute_seconds * 1e3, r.wait_seconds * 1e3, r.flops * 1e-9,
      r.seconds > 0 ? r.flops / r.seconds * 1e-9 : 0.0);
  if (r.comm_seconds > 0)
    std::printf("device: kernels %.3f ms, communication %.3f ms, at least %.0f %% of it hidden behind compute\n",
                r.compute_seconds * 1e3, r.comm_seconds * 1e3, 100 * hidden_fraction(r));
  if (!flags.check) return;
  const double tolerance = r.checks.empty() ? 0 : r.checks.front().tolerance;
  std::printf("check against the fp64 naive reference (relative error = max|a-b| / max|ref|, tolerance %.0e):\n",
              tolerance);
  for (const auto& c : r.checks)
    std::printf("  %-4s max abs %.3e  max ref %.3e  relative %.3e  %s\n", c.name.c_str(), c.stats.max_abs,
                c.stats.max_ref, c.stats.relative, c.ok ? "OK" : "NOT OK");
  if (r.weight_grad.present)
    std::printf(
        "  weight_grad all-reduce: %lld elements per rank, %lld differ from the sum over contributing ranks  %s\n",
        (long long)r.weight_grad.elements, (long long)r.weight_grad.mismatches, r.weight_grad.ok ? "OK" : "NOT OK");
  if (!r.weight_grad.ok) std::printf("    first: %s\n", r.weight_grad.first_mismatch.c_str());
  std::printf("%s\n", r.ok ? "all checks passed" : "CHECK FAILED");
}

// Rank 0's share: save, report, exit status.
int conclude(const RunFlags& flags, const Plan& plan, const runtime::LayerRunResult& r) {
  if (!flags.save.empty()) runtime::save_outputs(flags.save, r.outputs, flags.fp64);
  if (flags.json)
    print_json(summary_json(flags, plan, r));
  else
    print_text(flags, plan, r);
  std::fflush(stdout);
  return flags.check && !r.ok ? 1 : 0;
}

int run_local(const RunFlags& flags) {
  auto p = prepare(flags, 0);
  auto result = runtime::run_layer_local(p->plan, p->schedule, p->inputs, layer_options(flags, false));
  return conclude(flags, p->plan, result);
}

#ifdef WALLFACER_WITH_MPI
// WALLFACER_TEST_FAULT=stop|kill|sleep:RANK:POSTS: the tests' way to freeze, kill or slow down
// one rank mid-run (docs/reliability.md); not a user setting, so not a flag.
void read_fault_injection(runtime::MpiBackendOptions& options) {
  const char* spec = std::getenv("WALLFACER_TEST_FAULT");
  if (spec == nullptr || *spec == '\0') return;
  char kind[8] = {0};
  int rank = -1, posts = 1;
  if (std::sscanf(spec, "%7[a-z]:%d:%d", kind, &rank, &posts) < 2 ||
      (std::string(kind) != "stop" && std::string(kind) != "kill" && std::string(kind) != "sleep"))
    throw InputError(fmt::format("WALLFACER_TEST_FAULT must be stop, kill or sleep:RANK[:POSTS], got '{}'", spec));
  options.fault = kind;
  options.fault_rank = rank;
  options.fault_after_posts = std::max(1, posts);
}
#endif

#ifdef WALLFACER_WITH_CUDA
// The GPU memory of the ranks this process puts on its GPU, against the GPU's free memory.
void check_gpu_memory(const RunFlags& flags, const Prepared& p, bool all_ranks_here, int device) {
  const auto estimate = runtime::estimate_device_memory(p.plan, p.schedule, flags.fp64, all_ranks_here);
  WF_LOG_INFO("cli", "GPU memory estimate: {}", estimate.describe());
  if (flags.memory_check != "on") return;
  const runtime::CudaMemoryInfo memory = runtime::cuda_memory_info(device);
  runtime::check_device_memory(estimate, memory.free, memory.total, device, flags.plan);
}

// One process per GPU: prepared on every rank, then NCCL over `control`'s unique id.
struct NcclRank {
  std::unique_ptr<Prepared> prepared;
  runtime::DevicePlan device;
  void prepare(const RunFlags& flags, int rank, int size) {
    require_gpu();
    prepared = cli::prepare(flags, size, rank);
    check_gpu_memory(flags, *prepared, false, runtime::cuda_process_device());
    device = runtime::make_device_plan(prepared->schedule, prepared->plan);
  }
  template <typename Control>
  int run(const RunFlags& flags, Control& control) {
    auto backend = runtime::make_nccl_backend(control, device.ranks[size_t(control.rank())]);
    auto result =
        runtime::run_layer(*backend, prepared->plan, prepared->schedule, prepared->inputs, layer_options(flags, false));
    return backend->rank() == 0 ? conclude(flags, prepared->plan, result) : 0;
  }
};

int run_cuda(const RunFlags& flags) {
  NcclRank rank;
  const std::optional<int> launched = run_launched_ranks(
      flags.bootstrap, [&](int r, int size) { rank.prepare(flags, r, size); },
      [&](auto& control) { return rank.run(flags, control); },
      [&](auto& job) {
        job.backend.stall_seconds = flags.stall_seconds;
        job.backend.peer_check_seconds = flags.peer_check_seconds;
      });
  if (launched) return *launched;
  require_gpu();
  auto p = prepare(flags, 0);
  check_gpu_memory(flags, *p, true, 0);
  auto result = runtime::run_layer_cuda_local(p->plan, p->schedule, p->inputs, layer_options(flags, false));
  return conclude(flags, p->plan, result);
}
#endif

int run_command(const RunFlags& flags) {
  if (flags.backend == "cuda") {
#ifdef WALLFACER_WITH_CUDA
    return run_cuda(flags);
#else
    require_gpu();  // throws: no CUDA in this build
#endif
  }
  if (!use_mpi_backend(flags.backend)) return run_local(flags);
#ifdef WALLFACER_WITH_MPI
  std::unique_ptr<Prepared> prepared;
  runtime::MpiJob job;
  job.backend.stall_seconds = flags.stall_seconds;
  job.backend.peer_check_seconds = flags.peer_check_seconds;
  job.backend.heartbeat_seconds = flags.heartbeat_seconds;
  read_fault_injection(job.backend);
  job.prepare = [&](int rank, int size) { prepared = prepare(flags, size, rank); };
  job.run = [&](runtime::Backend& backend) {
    auto result =
        runtime::run_layer(backend, prepared->plan, prepared->schedule, prepared->inputs, layer_options(flags, true));
    return backend.rank() == 0 ? conclude(flags, prepared->plan, result) : 0;
  };
  return runtime::run_mpi_job(job);
#else
  return 2;
#endif
}

}  // namespace

void register_run_command(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run one attention layer (forward and backward) of a plan on CPUs or GPUs and optionally check it against the "
      "fp64 reference. Under mpirun each process is one rank (MPI backend); otherwise all ranks run as threads here.");
  cmd->add_option("--plan", flags->plan, "Plan file written by `wallfacer plan --out`")->required();
  cmd->add_option(
      "--topology", flags->topology,
      "Topology preset or file the plan must have been made for (checked by name, nodes and hash; default: the "
      "file the plan records, when it records one)");
  cmd->add_option("--nodes", flags->nodes, "Node count of a compact --topology file, as given to `wallfacer plan`")
      ->check(at_least(1));
  cmd->add_flag("--check", flags->check,
                "Compare O, lse, dQ, dK, dV with the fp64 naive reference and the WeightGrad all-reduce with its "
                "exact sum; exit status 1 when a tensor is off by more than the tolerance");
  cmd->add_option("--tolerance", flags->tolerance,
                  "Largest relative error max|a-b|/max|ref| that passes (default 1e-4, or 1e-10 with --fp64)")
      ->check(finite_at_least(0, false));
  cmd->add_option("--load", flags->load,
                  "Directory with q.npy, k.npy, v.npy, do.npy (float32, [batch, seq, heads, head_dim])");
  cmd->add_option("--save", flags->save,
                  "Directory to write o.npy, dq.npy, dk.npy, dv.npy and lse.npy ([batch, heads, seq])");
  cmd->add_option("--seed", flags->seed, "Seed of the generated inputs (independent of the rank count)");
  cmd->add_flag("--fp64", flags->fp64, "Run every kernel and message in double precision");
  cmd->add_flag("--json", flags->json, "Print a machine-readable summary on stdout");
  cmd->add_option("--backend", flags->backend,
                  "auto (MPI under mpirun, else threads), local, mpi, or cuda (GPUs: NCCL, one process per GPU, "
                  "under mpirun; else every rank on one GPU)")
      ->check(CLI::IsMember({"auto", "local", "mpi", "cuda"}));
  cmd->add_option("--progress-rows", flags->progress_rows,
                  "Query rows per compute slice between communication progress calls (0: whole blocks; default 256 "
                  "under MPI, 0 with threads)")
      ->check(at_least(0));
  cmd->add_option("--stall-timeout", flags->stall_seconds,
                  "MPI: seconds without any completed transfer before a rank gives up and aborts the run (0: never)")
      ->capture_default_str()
      ->check(finite_at_least(0, true));
  cmd->add_option("--peer-check", flags->peer_check_seconds,
                  "MPI: seconds between a waiting rank's checks that the ranks it waits on (on its host) are alive "
                  "and not stopped; a lost one ends the run naming it (0: never)")
      ->capture_default_str()
      ->check(finite_at_least(0, true));
  cmd->add_option("--heartbeat-timeout", flags->heartbeat_seconds,
                  "MPI: seconds without a heartbeat from a rank (on any host) that a waiting rank waits on before "
                  "it ends the run naming it; ranks beat while they wait and between compute slices "
                  "(--progress-rows), so raise it with --progress-rows 0 (0: no heartbeat)")
      ->capture_default_str()
      ->check(finite_at_least(0, true));
  cmd->add_option("--memory-check", flags->memory_check,
                  "Refuse a run whose estimated memory (inputs, every rank's buffers, outputs, the reference) "
                  "exceeds the memory available here (MemAvailable), and with --backend cuda a run whose GPU "
                  "memory estimate exceeds the GPU's free memory (cudaMemGetInfo): on or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  add_bootstrap_flags(cmd, flags->bootstrap);
  cmd->callback([flags] { exit_code() = run_command(*flags); });
}

}  // namespace wallfacer::cli
