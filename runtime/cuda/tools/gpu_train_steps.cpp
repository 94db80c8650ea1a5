// The training half of wallfacer_gpu_step_kernels: 20 steps of the gpt-tiny decoder with the
// whole-step kernels on the GPU beside the same 20 steps with the CPU kernels, losses compared
// step by step. The trainer runs on the (one-rank) CPU backend with host tensors, and the GPU
// kernels behind a staging adapter: each call uploads its inputs, runs on the GPU and downloads
// its outputs. What this isolates is the GEMMs, the pointwise kernels and AdamW inside a real
// training run, apart from the device-resident path (device tensors, bindings, collectives) that
// `wallfacer train --backend cuda` adds, which scripts/gpu-check runs beside it.
#include "gpu_train_steps.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <vector>

#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include <wallfacer/train/cpu_step_kernels.hpp>
#include <wallfacer/train/source.hpp>
#include <wallfacer/train/trainer.hpp>

namespace wallfacer::gpu_check {
namespace {

using runtime::Backend;
using runtime::StepKernels;

// Host-pointer StepKernels over device kernels: every call stages its tensors through `gpu`.
class StagedKernels final : public StepKernels<float> {
 public:
  StagedKernels(Backend& gpu, std::unique_ptr<StepKernels<float>> device) : gpu_(gpu), k_(std::move(device)) {}
  std::string name() const override { return k_->name() + ", staged from host memory"; }

  void gemm(const float* a, bool ta, const float* b, bool tb, float* c, int64_t m, int64_t n, int64_t k,
            bool accumulate) override {
    Call s(gpu_);
    k_->gemm(s.in(a, m * k), ta, s.in(b, k * n), tb, accumulate ? s.inout(c, m * n) : s.out(c, m * n), m, n, k,
             accumulate);
  }
  void embedding_forward(const float* table, const float* pos, const int32_t* tokens, const int64_t* positions,
                         int64_t per_batch, float* x, int64_t rows, int64_t width) override {
    Call s(gpu_);
    int32_t top = 0;
    for (int64_t r = 0; r < rows; ++r)
      top = std::max(top, tokens[r]);
    int64_t top_pos = 0;
    for (int64_t r = 0; pos && r < per_batch; ++r)
      top_pos = std::max(top_pos, positions[r]);
    k_->embedding_forward(s.in(table, (top + 1) * width), pos ? s.in(pos, (top_pos + 1) * width) : nullptr, tokens,
                          positions, per_batch, s.out(x, rows * width), rows, width);
  }
  void embedding_backward(const float* dx, const int32_t* tokens, const int64_t* positions, int64_t per_batch,
                          float* dtable, float* dpos, int64_t rows, int64_t width) override {
    Call s(gpu_);
    int32_t top = 0;
    for (int64_t r = 0; r < rows; ++r)
      top = std::max(top, tokens[r]);
    int64_t top_pos = 0;
    for (int64_t r = 0; dpos && r < per_batch; ++r)
      top_pos = std::max(top_pos, positions[r]);
    k_->embedding_backward(s.in(dx, rows * width), tokens, positions, per_batch, s.inout(dtable, (top + 1) * width),
                           dpos ? s.inout(dpos, (top_pos + 1) * width) : nullptr, rows, width);
  }
  void rms_norm_forward(const float* x, const float* gain, float* y, float* rstd, int64_t rows,
                        int64_t width) override {
    Call s(gpu_);
    k_->rms_norm_forward(s.in(x, rows * width), s.in(gain, width), s.out(y, rows * width), s.out(rstd, rows), rows,
                         width);
  }
  void rms_norm_backward(const float* x, const float* gain, const float* rstd, const float* dy, float* dx, float* dgain,
                         int64_t rows, int64_t width) override {
    Call s(gpu_);
    k_->rms_norm_backward(s.in(x, rows * width), s.in(gain, width), s.in(rstd, rows), s.in(dy, rows * width),
                          s.inout(dx, rows * width), s.inout(dgain, width), rows, width);
  }
  void rotary(float* x, const int64_t* positions, int64_t per_batch, int64_t rows, int heads, int head_dim, double base,
              bool inverse) override {
    Call s(gpu_);
    k_->rotary(s.inout(x, rows * heads * head_dim), positions, per_batch, rows, heads, head_dim, base, inverse);
  }
  void add(const float* a, const float* b, float* out, int64_t count) override {
    Call s(gpu_);
    k_->add(s.in(a, count), s.in(b, count), s.out(out, count), count);
  }
  void gelu_forward(const float* u, float* h, int64_t count) override {
    Call s(gpu_);
    k_->gelu_forward(s.in(u, count), s.out(h, count), count);
  }
  void gelu_backward(const float* u, const float* dh, float* du, int64_t count) override {
    Call s(gpu_);
    k_->gelu_backward(s.in(u, count), s.in(dh, count), s.out(du, count), count);
  }
  void swiglu_forward(const float* g, const float* u, float* h, int64_t count) override {
    Call s(gpu_);
    k_->swiglu_forward(s.in(g, count), s.in(u, count), s.out(h, count), count);
  }
  void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t count) override {
    Call s(gpu_);
    k_->swiglu_backward(s.in(g, count), s.in(u, count), s.in(dh, count), s.out(dg, count), s.out(du, count), count);
  }
  double cross_entropy(const float* logits, const int32_t* targets, const uint8_t* mask, double scale, float* dlogits,
                       int64_t rows, int64_t vocab, int64_t& correct) override {
    Call s(gpu_);
    return k_->cross_entropy(s.in(logits, rows * vocab), targets, mask, scale, s.out(dlogits, rows * vocab), rows,
                             vocab, correct);
  }
  double sum_squares(const float* x, int64_t count) override {
    Call s(gpu_);
    return k_->sum_squares(s.in(x, count), count);
  }
  void adamw(const runtime::AdamWStep& step, bool decay, float* params, const float* grads, float* m, float* v,
             int64_t count) override {
    Call s(gpu_);
    k_->adamw(step, decay, s.inout(params, count), s.in(grads, count), s.inout(m, count), s.inout(v, count), count);
  }

 private:
  // The device copies of one call's tensors; outputs are downloaded when the call ends.
  class Call {
   public:
    explicit Call(Backend& gpu) : gpu_(gpu) {}
    ~Call() noexcept(false) {
      if (std::uncaught_exceptions() > 0) return;  // unwinding: the device blocks are abandoned
      for (auto& [host, dev, n] : back_)
        gpu_.download(host, dev, size_t(n) * sizeof(float));
      for (void* p : blocks_)
        gpu_.release(p);
    }
    float* in(const float* host, int64_t n) {
      float* d = alloc(n);
      gpu_.upload(d, host, size_t(n) * sizeof(float));
      return d;
    }
    float* inout(float* host, int64_t n) {
      float* d = in(host, n);
      back_.push_back({host, d, n});
      return d;
    }
    float* out(float* host, int64_t n) {
      float* d = alloc(n);
      back_.push_back({host, d, n});
      return d;
    }

   private:
    float* alloc(int64_t n) {
      void* p = gpu_.allocate(std::max<size_t>(size_t(n), 1) * sizeof(float));
      blocks_.push_back(p);
      return static_cast<float*>(p);
    }
    struct Back {
      float* host;
      float* dev;
      int64_t n;
    };
    Backend& gpu_;
    std::vector<Back> back_;
    std::vector<void*> blocks_;
  };

  Backend& gpu_;
  std::unique_ptr<StepKernels<float>> k_;
};

Plan tiny_plan() {
  Workload w = load_workload("gpt-tiny", {});
  w.seq = 256;
  w.batch = 4;
  w.dtype = DType::FP32;
  StrategyParams params;
  params.sequence_parallel = 1;
  return make_plan(StrategyKind::Ring, params, w, Topology::load("dgx-h100", 1), 1);
}

std::vector<double> train_losses(const Plan& plan, int64_t steps, const runtime::StepKernelsFactory<float>& kernels) {
  train::RecallTaskSpec spec;
  spec.seq_len = plan.workload.seq;
  spec.pairs = 1;
  spec.key_len = 1;
  spec.value_len = 1;
  spec.min_distance = plan.workload.seq / 2;
  const train::TrainingSource source = train::TrainingSource::recall(spec);
  std::vector<double> losses;
  runtime::run_local_ranks(1, [&](Backend& backend) {
    train::TrainerOptions options;
    options.total_steps = steps;
    options.kernels_f32 = kernels;
    train::Trainer<float> trainer(plan, backend, options);
    const train::BatchSource batch = [&](int64_t step, int sample) { return source.sample(1, step, sample); };
    for (int64_t s = 0; s < steps; ++s)
      losses.push_back(trainer.step(s, batch).loss);
  });
  return losses;
}

}  // namespace

nlohmann::json check_training(Backend& device, const DeviceKernels& make, int64_t steps, double fp32_tolerance,
                              double bf16_tolerance, bool& ok) {
  const Plan plan = tiny_plan();
  const std::vector<double> cpu = train_losses(plan, steps, {});
  nlohmann::json result{
      {"model", "gpt-tiny, seq 256, batch 4, 1 rank, recall task"}, {"steps", steps}, {"cpu_losses", cpu}};
  for (const bool bf16 : {false, true}) {
    const std::vector<double> losses = train_losses(
        plan, steps, [&device, &make, bf16](Backend&) { return std::make_unique<StagedKernels>(device, make(bf16)); });
    double worst = 0;
    for (size_t i = 0; i < losses.size(); ++i)
      worst = std::max(worst, std::isfinite(losses[i]) ? std::fabs(losses[i] - cpu[i]) / std::fabs(cpu[i]) : 1e300);
    const double tolerance = bf16 ? bf16_tolerance : fp32_tolerance;
    const bool pass = worst <= tolerance;
    ok = ok && pass;
    result[bf16 ? "gpu_bf16_gemm" : "gpu_fp32"] = {
        {"losses", losses}, {"max_relative_loss_difference", worst}, {"tolerance", tolerance}, {"ok", pass}};
  }
  return result;
}

}  // namespace wallfacer::gpu_check
