// bench_runtime: parallel efficiency of the executor on this machine. One attention layer
// (forward + backward, fp32) runs on 1 rank and on 2 ranks of a ring, side by side in one
// process with the local (threads) backend; efficiency = T1 / (2 * T2), T = the slowest rank's
// program time. Runs alternate (1, 2, 1, 2, ...) so that both see the same machine load, and the
// median of each counts. Rows: ring with a full mask (balanced work), ring causal (contiguous
// shards: rank 1 does 3/4 of the work, so at most 2/3), zigzag causal (balanced). The CPU
// columns repeat the figure with each rank thread's CPU time, which a busy machine barely
// disturbs: it isolates the schedule's own overheads (imbalance, packing) from core contention.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <wallfacer/runtime/layer_runner.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>

namespace {

using namespace wallfacer;

struct Options {
  int64_t seq = 2048;
  int heads = 4, head_dim = 64;
  int rounds = 3;
};

Workload workload_of(const Options& o, bool causal) {
  Workload w;
  w.model = "bench";
  w.layers = 1;
  w.heads = o.heads;
  w.kv_heads = o.heads;
  w.head_dim = o.head_dim;
  w.hidden = int64_t(o.heads) * o.head_dim;
  w.ffn = 4 * w.hidden;
  w.vocab = 128;
  w.seq = o.seq;
  w.batch = 1;
  w.dtype = DType::FP32;
  w.causal = causal;
  return w;
}

struct Setup {
  Plan plan;
  Schedule schedule;
};

Setup setup(StrategyKind kind, const Workload& w, int ranks, const Topology& topology) {
  StrategyParams params{.sequence_parallel = ranks, .knobs = default_knobs(kind)};
  Setup s{make_plan(kind, params, w, topology, ranks), {}};
  s.schedule = build_schedule(s.plan);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  std::string name;
  double t1 = 0, t2 = 0, wait2 = 0, gflop = 0;
  double cpu1 = 0, cpu2 = 0;  // CPU time of the (slowest) rank thread
};

Row measure(const std::string& name, StrategyKind kind, bool causal, const Options& o, const Topology& topology) {
  const Workload w = workload_of(o, causal);
  const Setup one = setup(kind, w, 1, topology), two = setup(kind, w, 2, topology);
  const runtime::LayerInputs inputs = runtime::seeded_inputs(w, 1, false);
  runtime::LayerRunOptions options;
  runtime::run_layer_local(one.plan, one.schedule, inputs, options);  // warm-up: page in, size OpenBLAS buffers
  std::vector<double> t1, t2, wait2, cpu1, cpu2;
  Row row{name};
  for (int round = 0; round < o.rounds; ++round) {
    auto r1 = runtime::run_layer_local(one.plan, one.schedule, inputs, options);
    auto r2 = runtime::run_layer_local(two.plan, two.schedule, inputs, options);
    t1.push_back(r1.seconds);
    t2.push_back(r2.seconds);
    wait2.push_back(r2.wait_seconds);
    cpu1.push_back(r1.cpu_seconds);
    cpu2.push_back(r2.cpu_seconds);
    row.gflop = r1.flops * 1e-9;
  }
  row.t1 = median(t1), row.t2 = median(t2), row.wait2 = median(wait2);
  row.cpu1 = median(cpu1), row.cpu2 = median(cpu2);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Parallel efficiency of one attention layer: 2-rank ring against 1 rank (local threads backend)"};
  Options o;
  app.add_option("--seq", o.seq, "Sequence length");
  app.add_option("--heads", o.heads, "Heads (MHA)");
  app.add_option("--head-dim", o.head_dim, "Head dimension");
  app.add_option("--rounds", o.rounds, "Measured rounds (median counts)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  const Topology topology = Topology::load("dgx-h100");
  std::printf(
      "one layer fwd+bwd, fp32, seq %lld, heads %d, head_dim %d, batch 1; local backend (threads); "
      "median of %d rounds\n",
      (long long)o.seq, o.heads, o.head_dim, o.rounds);
  std::printf("%-14s %7s %9s %9s %11s %10s %10s %10s %13s\n", "case", "GFLOP", "T1 ms", "T2 ms", "T2 wait ms",
              "T1/(2*T2)", "CPU1 ms", "CPU2 ms", "CPU1/(2*CPU2)");
  for (auto [name, kind, causal] :
       {std::tuple{"ring full", StrategyKind::Ring, false}, std::tuple{"ring causal", StrategyKind::Ring, true},
        std::tuple{"zigzag causal", StrategyKind::Zigzag, true}}) {
    Row r = measure(name, kind, causal, o, topology);
    std::printf("%-14s %7.2f %9.1f %9.1f %11.1f %10.2f %10.1f %10.1f %13.2f\n", r.name.c_str(), r.gflop, r.t1 * 1e3,
                r.t2 * 1e3, r.wait2 * 1e3, r.t1 / (2 * r.t2), r.cpu1 * 1e3, r.cpu2 * 1e3, r.cpu1 / (2 * r.cpu2));
    std::fflush(stdout);
  }
  return 0;
}
