// Shared flags and output helpers of the subcommands (see common.hpp).
#include "common.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "commands.hpp"
#ifdef WALLFACER_WITH_MPI
#include <wallfacer/runtime/mpi/mpi_runner.hpp>
#endif
#ifdef WALLFACER_WITH_CUDA
#include <wallfacer/core/log.hpp>
#include <wallfacer/runtime/cuda/cuda_backend.hpp>
#endif

namespace wallfacer::cli {

int& exit_code() {
  static int code = 0;
  return code;
}

void add_workload_flags(CLI::App* app, WorkloadFlags& flags) {
  const std::string group = "Workload (unset flags keep the model's value)";
  app->add_option("--model", flags.model,
                  fmt::format("Model preset ({}) or model file (docs/formats/workload.md)",
                              fmt::join(model_preset_names(), ", ")))
      ->capture_default_str()
      ->group(group);
  WorkloadOverrides& o = flags.overrides;
  app->add_option("--layers", o.layers, "Transformer layers")->group(group);
  app->add_option("--hidden", o.hidden, "Hidden size H; re-derives head_dim unless --head-dim is given")->group(group);
  app->add_option("--heads", o.heads, "Query heads; re-derives head_dim unless --head-dim is given")->group(group);
  app->add_option("--kv-heads", o.kv_heads, "Key/value heads (GQA when fewer than --heads)")->group(group);
  app->add_option("--head-dim", o.head_dim, "Head dimension d; re-derives hidden unless --hidden is given")
      ->group(group);
  app->add_option("--ffn", o.ffn, "FFN inner size")->group(group);
  app->add_option("--vocab", o.vocab, "Vocabulary size")->group(group);
  app->add_option("--seq", o.seq, "Sequence length N in tokens")->group(group);
  app->add_option("--batch", o.batch, "Sequences per step B (split over data-parallel replicas)")->group(group);
  app->add_option("--dtype", o.dtype, "Activation type: bf16, fp16 or fp32")->group(group);
  CLI::Option* causal = app->add_flag_callback(
      "--causal", [&o] { o.causal = true; }, "Causal (decoder) attention mask");
  CLI::Option* full = app->add_flag_callback(
      "--no-causal", [&o] { o.causal = false; }, "Full (bidirectional) attention");
  causal->excludes(full)->group(group);
  full->group(group);
  app->add_option("--zero-stage", o.zero_stage,
                  "ZeRO stage 0..3: 0 all-reduces gradients, 1 shards the optimizer, 2 also gradients, 3 also "
                  "weights (FSDP) (default: the model file's, 1 for the presets)")
      ->group(group);
  app->add_option("--checkpointing", o.checkpointing,
                  "What the backward recomputes: none, selective (norms, rotary, activation) or full (the layer "
                  "forward) (default: selective)")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->group(group);
  app->add_flag_callback(
         "--fp8-linear", [&o] { o.fp8_linear = true; },
         "The layers' GEMMs in fp8 (Transformer Engine's recipe; attention and the LM head stay in --dtype)")
      ->group(group);
  app->add_option("--microbatches", o.microbatches,
                  "Micro-batches per step M: each data-parallel replica runs its sequences as M micro-batches "
                  "(gradient accumulation; the 1F1B pipeline schedule with --pp) (default: 1)")
      ->check(at_least(1))
      ->group(group);
  app->add_option("--grad-comm-dtype", o.grad_comm_dtype,
                  "The dtype gradients are reduced in: fp32 (Megatron-LM and NeMo under bf16, torchtitan's FSDP), "
                  "or bf16/fp16 (DeepSpeed's ZeRO reduces in the gradients' dtype) (default: fp32)")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}))
      ->group(group);
  app->add_option("--grad-bucket-MiB", o.grad_bucket_MiB, "Gradient synchronisation bucket in MiB (default: 25)")
      ->check(CLI::Range(1, 1 << 20))
      ->group(group);
}

Workload resolve(const WorkloadFlags& flags) {
  return load_workload(flags.model, flags.overrides);
}

void add_topology_flags(CLI::App* app, TopologyFlags& flags) {
  const std::string group = "Topology";
  app->add_option("--topology", flags.topology, "Topology preset or file (docs/formats/topology.md)")
      ->capture_default_str()
      ->group(group);
  app->add_option("--nodes", flags.nodes, "Node count of a compact topology (default: the file's)")
      ->check(CLI::Range(1, 1 << 20))
      ->group(group);
}

Topology load(const TopologyFlags& flags) {
  return Topology::load(flags.topology, flags.nodes);
}

bool is_topology_file(const std::string& topology) {
  const auto presets = Topology::preset_names();
  return std::find(presets.begin(), presets.end(), topology) == presets.end();
}

std::string path_from_plan(const std::string& topology_path, const std::string& plan_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path folder = fs::absolute(fs::path(plan_path), ec).parent_path();
  const fs::path relative = fs::absolute(fs::path(topology_path), ec).lexically_relative(folder);
  return relative.empty() ? fs::absolute(fs::path(topology_path), ec).generic_string() : relative.generic_string();
}

namespace {

// Loads `name` and scales a compact file to the plan's node count when --nodes is not given.
Topology load_for_plan(const std::string& name, const Plan& plan, std::optional<int> nodes) {
  Topology topology = Topology::load(name, nodes);
  if (!nodes && plan.topology_nodes > 0 && topology.num_nodes() != plan.topology_nodes)
    return Topology::load(name, plan.topology_nodes);
  return topology;
}

}  // namespace

Topology plan_topology(const Plan& plan, const std::string& plan_path, const TopologyFlags& flags, bool given) {
  if (given) return load_for_plan(flags.topology, plan, flags.nodes);
  if (!plan.topology_file.empty()) {
    namespace fs = std::filesystem;
    fs::path file = fs::path(plan.topology_file);
    if (file.is_relative()) file = fs::path(plan_path).parent_path() / file;
    const std::string shown = file.lexically_normal().generic_string();
    std::error_code ec;
    if (!fs::is_regular_file(file, ec))
      throw InputError(plan_path, 0,
                       fmt::format("the plan was made from the topology file '{}' (topology '{}', hash {}), which "
                                   "does not exist; pass --topology FILE with that topology",
                                   shown, plan.topology_name, plan.topology_hash));
    Topology topology = load_for_plan(shown, plan, flags.nodes);
    if (topology.content_hash() != plan.topology_hash)
      throw InputError(plan_path, 0,
                       fmt::format("the plan was made from the topology file '{}' with hash {}, but that file now "
                                   "has hash {}; pass --topology FILE with the file the plan was made from, or plan "
                                   "again",
                                   shown, plan.topology_hash, topology.content_hash()));
    return topology;
  }
  if (is_topology_file(plan.topology_name))
    throw InputError(plan_path, 0,
                     fmt::format("the plan names topology '{}', which is no preset, and records no topology file; "
                                 "pass --topology FILE with the file the plan was made from",
                                 plan.topology_name));
  return load_for_plan(plan.topology_name, plan, flags.nodes);
}

void warn_about_assumptions(const Topology& topology, const Calibration& calibration, const Workload& workload,
                            bool whole_step) {
  const std::string gap = calibration_gap(calibration, topology.gpu(), workload, whole_step);
  if (!gap.empty()) fmt::print(stderr, "warning: {}\n", gap);
  const std::vector<UnsourcedBlock> unsourced = unsourced_blocks(topology);
  if (unsourced.empty()) return;
  std::string where;
  for (size_t i = 0; i < unsourced.size() && i < 6; ++i)
    where += fmt::format("{}{} (line {})", i ? ", " : "", unsourced[i].path, unsourced[i].line);
  if (unsourced.size() > 6) where += fmt::format(" and {} more", unsourced.size() - 6);
  fmt::print(stderr,
             "note: {} gives no source for the numbers of {}; add `source:` citations "
             "(docs/formats/topology.md, \"Units, sources and evidence\") so the figures can be checked\n",
             topology.source(), where);
}

nlohmann::json to_json(const Workload& w) {
  return nlohmann::json{{"model", w.model},
                        {"layers", w.layers},
                        {"hidden", w.hidden},
                        {"heads", w.heads},
                        {"kv_heads", w.kv_heads},
                        {"head_dim", w.head_dim},
                        {"ffn", w.ffn},
                        {"vocab", w.vocab},
                        {"gated_ffn", w.gated_ffn},
                        {"seq", w.seq},
                        {"batch", w.batch},
                        {"dtype", to_string(w.dtype)},
                        {"causal", w.causal},
                        {"zero_stage", w.zero_stage},
                        {"checkpointing", to_string(w.checkpointing)},
                        {"grad_bucket_MiB", w.grad_bucket_MiB},
                        {"grad_comm_dtype", to_string(w.grad_comm_dtype)},
                        {"parameters", w.parameter_count()}};
}

void print_json(const nlohmann::json& value, std::ostream& out) {
  out << value.dump(2) << "\n";
}

CLI::Validator finite_at_least(double minimum, bool inclusive) {
  return CLI::Validator(
      [minimum, inclusive](std::string& text) -> std::string {
        double value = 0;
        try {
          size_t used = 0;
          value = std::stod(text, &used);
          if (used != text.size()) return "not a number: " + text;
        } catch (const std::exception&) {
          return "not a number: " + text;
        }
        if (!std::isfinite(value)) return "not a finite number: " + text;
        if (inclusive ? value < minimum : value <= minimum)
          return fmt::format("must be {} {} (got {})", inclusive ? "at least" : "greater than", minimum, text);
        return {};
      },
      inclusive ? fmt::format("NUMBER>={}", minimum) : fmt::format("NUMBER>{}", minimum));
}

CLI::Validator at_least(long long minimum) {
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        long long value = 0;
        try {
          size_t used = 0;
          value = std::stoll(text, &used);
          if (used != text.size()) return "not an integer: " + text;
        } catch (const std::exception&) {
          return "not an integer: " + text;
        }
        if (value < minimum) return fmt::format("must be at least {} (got {})", minimum, value);
        return {};
      },
      minimum == 0   ? "NONNEGATIVE"
      : minimum == 1 ? "POSITIVE"
                     : fmt::format("AT LEAST {}", minimum));
}

CLI::Option* add_sim_threads_flag(CLI::App* app, int& threads) {
  return app
      ->add_option("--sim-threads", threads,
                   fmt::format("Threads that run a simulation's rank actors; same results with any number. 0 = "
                               "automatic: 2 from {} ranks up when 2 CPUs are usable and one simulation runs at a "
                               "time, else 1",
                               kParallelFromRanks))
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
}

CLI::Option* add_progress_flag(CLI::App* app, double& seconds) {
  seconds = isatty(STDERR_FILENO) ? 10.0 : 0.0;
  return app
      ->add_option("--progress", seconds,
                   "Seconds between the lines each simulation prints to stderr on how far it got (default: 10 on "
                   "a terminal, else 0 = never)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              size_t used = 0;
              const double value = std::stod(text, &used);
              if (used != text.size()) return "not a number: " + text;
              if (!(value >= 0) || !std::isfinite(value))
                return fmt::format("must be 0 or more seconds (got {})", text);
            } catch (const std::exception&) {
              return "not a number: " + text;
            }
            return {};
          },
          "SECONDS"));
}

bool use_mpi_backend(const std::string& backend) {
#ifdef WALLFACER_WITH_MPI
  if (backend == "mpi") return true;
  return backend == "auto" && runtime::launched_by_mpirun();
#else
  if (backend == "mpi")
    throw InputError("--backend mpi: this build has no MPI support (configure with -DWALLFACER_MPI=ON)");
  return false;
#endif
}

void require_gpu() {
#ifdef WALLFACER_WITH_CUDA
  const runtime::CudaDeviceInfo info = runtime::cuda_device_info(0);
  if (!info.available) throw InputError("--backend cuda: no usable CUDA device here: " + info.description);
  WF_LOG_INFO("cli", "GPU: {}", info.description);
#else
  throw InputError(
      "--backend cuda: this build has no CUDA support (configure with -DWALLFACER_CUDA=ON where nvcc and NCCL are "
      "installed)");
#endif
}

int processes_on_this_node(int launched_ranks) {
  if (launched_ranks <= 0) return 0;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* value = std::getenv(name); value != nullptr && std::atoi(value) > 0) return std::atoi(value);
  return launched_ranks;
}

bool first_process_on_this_node(int rank) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::atoi(value) == 0;
  return rank <= 0;
}

}  // namespace wallfacer::cli
