// measure_train_memory (train_memory.hpp): every measured rank's trainer built on a measuring
// backend with kernels that do nothing, two steps run, the backend's peak read off.
#include <wallfacer/train/train_memory.hpp>

#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/runtime/measuring_backend.hpp>
#include <wallfacer/train/trainer.hpp>

namespace wallfacer::train {

namespace {

// Kernels that compute nothing and note the shapes the CUDA kernels' scratch depends on.
template <typename T>
class NoKernels final : public runtime::StepKernels<T> {
 public:
  explicit NoKernels(RankTrainMemory& out) : out_(out) {}
  std::string name() const override { return "none (measuring)"; }
  void gemm(const T*, bool, const T*, bool, T*, int64_t m, int64_t n, int64_t k, bool) override {
    out_.gemm_operands = std::max(out_.gemm_operands, m * k + k * n);
  }
  void embedding_forward(const T*, const T*, const int32_t*, const int64_t*, int64_t, T*, int64_t rows,
                         int64_t) override {
    out_.rows = std::max(out_.rows, rows);
  }
  void embedding_backward(const T*, const int32_t*, const int64_t*, int64_t, T*, T*, int64_t, int64_t) override {}
  void rms_norm_forward(const T*, const T*, T*, T*, int64_t, int64_t) override {}
  void rms_norm_backward(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t) override {}
  void rotary(T*, const int64_t*, int64_t, int64_t, int, int, double, bool) override {}
  void add(const T*, const T*, T*, int64_t) override {}
  void gelu_forward(const T*, T*, int64_t) override {}
  void gelu_backward(const T*, const T*, T*, int64_t) override {}
  void swiglu_forward(const T*, const T*, T*, int64_t) override {}
  void swiglu_backward(const T*, const T*, const T*, T*, T*, int64_t) override {}
  double cross_entropy(const T*, const int32_t*, const uint8_t*, double, T*, int64_t rows, int64_t,
                       int64_t& correct) override {
    out_.rows = std::max(out_.rows, rows);
    correct = 0;
    return 0;
  }
  double sum_squares(const T*, int64_t) override { return 0; }
  void adamw(const runtime::AdamWStep&, bool, T*, const T*, T*, T*, int64_t) override {}

 private:
  RankTrainMemory& out_;
};

// Every target counted: the batch's shape is all the measurement needs.
TrainingSample blank_sample(int64_t seq) {
  TrainingSample s;
  s.tokens.assign(size_t(seq + 1), 0);
  s.loss_mask.assign(size_t(seq), 1);
  return s;
}

template <typename T>
RankTrainMemory measure_rank(const Plan& plan, int rank, bool reduce_scatter, int64_t& parameters) {
  RankTrainMemory out;
  out.rank = rank;
  runtime::MeasuringBackend backend(rank, plan.num_ranks(), reduce_scatter);
  TrainerOptions options;
  options.initialise = false;
  options.total_steps = 2;
  auto factory = [&out](runtime::Backend&) { return std::make_unique<NoKernels<T>>(out); };
  if constexpr (std::is_same_v<T, float>)
    options.kernels_f32 = factory;
  else
    options.kernels_f64 = factory;
  {
    Trainer<T> trainer(plan, backend, options);
    parameters = trainer.layout().size();
    const int64_t seq = plan.workload.seq;
    const BatchSource batches = [seq](int64_t, int) { return blank_sample(seq); };
    // The second step finds the state the first left (moments, shards) as every later one does.
    trainer.step(0, batches);
    trainer.step(1, batches);
  }
  out.measured_peak = backend.peak_bytes();
  out.backend_peak = out.measured_peak + backend.in_flight_bytes();
  out.largest_reduction = backend.largest_reduction_bytes();
  return out;
}

}  // namespace

TrainMemory measure_train_memory(const Plan& plan, bool fp64, bool reduce_scatter, const std::vector<int>& ranks) {
  TrainMemory memory;
  memory.element_bytes = fp64 ? 8 : 4;
  std::vector<int> which = ranks;
  if (which.empty())
    for (int r = 0; r < plan.num_ranks(); ++r)
      which.push_back(r);
  std::sort(which.begin(), which.end());
  for (int r : which)
    memory.ranks.push_back(fp64 ? measure_rank<double>(plan, r, reduce_scatter, memory.parameters)
                                : measure_rank<float>(plan, r, reduce_scatter, memory.parameters));
  return memory;
}

int64_t cuda_kernel_scratch_bytes(const RankTrainMemory& rank, const TrainMemory& memory, bool bf16_gemm,
                                  bool measures_peak, bool local_transport) {
  constexpr int64_t kPeakGemm = 2048;
  int64_t bytes = kCublasLtWorkspaceBytes;
  if (bf16_gemm) bytes += 2 * rank.gemm_operands;
  // Cross-entropy: a double and an int per row; uploads: targets, mask, tokens and positions.
  bytes += rank.rows * (8 + 4) + rank.rows * (4 + 1 + 4 + 8);
  if (measures_peak) bytes += 3 * kPeakGemm * kPeakGemm * memory.element_bytes;
  if (local_transport) bytes += rank.largest_reduction;
  return bytes;
}

}  // namespace wallfacer::train
