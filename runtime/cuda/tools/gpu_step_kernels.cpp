// wallfacer_gpu_step_kernels: the whole-step program's GPU kernels (make_cuda_step_kernels)
// checked op by op against the CPU kernels (make_cpu_step_kernels, the trainer's layers) on the
// same seeded inputs: GEMMs in every transpose combination (fp32, and bf16 inputs with fp32
// accumulation), RMS norm, rotary, add, GELU, SwiGLU, embedding, cross-entropy, the sum of
// squares and AdamW; then 20 steps of the gpt-tiny decoder trained with them beside the same steps
// on the CPU (gpu_train_steps.cpp). Prints one JSON object; scripts/gpu-check runs it. Exit status 2 when no GPU
// is usable, 1 when an error exceeds its tolerance.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

#include <wallfacer/runtime/cuda/cuda_backend.hpp>
#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/train/cpu_step_kernels.hpp>
#include "gpu_train_steps.hpp"

namespace {

using namespace wallfacer::runtime;
using Vec = std::vector<float>;

struct Checker {
  Backend& backend;
  StepKernels<float>& gpu;
  StepKernels<float>& cpu;
  nlohmann::json cases = nlohmann::json::array();
  bool ok = true;
  std::mt19937_64 rng{7};

  Vec random(size_t n, double scale = 1) {
    std::normal_distribution<double> normal(0, scale);
    Vec v(n);
    for (float& x : v)
      x = float(normal(rng));
    return v;
  }
  float* device(const Vec& host) {
    auto* p = static_cast<float*>(backend.allocate(std::max<size_t>(host.size(), 1) * sizeof(float)));
    backend.upload(p, host.data(), host.size() * sizeof(float));
    return p;
  }
  Vec host(const float* p, size_t n) {
    Vec v(n);
    backend.download(v.data(), p, n * sizeof(float));
    return v;
  }
  // max|gpu - cpu| / max|cpu| of one output, recorded with its tolerance.
  void compare(const std::string& name, const Vec& cpu_out, const Vec& gpu_out, double tolerance) {
    double diff = 0, ref = 0;
    bool finite = true;
    for (size_t i = 0; i < cpu_out.size(); ++i) {
      finite = finite && std::isfinite(gpu_out[i]);
      diff = std::max(diff, std::fabs(double(gpu_out[i]) - double(cpu_out[i])));
      ref = std::max(ref, std::fabs(double(cpu_out[i])));
    }
    const double relative = ref > 0 ? diff / ref : diff;
    const bool pass = finite && relative <= tolerance;
    ok = ok && pass;
    cases.push_back({{"case", name}, {"relative", relative}, {"tolerance", tolerance}, {"ok", pass}});
  }
  void compare_scalar(const std::string& name, double cpu_value, double gpu_value, double tolerance) {
    const double relative = std::fabs(gpu_value - cpu_value) / std::max(std::fabs(cpu_value), 1e-30);
    const bool pass = std::isfinite(gpu_value) && relative <= tolerance;
    ok = ok && pass;
    cases.push_back({{"case", name}, {"relative", relative}, {"tolerance", tolerance}, {"ok", pass}});
  }
};

// C (+)= op(A) op(B) for every transpose pair, against the CPU's, with `kernels` on the GPU.
void check_gemms(Checker& c, StepKernels<float>& kernels, const std::string& label, double tolerance) {
  const int64_t m = 67, n = 45, k = 129;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const Vec a = c.random(size_t(m * k)), b = c.random(size_t(k * n)), c0 = c.random(size_t(m * n));
    Vec cpu_c = c0;
    c.cpu.gemm(a.data(), ta, b.data(), tb, cpu_c.data(), m, n, k, true);
    float *da = c.device(a), *db = c.device(b), *dc = c.device(c0);
    kernels.gemm(da, ta, db, tb, dc, m, n, k, true);
    c.compare(label + (ta ? " A^T" : " A") + (tb ? " B^T" : " B") + " accumulate", cpu_c, c.host(dc, cpu_c.size()),
              tolerance);
    for (float* p : {da, db, dc})
      c.backend.release(p);
  }
}

void check_pointwise(Checker& c) {
  const double tol = 1e-5;
  const int64_t rows = 37, width = 320;
  const size_t count = size_t(rows * width);
  {  // RMS norm forward and backward (dx and dgain accumulate)
    const Vec x = c.random(count), gain = c.random(size_t(width)), dy = c.random(count), dx0 = c.random(count),
              dg0 = c.random(size_t(width));
    Vec y(count), rstd(static_cast<size_t>(rows)), dx = dx0, dg = dg0;
    c.cpu.rms_norm_forward(x.data(), gain.data(), y.data(), rstd.data(), rows, width);
    c.cpu.rms_norm_backward(x.data(), gain.data(), rstd.data(), dy.data(), dx.data(), dg.data(), rows, width);
    float *dX = c.device(x), *dG = c.device(gain), *dY = c.device(y), *dR = c.device(rstd), *dDy = c.device(dy),
          *dDx = c.device(dx0), *dDg = c.device(dg0);
    c.gpu.rms_norm_forward(dX, dG, dY, dR, rows, width);
    c.compare("rms_norm_forward y", y, c.host(dY, count), tol);
    c.compare("rms_norm_forward rstd", rstd, c.host(dR, size_t(rows)), tol);
    c.gpu.rms_norm_backward(dX, dG, dR, dDy, dDx, dDg, rows, width);
    c.compare("rms_norm_backward dx", dx, c.host(dDx, count), tol);
    c.compare("rms_norm_backward dgain", dg, c.host(dDg, size_t(width)), tol);
    for (float* p : {dX, dG, dY, dR, dDy, dDx, dDg})
      c.backend.release(p);
  }
  for (const double base :
       {10000.0, 1e6}) {  // rotary over two sequences of 20 unsorted positions, forward then inverse
    const int heads = 4, head_dim = 64;
    const int64_t per_batch = 20, r = 40;
    std::vector<int64_t> positions(static_cast<size_t>(per_batch));
    for (int64_t i = 0; i < per_batch; ++i)
      positions[size_t(i)] = (i * 7919) % 4096;
    const Vec x = c.random(size_t(r * heads * head_dim));
    Vec cpu_x = x;
    c.cpu.rotary(cpu_x.data(), positions.data(), per_batch, r, heads, head_dim, base, false);
    float* dx = c.device(x);
    c.gpu.rotary(dx, positions.data(), per_batch, r, heads, head_dim, base, false);
    c.compare("rotary", cpu_x, c.host(dx, x.size()), tol);
    c.gpu.rotary(dx, positions.data(), per_batch, r, heads, head_dim, base, true);
    c.compare("rotary inverse", x, c.host(dx, x.size()), tol);
    c.backend.release(dx);
  }
  {  // add, GELU, SwiGLU
    const Vec a = c.random(count, 2), b = c.random(count, 2), dh = c.random(count);
    Vec sum(count), h(count), du(count), dg(count), du2(count), h2(count);
    c.cpu.add(a.data(), b.data(), sum.data(), int64_t(count));
    c.cpu.gelu_forward(a.data(), h.data(), int64_t(count));
    c.cpu.gelu_backward(a.data(), dh.data(), du.data(), int64_t(count));
    c.cpu.swiglu_forward(a.data(), b.data(), h2.data(), int64_t(count));
    c.cpu.swiglu_backward(a.data(), b.data(), dh.data(), dg.data(), du2.data(), int64_t(count));
    float *dA = c.device(a), *dB = c.device(b), *dDh = c.device(dh), *out = c.device(Vec(count)),
          *out2 = c.device(Vec(count));
    c.gpu.add(dA, dB, out, int64_t(count));
    c.compare("add", sum, c.host(out, count), tol);
    c.gpu.gelu_forward(dA, out, int64_t(count));
    c.compare("gelu_forward", h, c.host(out, count), tol);
    c.gpu.gelu_backward(dA, dDh, out, int64_t(count));
    c.compare("gelu_backward", du, c.host(out, count), tol);
    c.gpu.swiglu_forward(dA, dB, out, int64_t(count));
    c.compare("swiglu_forward", h2, c.host(out, count), tol);
    c.gpu.swiglu_backward(dA, dB, dDh, out, out2, int64_t(count));
    c.compare("swiglu_backward dg", dg, c.host(out, count), tol);
    c.compare("swiglu_backward du", du2, c.host(out2, count), tol);
    for (float* p : {dA, dB, dDh, out, out2})
      c.backend.release(p);
  }
}

void check_embedding_and_loss(Checker& c) {
  const double tol = 1e-5;
  const int64_t rows = 37, per_batch = 19, vocab = 300, width = 64;
  std::vector<int32_t> tokens(static_cast<size_t>(rows)), targets(static_cast<size_t>(rows));
  std::vector<uint8_t> mask(static_cast<size_t>(rows));
  std::vector<int64_t> positions(static_cast<size_t>(per_batch));
  for (int64_t r = 0; r < rows; ++r) {
    tokens[size_t(r)] = int32_t((r * 37) % 11);  // repeated tokens: the backward's sums collide
    targets[size_t(r)] = int32_t((r * 101) % vocab);
    mask[size_t(r)] = r % 3 != 0;
  }
  for (int64_t i = 0; i < per_batch; ++i)
    positions[size_t(i)] = 3 * i;
  const Vec table = c.random(size_t(vocab * width)), pos = c.random(size_t(64 * width)),
            dx = c.random(size_t(rows * width));
  Vec x(static_cast<size_t>(rows * width)), dtable(table.size(), 0.f), dpos(pos.size(), 0.f);
  c.cpu.embedding_forward(table.data(), pos.data(), tokens.data(), positions.data(), per_batch, x.data(), rows, width);
  c.cpu.embedding_backward(dx.data(), tokens.data(), positions.data(), per_batch, dtable.data(), dpos.data(), rows,
                           width);
  float *dT = c.device(table), *dP = c.device(pos), *dX = c.device(Vec(x.size())), *dDx = c.device(dx),
        *dDt = c.device(Vec(table.size(), 0.f)), *dDp = c.device(Vec(pos.size(), 0.f));
  c.gpu.embedding_forward(dT, dP, tokens.data(), positions.data(), per_batch, dX, rows, width);
  c.compare("embedding_forward", x, c.host(dX, x.size()), tol);
  c.gpu.embedding_backward(dDx, tokens.data(), positions.data(), per_batch, dDt, dDp, rows, width);
  c.compare("embedding_backward table", dtable, c.host(dDt, dtable.size()), tol);
  c.compare("embedding_backward positions", dpos, c.host(dDp, dpos.size()), tol);

  const Vec logits = c.random(size_t(rows * vocab), 3);
  Vec dlogits(logits.size());
  int64_t cpu_correct = 0, gpu_correct = 0;
  const double cpu_loss =
      c.cpu.cross_entropy(logits.data(), targets.data(), mask.data(), 0.01, dlogits.data(), rows, vocab, cpu_correct);
  float *dL = c.device(logits), *dDl = c.device(Vec(logits.size()));
  const double gpu_loss = c.gpu.cross_entropy(dL, targets.data(), mask.data(), 0.01, dDl, rows, vocab, gpu_correct);
  c.compare_scalar("cross_entropy loss", cpu_loss, gpu_loss, tol);
  c.compare_scalar("cross_entropy correct", double(cpu_correct) + 1, double(gpu_correct) + 1, 0);
  c.compare("cross_entropy dlogits", dlogits, c.host(dDl, dlogits.size()), tol);
  c.compare_scalar("sum_squares", c.cpu.sum_squares(logits.data(), int64_t(logits.size())),
                   c.gpu.sum_squares(dL, int64_t(logits.size())), tol);
  for (float* p : {dT, dP, dX, dDx, dDt, dDp, dL, dDl})
    c.backend.release(p);
}

void check_adamw(Checker& c) {
  const size_t n = 10000;
  Vec params = c.random(n), grads = c.random(n), m(n, 0.f), v(n, 0.f);
  float *dp = c.device(params), *dg = c.device(grads), *dm = c.device(m), *dv = c.device(v);
  AdamWStep s;
  s.lr = 3e-3;
  s.grad_scale = 0.5;
  s.weight_decay = 0.1;
  for (int64_t step = 1; step <= 3; ++step) {  // three updates: the moments and bias corrections matter
    s.count = step;
    c.cpu.adamw(s, true, params.data(), grads.data(), m.data(), v.data(), int64_t(n));
    c.gpu.adamw(s, true, dp, dg, dm, dv, int64_t(n));
  }
  c.compare("adamw params", params, c.host(dp, n), 1e-6);
  c.compare("adamw m", m, c.host(dm, n), 1e-6);
  c.compare("adamw v", v, c.host(dv, n), 1e-6);
  for (float* p : {dp, dg, dm, dv})
    c.backend.release(p);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Check the GPU kernels of the whole training step against the CPU ones");
  double bf16_tolerance = 2e-2, fp32_gemm_tolerance = 1e-4;
  app.add_option("--bf16-tolerance", bf16_tolerance, "Largest relative error of the bf16-input GEMMs")
      ->capture_default_str();
  app.add_option("--fp32-gemm-tolerance", fp32_gemm_tolerance, "Largest relative error of the fp32 GEMMs")
      ->capture_default_str();
  int64_t train_steps = 20;
  double train_fp32_tolerance = 1e-3, train_bf16_tolerance = 2e-2;
  app.add_option("--train-steps", train_steps, "Steps of the gpt-tiny training comparison (0: none)")
      ->capture_default_str();
  app.add_option("--train-fp32-tolerance", train_fp32_tolerance,
                 "Largest relative loss difference of a step, fp32 GEMMs")
      ->capture_default_str();
  app.add_option("--train-bf16-tolerance", train_bf16_tolerance,
                 "Largest relative loss difference of a step, bf16-input GEMMs")
      ->capture_default_str();
  bool self_check = false;
  app.add_flag("--self-check-staging", self_check,
               "No GPU: train through the staging adapter with the CPU kernels on host memory; the losses must equal "
               "the CPU run's exactly");
  CLI11_PARSE(app, argc, argv);
  if (self_check) {
    bool staged_ok = true;
    run_local_ranks(1, [&](Backend& host) {
      const auto training = wallfacer::gpu_check::check_training(
          host, [](bool) { return wallfacer::train::make_cpu_step_kernels<float>(); }, train_steps, 0, 0, staged_ok);
      std::cout << training.dump() << "\n";
    });
    return staged_ok ? 0 : 1;
  }
  const CudaDeviceInfo info = cuda_device_info(0);
  if (!info.available) {
    std::fprintf(stderr, "error: no usable CUDA device here: %s\n", info.description.c_str());
    return 2;
  }
  bool ok = false;
  try {
    run_cuda_local_ranks(1, [&](Backend& backend) {
      auto gpu = make_cuda_step_kernels<float>(backend);
      auto gpu_bf16 = make_cuda_step_kernels<float>(backend, {true});
      auto cpu = wallfacer::train::make_cpu_step_kernels<float>();
      Checker c{backend, *gpu, *cpu};
      check_gemms(c, *gpu, "gemm fp32", fp32_gemm_tolerance);
      check_gemms(c, *gpu_bf16, "gemm bf16 inputs", bf16_tolerance);
      check_pointwise(c);
      check_embedding_and_loss(c);
      check_adamw(c);
      backend.synchronize();
      nlohmann::json training = nullptr;
      if (train_steps > 0)
        training = wallfacer::gpu_check::check_training(
            backend, [&backend](bool bf16) { return make_cuda_step_kernels<float>(backend, {bf16}); }, train_steps,
            train_fp32_tolerance, train_bf16_tolerance, c.ok);
      ok = c.ok;
      std::cout << nlohmann::json{{"device", info.description},
                                  {"cases", c.cases},
                                  {"training", training},
                                  {"ok", c.ok}}
                       .dump()
                << "\n";
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return ok ? 0 : 1;
}
