// bench_cpu_calibration: measures what the cost model needs to price a training step on this
// CPU, one core standing for one "GPU" of a CPU topology (topologies/cpu-*.yaml): fp32 GEMM
// rates over a grid of shapes (OpenBLAS SGEMM, as the trainer's products), the project's CPU
// attention kernels on single blocks (forward and backward, full and causal-diagonal), and the
// single-core memory bandwidth (a STREAM-style triad beyond the last-level cache, and memcpy).
// Every figure is thread CPU time, the best of a few repetitions, so a machine shared with other
// jobs disturbs it little; nothing here runs a training step. Writes a calibration file
// (docs/calibration.md, "File format"); method and figures in docs/calibration.md ("A CPU").
#include <cblas.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <vector>

#include <wallfacer/runtime/attention_kernels.hpp>

namespace {

using wallfacer::kernels::AttnShape;

struct Options {
  std::string gpu = "EPYC-Zen4-core";
  std::string out;
  std::string date = "unknown date";
  std::vector<int64_t> sides = {16, 32, 64, 128, 256, 512, 1024, 2048};
  std::vector<int64_t> blocks = {64, 128, 256, 512, 1024, 2048};
  int heads = 4, kv_heads = 2, head_dim = 16;
  double batch_seconds = 0.01;  // CPU seconds one timed batch lasts at least
  int batches = 3;              // timed batches; the fastest counts
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// CPU seconds of one call of `work`: one untimed call, then `batches` batches of enough calls to
// last batch_seconds each; the fastest batch's mean.
double seconds_per_call(const Options& o, const std::function<void()>& work) {
  double t = thread_cpu_seconds();
  work();
  const double first = std::max(thread_cpu_seconds() - t, 1e-7);
  const int64_t calls = std::max<int64_t>(1, int64_t(std::ceil(o.batch_seconds / first)));
  double best = std::numeric_limits<double>::infinity();
  for (int b = 0; b < o.batches; ++b) {
    t = thread_cpu_seconds();
    for (int64_t i = 0; i < calls; ++i)
      work();
    best = std::min(best, (thread_cpu_seconds() - t) / double(calls));
  }
  return best;
}

std::vector<float> filled(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = scale * float(int((i * 2654435761u) % 2001) - 1000) / 1000.0f;
  return v;
}

// Row-major C[m x n] = A[m x k] B[k x n], 2mnk FLOPs.
double gemm_tflops(const Options& o, int64_t m, int64_t n, int64_t k) {
  const std::vector<float> a = filled(size_t(m * k), 1.0f), b = filled(size_t(k * n), 1.0f);
  std::vector<float> c(size_t(m * n));
  const double s = seconds_per_call(o, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasint(m), blasint(n), blasint(k), 1.0f, a.data(),
                blasint(k), b.data(), blasint(n), 0.0f, c.data(), blasint(n));
  });
  return 2.0 * double(m) * double(n) * double(k) / s / 1e12;
}

// One q = k = rows block of the attention kernels, forward or backward, full or causal diagonal;
// FLOPs by docs/algorithms.md §1.3 (4 q k h d forward, half on the diagonal, backward 2.5x).
double attention_tflops(const Options& o, int64_t rows, bool backward, bool causal) {
  const int64_t q_width = int64_t(o.heads) * o.head_dim, kv_width = int64_t(o.kv_heads) * o.head_dim;
  const std::vector<float> q = filled(size_t(rows * q_width), 0.5f), k = filled(size_t(rows * kv_width), 0.5f),
                           v = filled(size_t(rows * kv_width), 1.0f), dO = filled(size_t(rows * q_width), 1.0f);
  std::vector<float> acc(size_t(rows * q_width)), lse(size_t(rows * o.heads)), D(size_t(rows * o.heads));
  std::vector<float> dq(acc.size()), dk(k.size()), dv(v.size());
  AttnShape shape;
  shape.heads = o.heads;
  shape.kv_heads = o.kv_heads;
  shape.head_dim = o.head_dim;
  shape.group = o.heads / o.kv_heads;
  shape.causal = causal;
  const wallfacer::kernels::QueryBlock<float> qb{q.data(), nullptr, rows};
  const wallfacer::kernels::KeyBlock<float> kb{k.data(), v.data(), nullptr, rows};
  auto forward = [&] {
    wallfacer::kernels::reset_accumulator(acc.data(), lse.data(), rows, o.heads, o.head_dim, 0, 0);
    wallfacer::kernels::attention_forward(qb, kb, shape, acc.data(), lse.data(), 0, 0);
  };
  double s = 0;
  if (!backward) {
    s = seconds_per_call(o, forward);
  } else {
    forward();
    wallfacer::kernels::backward_prep(acc.data(), dO.data(), rows, o.heads, o.head_dim, 0, D.data(), 0);
    const wallfacer::kernels::BackwardInputs<float> in{dO.data(), lse.data(), D.data(), 0};
    s = seconds_per_call(
        o, [&] { wallfacer::kernels::attention_backward(qb, kb, in, shape, dq.data(), dk.data(), dv.data()); });
  }
  const double forward_flops = 4.0 * double(rows) * double(rows) * double(q_width) * (causal ? 0.5 : 1.0);
  return forward_flops * (backward ? 2.5 : 1.0) / s / 1e12;
}

// GB/s of a[i] = b[i] + 3 c[i] over three arrays of `bytes` each (12 bytes moved per element, as
// STREAM counts), and of memcpy (8 bytes per element: read and write).
std::pair<double, double> memory_GBps(const Options& o, size_t bytes) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> a(n, 0.0f), b = filled(n, 1.0f), c = filled(n, 2.0f);
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  const double triad = seconds_per_call(o, [&] {
    for (size_t i = 0; i < n; ++i)
      pa[i] = pb[i] + 3.0f * pc[i];
  });
  const double copy = seconds_per_call(o, [&] { std::memcpy(pa, pb, n * sizeof(float)); });
  return {12.0 * double(n) / triad / 1e9, 8.0 * double(n) / copy / 1e9};
}

std::string point_source(const Options& o, const std::string& what) {
  return fmt::format("[M] bench_cpu_calibration, {}, {}, thread CPU time, best of {}", o.date, what, o.batches);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Measures fp32 GEMM, attention-kernel and memory rates of one core; writes a calibration file");
  app.add_option("--gpu", o.gpu, "Device name prefix the calibration's entries apply to")->capture_default_str();
  app.add_option("--out", o.out, "Calibration file to write (default: stdout)");
  app.add_option("--date", o.date, "Date written into each entry's source")->capture_default_str();
  app.add_option("--sides", o.sides, "GEMM grid: every m, n and k from this list")->capture_default_str();
  app.add_option("--blocks", o.blocks, "Attention blocks: q = k tokens")->capture_default_str();
  app.add_option("--heads", o.heads, "Attention query heads")->capture_default_str();
  app.add_option("--kv-heads", o.kv_heads, "Attention K/V heads")->capture_default_str();
  app.add_option("--head-dim", o.head_dim, "Attention head dim")->capture_default_str();
  app.add_option("--batch-seconds", o.batch_seconds, "CPU seconds per timed batch")->capture_default_str();
  app.add_option("--batches", o.batches, "Timed batches per figure (the fastest counts)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.heads <= 0 || o.kv_heads <= 0 || o.heads % o.kv_heads != 0 || o.head_dim <= 0) {
    std::cerr << "bench_cpu_calibration: --heads must be a positive multiple of --kv-heads, --head-dim positive\n";
    return 2;
  }
  wallfacer::kernels::set_blas_threads(1);
  std::cerr << wallfacer::kernels::blas_description() << "\n";

  std::string yaml = fmt::format(
      "# fp32 rates of one core of this CPU, measured by bench_cpu_calibration (bench/cpu_calibration.cpp):\n"
      "# thread CPU time, best of {} batches of at least {} s each; OpenBLAS on one thread.\n"
      "# Format and use: docs/calibration.md (\"File format\", \"A CPU\").\n"
      "keep_defaults: true\npoints:\n",
      o.batches, o.batch_seconds);
  for (const bool causal : {false, true})
    for (const bool backward : {false, true})
      for (const int64_t rows : o.blocks) {
        const double tflops = attention_tflops(o, rows, backward, causal);
        fmt::print(stderr, "attention {} {} {}x{}: {:.2f} GFLOP/s\n", backward ? "backward" : "forward",
                   causal ? "causal" : "full", rows, rows, tflops * 1e3);
        yaml += fmt::format(
            "  - {{gpu: {}, op: {}, dtype: fp32, head_dim: {}, block_tokens: {}, causal: {}, tflops: {:.6g}, "
            "source: \"{}\"}}\n",
            o.gpu, backward ? "backward" : "forward", o.head_dim, rows, causal ? "true" : "false", tflops,
            point_source(o, fmt::format("runtime attention kernels, {} heads / {} K/V heads", o.heads, o.kv_heads)));
      }
  yaml += "gemm_shapes:\n";
  double best_gemm = 0;
  for (const int64_t m : o.sides)
    for (const int64_t n : o.sides)
      for (const int64_t k : o.sides) {
        const double tflops = gemm_tflops(o, m, n, k);
        best_gemm = std::max(best_gemm, tflops);
        yaml += fmt::format("  - {{gpu: {}, dtype: fp32, m: {}, n: {}, k: {}, tflops: {:.6g}, source: \"{}\"}}\n",
                            o.gpu, m, n, k, tflops, point_source(o, "cblas_sgemm row-major NN"));
      }
  const auto [triad, copy] = memory_GBps(o, size_t(256) << 20);
  const auto [triad_l2, copy_l2] = memory_GBps(o, size_t(256) << 10);
  yaml += fmt::format(
      "hbm:\n  - {{gpu: {}, efficiency: 1, source: \"the topology's hbm_GBps is this core's measured triad "
      "bandwidth (bench_cpu_calibration)\"}}\n",
      o.gpu);
  fmt::print(stderr,
             "best GEMM {:.1f} GFLOP/s\nmemory, 3 x 256 MiB: triad {:.2f} GB/s, memcpy {:.2f} GB/s\n"
             "memory, 3 x 256 KiB: triad {:.2f} GB/s, memcpy {:.2f} GB/s\n",
             best_gemm * 1e3, triad, copy, triad_l2, copy_l2);
  if (o.out.empty()) {
    std::cout << yaml;
  } else {
    std::ofstream file(o.out);
    file << yaml;
    if (!file) {
      std::cerr << o.out << ": error: cannot write the calibration file\n";
      return 2;
    }
  }
  return 0;
}
