// bench_cpu_calibration: measures what the cost model needs to price a training step on this
// CPU, one core standing for one "GPU" of a CPU topology (topologies/cpu-*.yaml): fp32 GEMM
// rates over a grid of shapes (OpenBLAS SGEMM, as the trainer's products), the project's CPU
// attention kernels on single blocks (forward and backward, full and causal-diagonal), and the
// single-core memory bandwidth (a STREAM-style triad beyond the last-level cache, and memcpy), and
// the trainer's memory-bound kernels (norms, rotary, residual adds, activations, the loss, the
// embedding, AdamW) each alone at the shapes of the gpt-tiny preset, as rates of the bytes the
// step program gives their ops.
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
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/attention_kernels.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/train/cpu_step_kernels.hpp>
#include <wallfacer/train/model.hpp>

namespace {

using wallfacer::kernels::AttnShape;

struct Options {
  std::string gpu = "EPYC-Zen4-core";
  std::string out;
  std::string date = "unknown date";
  std::vector<int64_t> sides = {16, 32, 64, 128, 256, 512, 1024, 2048};
  std::vector<int64_t> blocks = {64, 128, 256, 512, 1024, 2048};
  std::vector<int64_t> pointwise_rows = {512, 1024, 2048, 4096};  // tokens on the rank
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

using wallfacer::StepOp;
using PointwiseKey = std::pair<StepOp, bool>;  // label, backward pass (a recomputation is forward)

// The bytes the step program of gpt-tiny on one rank (`rows` tokens) gives its first op of each
// memory-bound kind and pass: the unit the measured rates are written in.
std::map<PointwiseKey, int64_t> program_bytes(const wallfacer::Workload& w) {
  using namespace wallfacer;
  Plan plan;
  plan.scope = Scope::Step;
  plan.topology_name = "cpu";
  plan.topology_nodes = 1;
  plan.workload = w;
  plan.strategy = StrategyKind::Ring;
  plan.params.sequence_parallel = 1;
  plan.ranks.push_back(RankSlot{0, 0, 0, 0, ""});
  plan.groups = make_groups(plan.strategy, plan.params, 1);
  TokenSetPool pool;
  const StepTemplate step = StepBuilder(plan).build_template(0, pool);
  std::map<PointwiseKey, int64_t> bytes;
  for (const Op& op : step.program.ops)
    if (op.kind == OpKind::Pointwise)
      bytes.emplace(PointwiseKey{op.label, op.phase == Phase::Backward && !(op.flags & kOpRecompute)}, op.bytes);
  return bytes;
}

// Host arrays of one rank's step at `rows` tokens, filled with small values.
struct StepArrays {
  std::vector<float> x, y, dy, dx, gain, rstd, q, dq, dk, g, u, h, dh, dg, du, logits, dlogits, table, params, grads, m,
      v;
  std::vector<int32_t> tokens, targets;
  std::vector<uint8_t> mask;
  std::vector<int64_t> positions;
  StepArrays(const wallfacer::train::ModelShape& s, int64_t rows, int64_t parameters) {
    const size_t r = size_t(rows), H = size_t(s.hidden), F = size_t(s.ffn), V = size_t(s.vocab);
    x = filled(r * H, 1.0f), y = filled(r * H, 0.5f), dy = filled(r * H, 0.5f), dx = filled(r * H, 0.1f);
    gain = filled(H, 1.0f), rstd = filled(r, 1.0f);
    q = filled(r * size_t(s.q_width()), 1.0f), dq = q, dk = filled(r * size_t(s.kv_width()), 1.0f);
    g = filled(r * F, 1.0f), u = filled(r * F, 0.7f), h = filled(r * F, 0.0f), dh = filled(r * F, 0.3f);
    dg = h, du = h, logits = filled(r * V, 2.0f), dlogits = filled(r * V, 0.0f), table = filled(V * H, 0.1f);
    params = filled(size_t(parameters), 0.1f), grads = filled(size_t(parameters), 0.01f);
    m = filled(size_t(parameters), 0.0f), v = filled(size_t(parameters), 0.0f);
    for (size_t i = 0; i < r; ++i) {
      tokens.push_back(int32_t((i * 2654435761u) % V));
      targets.push_back(int32_t((i * 40503u) % V));
      positions.push_back(int64_t(i));
    }
    mask.assign(r, 1);
  }
};

// What the trainer runs for one op of this kind and pass (runtime/train/trainer_ops.cpp), on the
// CPU step kernels; the embedding as under rotary positions (no position table).
std::function<void()> pointwise_work(PointwiseKey key, const wallfacer::train::ModelShape& s, int64_t rows,
                                     wallfacer::runtime::StepKernels<float>& k, StepArrays& a) {
  const int64_t H = s.hidden, F = rows * s.ffn, n = rows;
  const auto [op, backward] = key;
  switch (op) {
    case StepOp::Embedding:
      if (!backward)
        return [&, H, n] {
          k.embedding_forward(a.table.data(), nullptr, a.tokens.data(), a.positions.data(), n, a.x.data(), n, H);
        };
      return [&, H, n] {
        k.embedding_backward(a.dx.data(), a.tokens.data(), a.positions.data(), n, a.table.data(), nullptr, n, H);
      };
    case StepOp::Norm:
      if (!backward)
        return [&, H, n] { k.rms_norm_forward(a.x.data(), a.gain.data(), a.y.data(), a.rstd.data(), n, H); };
      return [&, H, n] {
        std::fill(a.dx.begin(), a.dx.end(), 0.0f);
        k.rms_norm_backward(a.x.data(), a.gain.data(), a.rstd.data(), a.dy.data(), a.dx.data(), a.y.data(), n, H);
      };
    case StepOp::Rope:  // forward: the Q op (the first); backward: dQ and dK
      if (!backward)
        return [&, n] { k.rotary(a.q.data(), a.positions.data(), n, n, s.heads, s.head_dim, s.rotary_base, false); };
      return [&, n] {
        k.rotary(a.dq.data(), a.positions.data(), n, n, s.heads, s.head_dim, s.rotary_base, true);
        k.rotary(a.dk.data(), a.positions.data(), n, n, s.kv_heads, s.head_dim, s.rotary_base, true);
      };
    case StepOp::Residual:
      if (!backward) return [&, H, n] { k.add(a.x.data(), a.dy.data(), a.y.data(), n * H); };
      return [&, H, n] { k.add(a.dx.data(), a.dy.data(), a.dx.data(), n * H); };
    case StepOp::Activation:
      if (!backward && s.gated_ffn) return [&, F] { k.swiglu_forward(a.g.data(), a.u.data(), a.h.data(), F); };
      if (!backward) return [&, F] { k.gelu_forward(a.u.data(), a.h.data(), F); };
      if (s.gated_ffn)
        return [&, F] { k.swiglu_backward(a.g.data(), a.u.data(), a.dh.data(), a.dg.data(), a.du.data(), F); };
      return [&, F] { k.gelu_backward(a.u.data(), a.dh.data(), a.du.data(), F); };
    case StepOp::Loss:
      return [&, n] {
        int64_t correct = 0;
        k.cross_entropy(a.logits.data(), a.targets.data(), a.mask.data(), 1.0 / double(n), a.dlogits.data(), n, s.vocab,
                        correct);
      };
    case StepOp::Optimizer:
      return [&] {
        const wallfacer::runtime::AdamWStep step{
            .lr = 1e-3,
            .grad_scale = 1.0 / std::sqrt(k.sum_squares(a.grads.data(), int64_t(a.grads.size())) + 1.0),
            .weight_decay = 0.1};
        k.adamw(step, true, a.params.data(), a.grads.data(), a.m.data(), a.v.data(), int64_t(a.params.size()));
      };
    default:
      return {};
  }
}

// `pointwise:` entries: every memory-bound op of gpt-tiny's step at each of the given row counts.
std::string pointwise_entries(const Options& o) {
  using namespace wallfacer;
  const std::unique_ptr<runtime::StepKernels<float>> kernels = train::make_cpu_step_kernels<float>();
  std::string yaml = "pointwise:\n";
  std::set<std::pair<PointwiseKey, int64_t>> measured;  // the optimizer's bytes do not change with rows
  for (const int64_t rows : o.pointwise_rows) {
    Workload w = load_workload("gpt-tiny");
    w.seq = rows;
    w.batch = 1;
    w.dtype = DType::FP32;
    const train::ModelShape shape = train::model_shape(w, train::Positions::Rotary);
    StepArrays arrays(shape, rows, train::ParameterLayout(shape).size());
    for (const auto& [key, bytes] : program_bytes(w)) {
      const std::function<void()> work = pointwise_work(key, shape, rows, *kernels, arrays);
      if (!work || !measured.insert({key, bytes}).second) continue;
      const double GBps = double(bytes) / seconds_per_call(o, work) / 1e9;
      fmt::print(stderr, "{} {} at {} rows ({} bytes): {:.2f} GB/s\n", to_string(key.first),
                 key.second ? "backward" : "forward", rows, bytes, GBps);
      yaml += fmt::format("  - {{gpu: {}, dtype: fp32, op: {}, pass: {}, bytes: {}, GBps: {:.6g}, source: \"{}\"}}\n",
                          o.gpu, to_string(key.first), key.second ? "backward" : "forward", bytes, GBps,
                          point_source(o, fmt::format("trainer CPU kernel alone, gpt-tiny shapes at {} rows", rows)));
    }
  }
  return yaml;
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
  app.add_option("--pointwise-rows", o.pointwise_rows, "Memory-bound ops: rows (tokens) of the rank")
      ->capture_default_str();
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
      "keep_defaults: true\n"
      "# The GPUs' slowdown of compute beside communication kernels does not apply to a CPU rank, and\n"
      "# none was measured here.\n"
      "compute_slowdown_under_comm: 1\npoints:\n",
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
  yaml += pointwise_entries(o);
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
