// `wallfacer train`: trains the GPT-style decoder of a plan's workload on byte-level text or the
// shipped long-range recall task, every attention layer running the plan's attention program
// (docs/training.md). Under mpirun each process is one rank (MPI backend); otherwise all ranks
// run as threads here. `--backend cuda` trains on GPUs, the tensors in device memory and the
// step's kernels on the device (docs/cuda.md): under mpirun or srun one process per GPU over
// NCCL, issuing the step's device plan every step; otherwise every rank a thread with its own
// streams on GPU 0 (the local transport). Every input problem (plan, data, task, checkpoint) is
// reported before the first step with exit status 2.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <regex>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/runtime/memory_estimate.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/train/data.hpp>
#include <wallfacer/train/recall_task.hpp>
#include <wallfacer/train/run.hpp>
#include <wallfacer/train/source.hpp>
#include <wallfacer/train/step_device_plan.hpp>
#include <wallfacer/train/train_memory.hpp>
#include "bootstrap.hpp"
#include "commands.hpp"
#include "common.hpp"
#ifdef WALLFACER_WITH_MPI
#include <wallfacer/runtime/mpi/mpi_runner.hpp>
#endif
#ifdef WALLFACER_WITH_CUDA
#include <wallfacer/runtime/cuda/cuda_backend.hpp>
#endif

namespace wallfacer::cli {
namespace {

struct TrainFlags {
  std::string plan, data, task, backend = "auto", positions = "rotary", checkpoint;
  int64_t steps = 100, warmup = 10, checkpoint_every = 0;
  double lr = 3e-3, min_lr = 3e-4, weight_decay = 0.1, clip = 1.0, peak_gflops = 0;
  double rotary_base = train::kDefaultRotaryBase;
  uint64_t seed = 1, data_seed = 1;
  int64_t recall_pairs = 1, recall_key_len = 1, recall_value_len = 1, recall_min_distance = -1;
  int64_t recall_filler_symbols = train::kRecallFillerSymbols;
  int64_t recall_curriculum_copies = 1, recall_curriculum_steps = 0, recall_curriculum_length = 0;
  int log_every = 10;
  bool resume = false, json = false, fp64 = false, bf16_gemm = false;
  std::string memory_check = "on";
  BootstrapFlags bootstrap;
};

struct Prepared {
  Plan plan;
  Schedule attention;
  std::optional<train::TrainingSource> source;
  train::RunSettings settings;
  std::vector<std::optional<train::CheckpointState>> resume_states;  // by rank; this process's ranks only
};

train::RecallTaskSpec recall_spec(const TrainFlags& flags, int64_t seq) {
  train::RecallTaskSpec spec;
  spec.seq_len = seq;
  spec.pairs = flags.recall_pairs;
  spec.key_len = flags.recall_key_len;
  spec.value_len = flags.recall_value_len;
  // Default: half the sequence, so that every answer crosses the ranks of a sequence split.
  spec.min_distance = flags.recall_min_distance >= 0 ? flags.recall_min_distance : seq / 2;
  spec.filler_symbols = flags.recall_filler_symbols;
  spec.curriculum_copies = flags.recall_curriculum_copies;
  spec.curriculum_steps = flags.recall_curriculum_steps;
  spec.curriculum_length = flags.recall_curriculum_length;
  try {
    train::validate(spec);
  } catch (const InputError& e) {
    // The task names its fields ('key_len'); each but the plan's sequence length comes from a flag
    // (--recall-key-len).
    std::smatch field;
    const std::string message = e.message();
    if (!std::regex_search(message, field, std::regex("'([a-z_]+)'")) || field[1] == "seq_len") throw;
    throw InputError("--recall-" + std::regex_replace(field[1].str(), std::regex("_"), "-"), 0, message);
  }
  return spec;
}

// Where the ranks of this process train, for the memory check.
enum class Placement { Host, Device };

// What may make a plan that does not fit fit, in the words of the refusal: more machines to spread
// the ranks over, and only the changes the plan has not made yet (every rank holds every
// parameter, so more ranks on one machine need more, not less).
std::string memory_remedies(const Plan& plan, const char* more) {
  std::string text = fmt::format("use more {}", more);
  if (plan.workload.zero_stage < 2) text += ", ZeRO 2";
  if (plan.workload.checkpointing != Checkpointing::Full) text += ", full activation checkpointing";
  return text + ", a shorter sequence, or --memory-check off";
}

// Refuses, before anything is allocated, a run whose memory does not fit (exit 2 with the
// figures) instead of dying midway: the trainer's peak in backend memory measured for this
// process's ranks (train_memory.hpp), plus the host arrays of each rank's initial parameters and,
// on a GPU, the kernels' scratch and the CUDA/NCCL allowance. `rank` < 0: every rank here.
void check_train_memory(const TrainFlags& flags, const Plan& plan, Placement where, int rank, int launched) {
  if (flags.memory_check != "on") return;
  const bool all = rank < 0;
  const train::TrainMemory m =
      train::measure_train_memory(plan, flags.fp64, true, all ? std::vector<int>{} : std::vector<int>{rank});
  int64_t backend = 0;
  for (const train::RankTrainMemory& r : m.ranks)
    backend += r.backend_peak + (where == Placement::Device ? train::cuda_kernel_scratch_bytes(
                                                                  r, m, flags.bf16_gemm, flags.peak_gflops <= 0, all)
                                                            : 0);
  const int64_t init = int64_t(m.ranks.size()) * m.init_host_bytes();
  const int64_t host = (where == Placement::Host ? backend : 0) + init;
  const std::string ranks_text = all ? fmt::format("{} ranks", m.ranks.size()) : fmt::format("rank {}", rank);
  WF_LOG_INFO("cli", "train memory for {}: {} in {} memory (trainer peak), {} host for the initial parameters",
              ranks_text, runtime::bytes_text(backend), where == Placement::Host ? "host" : "GPU",
              runtime::bytes_text(init));
#ifdef WALLFACER_WITH_CUDA
  if (where == Placement::Device) {
    const int device = all ? 0 : runtime::cuda_process_device();
    const int64_t need = backend + runtime::kDeviceRuntimeAllowanceBytes;
    const runtime::CudaMemoryInfo gpu = runtime::cuda_memory_info(device);
    if (gpu.free >= 0 && need > gpu.free)
      throw InputError(
          flags.plan, 0,
          fmt::format("training this plan needs about {} on GPU {} for {} (the trainer's peak and the "
                      "kernels' scratch {}, CUDA and NCCL {}), but the GPU has {} free of {}; {}",
                      runtime::bytes_text(need), device, ranks_text, runtime::bytes_text(backend),
                      runtime::bytes_text(runtime::kDeviceRuntimeAllowanceBytes), runtime::bytes_text(gpu.free),
                      runtime::bytes_text(gpu.total), memory_remedies(plan, "GPUs")));
  }
#endif
  const int processes = std::max(1, processes_on_this_node(launched));
  const int64_t node = host * (all ? 1 : processes);
  const int64_t available = runtime::available_memory_bytes();
  if (!first_process_on_this_node(rank) || available < 0 || node <= available) return;
  throw InputError(flags.plan, 0,
                   fmt::format("training this plan needs about {} of host memory here ({}{}: {} for the trainer, {} "
                               "for the initial parameters), but only {} is available (MemAvailable); {}",
                               runtime::bytes_text(node), ranks_text,
                               all || processes == 1 ? "" : fmt::format(" times {} processes on this node", processes),
                               runtime::bytes_text(where == Placement::Host ? backend : 0), runtime::bytes_text(init),
                               runtime::bytes_text(available),
                               memory_remedies(plan, "nodes (the ranks as processes over them under mpirun)")));
}

// `rank` < 0: every rank of the plan runs here (threads).
std::unique_ptr<Prepared> prepare(const TrainFlags& flags, int launched_ranks, int rank = -1) {
  auto p = std::make_unique<Prepared>();
  p->plan = read_plan_file(flags.plan);
  if (launched_ranks > 0 && launched_ranks != p->plan.num_ranks())
    throw InputError(flags.plan, 0,
                     fmt::format("the plan has {} ranks but {} processes were started; run it with mpirun -np {}",
                                 p->plan.num_ranks(), launched_ranks, p->plan.num_ranks()));
  const Workload& w = p->plan.workload;
  if (w.vocab < 256)
    throw InputError(flags.plan, 0,
                     fmt::format("workload vocab {} is below 256, the byte-level tokens need 256", w.vocab));
  try {  // what the trainer refuses, blamed on the plan file
    train::check_trainable(p->plan);
    train::model_shape(w, train::parse_positions(flags.positions), flags.rotary_base);
  } catch (const InputError& e) {
    throw InputError(flags.plan, 0, e.message());
  }
  p->attention = train::attention_schedule(p->plan);
  const std::string task = flags.task.empty() ? (flags.data.empty() ? "recall" : "text") : flags.task;
  if (task == "text") {
    if (flags.data.empty()) throw InputError("--data: a text file is required with --task text");
    p->source = train::TrainingSource::text(train::ByteDataset::open(flags.data), w.seq);
  } else {
    if (!flags.data.empty()) throw InputError("--data: the recall task generates its sequences; drop --data");
    p->source = train::TrainingSource::recall(recall_spec(flags, w.seq));
  }
  train::RunSettings& s = p->settings;
  s.steps = flags.steps;
  s.fp64 = flags.fp64;
  s.trainer.positions = train::parse_positions(flags.positions);
  s.trainer.rotary_base = flags.rotary_base;
  s.trainer.seed = flags.seed;
  s.trainer.total_steps = flags.steps;
  s.trainer.optimizer.lr = flags.lr;
  s.trainer.optimizer.min_lr = flags.min_lr;
  s.trainer.optimizer.warmup = flags.warmup;
  s.trainer.optimizer.weight_decay = flags.weight_decay;
  s.trainer.optimizer.clip = flags.clip;
  s.checkpoint_dir = flags.checkpoint;
  s.checkpoint_every = flags.checkpoint_every;
  s.resume = flags.resume;
  s.peak_flops_per_rank = flags.peak_gflops * 1e9;
  s.data_description = p->source->describe();
  s.data_seed = flags.data_seed;
  if (flags.resume && flags.checkpoint.empty()) throw InputError("--resume needs --checkpoint DIR");
  if (flags.resume) {  // before any communication: a bad checkpoint is bad input (exit 2) on every rank
    const int ranks = p->plan.num_ranks();
    p->resume_states.resize(size_t(ranks));
    for (int r = 0; r < ranks; ++r)
      if (rank < 0 || r == rank)
        p->resume_states[size_t(r)] = train::read_resume_state(flags.checkpoint, p->plan, r, ranks, flags.data_seed);
    s.resume_states = &p->resume_states;
  }
  return p;
}

train::BatchSource batches(const Prepared& p, uint64_t data_seed) {
  const train::TrainingSource& source = *p.source;
  return [&source, data_seed](int64_t step, int sample) { return source.sample(data_seed, step, sample); };
}

void print_summary(const TrainFlags& flags, const Prepared& p, const train::RunReport& r, int ranks,
                   const std::string& backend) {
  if (flags.json) return;
  const Plan& plan = p.plan;
  std::printf("trained %s on %d ranks (backend %s, %s): steps %lld to %lld\n", to_string(plan.strategy), ranks,
              backend.c_str(), flags.fp64 ? "fp64" : "fp32", static_cast<long long>(r.first_step),
              static_cast<long long>(r.first_step + int64_t(r.losses.size())));
  if (!r.losses.empty())
    std::printf("loss %.4f -> %.4f, %.0f tokens/s, MFU %.1f%% of %.1f GFLOP/s per rank\n", r.losses.front(),
                r.losses.back(), r.tokens_per_s, 100 * r.mfu, r.peak_flops_per_rank / 1e9);
  if (auto chance = p.source->chance_loss(); chance && !r.losses.empty()) {
    // Over the last 20 steps (or all): single steps count few answers.
    const size_t n = std::min<size_t>(20, r.losses.size());
    double loss = 0, accuracy = 0;
    for (size_t i = r.losses.size() - n; i < r.losses.size(); ++i) {
      loss += r.losses[i] / double(n);
      accuracy += r.accuracies[i] / double(n);
    }
    std::printf("%s: answer loss %.4f (chance %.4f), accuracy %.1f%% over the last %zu steps\n",
                p.source->describe().c_str(), loss, *chance, 100 * accuracy, n);
  }
  if (r.checkpoints_written > 0)
    std::printf("checkpoints written: %lld (latest in %s)\n", static_cast<long long>(r.checkpoints_written),
                flags.checkpoint.c_str());
  std::fflush(stdout);
}

int train_on(runtime::Backend& backend, const TrainFlags& flags, const Prepared& p) {
  std::unique_ptr<train::ProgressReporter> reporter;
  if (backend.rank() == 0) reporter = std::make_unique<train::ProgressReporter>(flags.json, true, flags.log_every);
  auto on_step = [&](const train::StepRecord& record) {
    if (reporter) reporter->report(record);
  };
  const train::RunReport r =
      train::train_run(backend, p.plan, p.attention, batches(p, flags.data_seed), p.settings, on_step);
  if (reporter) {
    reporter->finish();
    print_summary(flags, p, r, backend.size(), backend.name());
  }
  return 0;
}

int run_local(const TrainFlags& flags) {
  auto p = prepare(flags, 0);
  check_train_memory(flags, p->plan, Placement::Host, -1, 0);
  int status = 0;
  runtime::run_local_ranks(p->plan.num_ranks(), [&](runtime::Backend& backend) {
    const int s = train_on(backend, flags, *p);
    if (backend.rank() == 0) status = s;
  });
  return status;
}

#ifdef WALLFACER_WITH_CUDA
// The trainer's tensors in device memory and its Gemm, Pointwise and Optimizer ops on the CUDA
// step kernels.
void use_cuda_kernels(const TrainFlags& flags, Prepared& p) {
  runtime::CudaStepKernelsOptions kernels;
  kernels.bf16_gemm = flags.bf16_gemm;
  p.settings.trainer.kernels_f32 = [kernels](runtime::Backend& b) {
    return runtime::make_cuda_step_kernels<float>(b, kernels);
  };
  p.settings.trainer.kernels_f64 = [](runtime::Backend& b) { return runtime::make_cuda_step_kernels<double>(b); };
}

// One process per GPU: every rank reads its input and builds the step's device plan (every
// rank's program, the trainer's scalar all-reduces written in), then trains over NCCL with the
// unique id carried by `control`.
struct NcclTrainRank {
  std::unique_ptr<Prepared> prepared;
  runtime::DevicePlan device;
  void prepare(const TrainFlags& flags, int rank, int size) {
    require_gpu();
    prepared = cli::prepare(flags, size, rank);
    check_train_memory(flags, prepared->plan, Placement::Device, rank, size);
    use_cuda_kernels(flags, *prepared);
    device = train::step_device_plan(prepared->plan).device;
  }
  template <typename Control>
  int run(const TrainFlags& flags, Control& control) {
    auto backend = runtime::make_nccl_backend(control, device.ranks[size_t(control.rank())]);
    return train_on(*backend, flags, *prepared);
  }
};

int run_cuda(const TrainFlags& flags) {
  NcclTrainRank rank;
  const std::optional<int> launched = run_launched_ranks(
      flags.bootstrap, [&](int r, int size) { rank.prepare(flags, r, size); },
      [&](auto& control) { return rank.run(flags, control); }, [](auto&) {});
  if (launched) return *launched;
  // Every rank of the plan as a thread on GPU 0.
  auto p = prepare(flags, 0);
  check_train_memory(flags, p->plan, Placement::Device, -1, 0);
  use_cuda_kernels(flags, *p);
  int status = 0;
  runtime::run_cuda_local_ranks(p->plan.num_ranks(), [&](runtime::Backend& backend) {
    const int s = train_on(backend, flags, *p);
    if (backend.rank() == 0) status = s;
  });
  return status;
}
#endif

int train_command(const TrainFlags& flags) {
  if (flags.bf16_gemm && (flags.backend != "cuda" || flags.fp64))
    throw InputError("--bf16-gemm: only with --backend cuda, in fp32 training");
  if (flags.backend == "cuda") {
    require_gpu();  // exit 2 without CUDA or a GPU
#ifdef WALLFACER_WITH_CUDA
    return run_cuda(flags);
#endif
  }
  if (!use_mpi_backend(flags.backend)) return run_local(flags);
#ifdef WALLFACER_WITH_MPI
  std::unique_ptr<Prepared> prepared;
  runtime::MpiJob job;
  job.prepare = [&](int rank, int size) {
    prepared = prepare(flags, size, rank);
    check_train_memory(flags, prepared->plan, Placement::Host, rank, size);
    // As `run` does: MPI moves large messages only inside its calls, so long kernels yield to it.
    prepared->settings.trainer.executor.progress_rows = 256;
  };
  job.run = [&](runtime::Backend& backend) { return train_on(backend, flags, *prepared); };
  return runtime::run_mpi_job(job);
#else
  return 2;
#endif
}

}  // namespace

void register_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train the GPT-style decoder of a plan's workload on byte-level text or the long-range recall task, every "
      "attention layer running the plan's strategy. Under mpirun each process is one rank; otherwise all ranks run "
      "as threads here.");
  cmd->add_option("--plan", flags->plan, "Plan file written by `wallfacer plan --out`")->required();
  cmd->add_option("--data", flags->data, "Text file to train on, one token per byte (--task text)");
  cmd->add_option("--task", flags->task,
                  "text or recall (the synthetic long-range key retrieval); default: text with --data, else recall")
      ->check(CLI::IsMember({"text", "recall"}));
  cmd->add_option("--steps", flags->steps, "Training steps of the whole run")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--lr", flags->lr, "Peak learning rate")->capture_default_str()->check(finite_at_least(0, false));
  cmd->add_option("--min-lr", flags->min_lr, "Learning rate at the end of the cosine decay")
      ->capture_default_str()
      ->check(finite_at_least(0, true));
  cmd->add_option("--warmup", flags->warmup, "Steps of linear learning-rate warmup")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--weight-decay", flags->weight_decay, "AdamW decoupled weight decay (matrices and embeddings)")
      ->capture_default_str()
      ->check(finite_at_least(0, true));
  cmd->add_option("--clip", flags->clip, "Largest global gradient norm (0: no clipping)")
      ->capture_default_str()
      ->check(finite_at_least(0, true));
  cmd->add_option("--seed", flags->seed, "Seed of the parameter initialisation")->capture_default_str();
  cmd->add_option("--data-seed", flags->data_seed, "Seed of the samples (text windows, recall sequences)")
      ->capture_default_str();
  cmd->add_option("--positions", flags->positions, "Position encoding: rotary or learned")
      ->capture_default_str()
      ->check(CLI::IsMember({"rotary", "learned"}));
  cmd->add_option("--rotary-base", flags->rotary_base,
                  "Rotary positions: pair i of a head turns by position * base^(-2i/head_dim); a larger base keeps "
                  "more pairs for matching on content over long distances")
      ->capture_default_str()
      ->check(finite_at_least(1, false));
  cmd->add_option("--checkpoint", flags->checkpoint, "Directory of the run's checkpoints");
  cmd->add_option("--checkpoint-every", flags->checkpoint_every,
                  "Steps between checkpoints (0: only after the last step)")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_flag("--resume", flags->resume,
                "Continue from the latest checkpoint in --checkpoint (a fresh start when there is none)");
  cmd->add_option("--log-every", flags->log_every, "Steps between progress lines when the output is not a terminal")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_flag("--json", flags->json, "One JSON record per step on stdout (progress then goes to stderr)");
  cmd->add_flag("--fp64", flags->fp64, "Train in double precision (gradient checks)");
  cmd->add_option("--peak-gflops", flags->peak_gflops,
                  "Dense GFLOP/s of one rank for the MFU (default: measured with a GEMM at start)")
      ->check(finite_at_least(0, true));
  cmd->add_option("--recall-pairs", flags->recall_pairs, "Recall task: keys defined and queried per sequence")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--recall-key-len", flags->recall_key_len, "Recall task: letters per key")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--recall-value-len", flags->recall_value_len, "Recall task: digits per value")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--recall-min-distance", flags->recall_min_distance,
                  "Recall task: fewest tokens between a definition and its answer (default: half the sequence)")
      ->check(at_least(0));
  cmd->add_option("--recall-filler-symbols", flags->recall_filler_symbols,
                  "Recall task: filler symbols drawn from 'a'-'z' and space, in that order (1: 'a' only)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{train::kRecallFillerSymbols}));
  cmd->add_option("--recall-curriculum-copies", flags->recall_curriculum_copies,
                  "Recall task: copies of each definition at step 0, falling geometrically to 1 at "
                  "--recall-curriculum-steps")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--recall-curriculum-steps", flags->recall_curriculum_steps,
                  "Recall task: steps of the curriculum (0: none, every definition written once)")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--recall-curriculum-length", flags->recall_curriculum_length,
                  "Recall task: tokens the task spans at step 0 (its queries end there, the min distance scaled "
                  "alike), growing geometrically to the sequence at --recall-curriculum-steps (0: the whole "
                  "sequence from the start)")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--backend", flags->backend,
                  "auto (MPI under mpirun, else threads), local, mpi, or cuda (tensors and kernels on the device: one "
                  "process per GPU over NCCL under mpirun or srun, else every rank a thread on GPU 0)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "local", "mpi", "cuda"}));
  add_bootstrap_flags(cmd, flags->bootstrap);
  cmd->add_flag("--bf16-gemm", flags->bf16_gemm,
                "--backend cuda, fp32: GEMM inputs rounded to bf16 (fp32 accumulation and outputs)");
  cmd->add_option("--memory-check", flags->memory_check,
                  "Refuse a run whose memory does not fit before anything is allocated: the trainer's peak, "
                  "measured by building it and running two steps that compute nothing, with the initial "
                  "parameters' host arrays, against the memory available here (MemAvailable), and with --backend "
                  "cuda on the device with the kernels' scratch and 512 MiB for CUDA and NCCL, against the GPU's "
                  "free memory: on or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  cmd->callback([flags] { exit_code() = train_command(*flags); });
}

}  // namespace wallfacer::cli
