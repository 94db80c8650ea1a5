#include <wallfacer/train/run.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <wallfacer/train/layers.hpp>
#include <wallfacer/train/source.hpp>
#include "backend_array.hpp"

namespace wallfacer::train {

std::string plan_fingerprint(const Plan& plan) {
  Plan bare = plan;
  bare.prediction.reset();              // a re-priced plan trains the same way
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : plan_to_yaml(bare))
    h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

namespace {

template <typename T>
double measure_gemm(int64_t n, int repeats) {
  std::vector<T> a(size_t(n * n), T(0.5)), b(size_t(n * n), T(0.25)), c(size_t(n * n));
  matmul(a.data(), false, b.data(), false, c.data(), n, n, n, false);  // warm up
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i)
    matmul(a.data(), false, b.data(), false, c.data(), n, n, n, i > 0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * double(n * n * n) * repeats / std::max(s, 1e-9);
}

// fp64 tensors travel as pairs of fp32 bit patterns: the checkpoint holds floats, the resume
// must be exact in both precisions.
template <typename T>
std::vector<float> to_floats(const T* values, int64_t count) {
  std::vector<float> out(size_t(count) * sizeof(T) / sizeof(float));
  if (count) std::memcpy(out.data(), values, size_t(count) * sizeof(T));
  return out;
}

template <typename T>
void from_floats(const NamedTensor& tensor, T* values, int64_t count, const std::string& file) {
  if (tensor.values.size() * sizeof(float) != size_t(count) * sizeof(T))
    throw CheckpointError(file, CheckpointProblem::Malformed,
                          fmt::format("tensor '{}' holds {} values; this run needs {} of {} bytes", tensor.name,
                                      tensor.values.size() * sizeof(float) / sizeof(T), count, sizeof(T)));
  if (count) std::memcpy(values, tensor.values.data(), size_t(count) * sizeof(T));
}

const NamedTensor& find_tensor(const CheckpointState& state, const std::string& name, const std::string& file) {
  for (const NamedTensor& t : state.tensors)
    if (t.name == name) return t;
  throw CheckpointError(file, CheckpointProblem::Malformed, fmt::format("no tensor '{}'", name));
}

}  // namespace

double measure_peak_flops(bool fp64) {
  return fp64 ? measure_gemm<double>(256, 8) : measure_gemm<float>(256, 16);
}

template <typename T>
double measure_kernel_flops(runtime::Backend& backend, const runtime::StepKernelsFactory<T>& factory, int64_t n,
                            int repeats) {
  const std::unique_ptr<runtime::StepKernels<T>> kernels = factory(backend);
  BackendArray<T> a(backend), b(backend), c(backend);
  a.assign(n * n, T(0.5));
  b.assign(n * n, T(0.25));
  c.resize(n * n);
  kernels->gemm(a.data(), false, b.data(), false, c.data(), n, n, n, false);  // warm up
  backend.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i)
    kernels->gemm(a.data(), false, b.data(), false, c.data(), n, n, n, i > 0);
  backend.synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * double(n * n * n) * repeats / std::max(s, 1e-9);
}

template <typename T>
CheckpointState capture_state(Trainer<T>& trainer, int64_t steps_done, int rank, int world_size,
                              const std::string& plan_hash, uint64_t data_seed, const std::string& meta_json) {
  CheckpointState state;
  state.step = steps_done;
  state.rank = rank;
  state.world_size = world_size;
  state.plan_hash = plan_hash;
  const std::vector<T> params = trainer.parameters_to_host();
  state.tensors.push_back({"parameters", to_floats(params.data(), int64_t(params.size()))});
  const AdamState<T> adam = trainer.adam_to_host();
  state.tensors.push_back({"adam.m", to_floats(adam.m.data(), int64_t(adam.m.size()))});
  state.tensors.push_back({"adam.v", to_floats(adam.v.data(), int64_t(adam.v.size()))});
  // Nothing else is random: the data is a function of (seed, step, sample), the weights of the seed.
  state.rng_state = {uint64_t(adam.steps), uint64_t(trainer.shard_begin()), uint64_t(trainer.shard_end()),
                     uint64_t(sizeof(T))};
  state.data_state = to_data_state(DataPosition{data_seed, steps_done});
  state.meta_json = meta_json;
  return state;
}

template <typename T>
void restore_state(Trainer<T>& trainer, const CheckpointState& state, const std::string& file, uint64_t data_seed) {
  const DataPosition position = parse_data_state(state.data_state, file);
  if (position.seed != data_seed || position.next_step != state.step)
    throw CheckpointError(file, CheckpointProblem::PlanMismatch,
                          fmt::format("written by a run on data seed {} (next step {}); this run uses data seed {}",
                                      position.seed, position.next_step, data_seed));
  if (state.rng_state.size() != 4)
    throw CheckpointError(file, CheckpointProblem::Malformed, "the optimizer state has the wrong length");
  if (state.rng_state[3] != sizeof(T))
    throw CheckpointError(file, CheckpointProblem::Malformed,
                          fmt::format("written by an {} run; this run is {}", state.rng_state[3] == 8 ? "fp64" : "fp32",
                                      sizeof(T) == 8 ? "fp64" : "fp32"));
  if (int64_t(state.rng_state[1]) != trainer.shard_begin() || int64_t(state.rng_state[2]) != trainer.shard_end())
    throw CheckpointError(file, CheckpointProblem::Malformed, "the optimizer shard differs from this run's");
  std::vector<T> params(size_t(trainer.layout().size()));
  from_floats(find_tensor(state, "parameters", file), params.data(), int64_t(params.size()), file);
  AdamState<T> adam;
  const int64_t shard = trainer.shard_end() - trainer.shard_begin();
  adam.m.assign(size_t(shard), T(0));
  adam.v.assign(size_t(shard), T(0));
  adam.steps = int64_t(state.rng_state[0]);
  from_floats(find_tensor(state, "adam.m", file), adam.m.data(), adam.steps > 0 ? shard : 0, file);
  from_floats(find_tensor(state, "adam.v", file), adam.v.data(), adam.steps > 0 ? shard : 0, file);
  trainer.parameters_from_host(params);
  trainer.adam_from_host(adam);
}

std::optional<CheckpointState> read_resume_state(const std::string& dir, const Plan& plan, int rank, int world_size,
                                                 uint64_t data_seed) {
  const std::optional<int64_t> step = latest_checkpoint(dir);
  if (!step) return std::nullopt;
  const std::string file = checkpoint_file(dir, *step, rank);
  CheckpointState state = read_checkpoint(dir, *step, rank, world_size);
  check_resumable(state, file, plan_fingerprint(plan), world_size);
  const DataPosition position = parse_data_state(state.data_state, file);
  if (position.seed != data_seed)
    throw CheckpointError(
        file, CheckpointProblem::PlanMismatch,
        fmt::format("written by a run on data seed {}; this run uses data seed {}", position.seed, data_seed));
  return state;
}

namespace {

// The CPU GEMM's rate, or with the caller's kernels (a GPU's) theirs, on the backend's memory.
double measure_peak(runtime::Backend& backend, const RunSettings& settings, float) {
  return settings.trainer.kernels_f32 ? measure_kernel_flops<float>(backend, settings.trainer.kernels_f32, 2048, 20)
                                      : measure_peak_flops(false);
}
double measure_peak(runtime::Backend& backend, const RunSettings& settings, double) {
  return settings.trainer.kernels_f64 ? measure_kernel_flops<double>(backend, settings.trainer.kernels_f64, 2048, 10)
                                      : measure_peak_flops(true);
}

template <typename T>
RunReport run_typed(runtime::Backend& backend, const Plan& plan, const Schedule& attention, const BatchSource& batches,
                    const RunSettings& settings, const std::function<void(const StepRecord&)>& on_step) {
  const std::string hash = plan_fingerprint(plan);
  // Read before the trainer exists, so that a bad checkpoint stops every rank before any compute.
  std::optional<CheckpointState> resumed;
  if (settings.resume && !settings.checkpoint_dir.empty()) {
    if (settings.resume_states)
      resumed = settings.resume_states->at(size_t(backend.rank()));
    else
      resumed = read_resume_state(settings.checkpoint_dir, plan, backend.rank(), backend.size(), settings.data_seed);
  }
  if (!backend.all_ok(true)) throw InputError("another rank could not read its checkpoint");
  Trainer<T> trainer(plan, attention, backend, settings.trainer);
  RunReport report;
  if (resumed) {
    restore_state(trainer, *resumed, checkpoint_file(settings.checkpoint_dir, resumed->step, backend.rank()),
                  settings.data_seed);
    report.first_step = resumed->step;
  }
  report.peak_flops_per_rank = settings.peak_flops_per_rank > 0
                                   ? settings.peak_flops_per_rank
                                   : backend.max_over_ranks(measure_peak(backend, settings, T{}));
  report.model_flops_per_step = trainer.model_flops_per_step();
  const double peak = report.peak_flops_per_rank * backend.size();
  const std::string meta = fmt::format(R"({{"strategy":"{}","precision":"{}","data":"{}"}})", to_string(plan.strategy),
                                       settings.fp64 ? "fp64" : "fp32", settings.data_description);
  for (int64_t step = report.first_step; step < settings.steps; ++step) {
    const StepResult r = trainer.step(step, batches);
    report.losses.push_back(r.loss);
    report.accuracies.push_back(r.accuracy);
    report.seconds += r.seconds;
    StepRecord record;
    record.step = step + 1;
    record.steps_total = settings.steps;
    record.loss = r.loss;
    record.accuracy = r.accuracy;
    record.lr = r.lr;
    record.grad_norm = r.grad_norm;
    record.seconds = r.seconds;
    record.tokens_per_s = double(r.tokens) / std::max(r.seconds, 1e-12);
    record.mfu = report.model_flops_per_step / std::max(r.seconds, 1e-12) / peak;
    const int64_t done = int64_t(report.losses.size());
    record.seconds_left = report.seconds / double(done) * double(settings.steps - step - 1);
    report.tokens_per_s += record.tokens_per_s;
    report.mfu += record.mfu;
    const bool last = step + 1 == settings.steps;
    if (!settings.checkpoint_dir.empty() &&
        (last || (settings.checkpoint_every > 0 && (step + 1) % settings.checkpoint_every == 0))) {
      write_checkpoint(settings.checkpoint_dir, capture_state(trainer, step + 1, backend.rank(), backend.size(), hash,
                                                              settings.data_seed, meta));
      backend.barrier();
      if (backend.rank() == 0) commit_checkpoint(settings.checkpoint_dir, step + 1, backend.size());
      backend.barrier();
      ++report.checkpoints_written;
    }
    if (on_step) on_step(record);
  }
  if (!report.losses.empty()) {
    report.tokens_per_s /= double(report.losses.size());
    report.mfu /= double(report.losses.size());
  }
  return report;
}

}  // namespace

RunReport train_run(runtime::Backend& backend, const Plan& plan, const Schedule& attention, const BatchSource& batches,
                    const RunSettings& settings, const std::function<void(const StepRecord&)>& on_step) {
  return settings.fp64 ? run_typed<double>(backend, plan, attention, batches, settings, on_step)
                       : run_typed<float>(backend, plan, attention, batches, settings, on_step);
}

template CheckpointState capture_state<float>(Trainer<float>&, int64_t, int, int, const std::string&, uint64_t,
                                              const std::string&);
template CheckpointState capture_state<double>(Trainer<double>&, int64_t, int, int, const std::string&, uint64_t,
                                               const std::string&);
template void restore_state<float>(Trainer<float>&, const CheckpointState&, const std::string&, uint64_t);
template double measure_kernel_flops<float>(runtime::Backend&, const runtime::StepKernelsFactory<float>&, int64_t, int);
template double measure_kernel_flops<double>(runtime::Backend&, const runtime::StepKernelsFactory<double>&, int64_t,
                                             int);
template void restore_state<double>(Trainer<double>&, const CheckpointState&, const std::string&, uint64_t);

}  // namespace wallfacer::train
