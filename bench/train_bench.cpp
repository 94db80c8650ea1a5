// bench_train: training throughput of `wallfacer train`'s loop on this machine. The gpt-tiny
// preset (or --seq/--batch overrides) trains on pseudo-random bytes for --steps steps on 1 rank
// and on 2 ranks (a zigzag split of each sequence, threads), alternating rounds so both see the
// same machine load. Per configuration: median step time (wall, and the slowest rank thread's CPU
// time), tokens/s, and MFU against one core's measured GEMM peak (measured once, before the
// rounds, and used for both); beside it the cost model's step time for the same plan on the CPU
// topology with this CPU's calibration (bench_cpu_calibration), measured apart from any step.
// Figures in docs/benchmarks.md ("Training").
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <vector>

#include <wallfacer/core/allocator.hpp>
#include <wallfacer/core/errors.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/train/run.hpp>

namespace {

using namespace wallfacer;

struct Options {
  int64_t seq = 1024;
  int batch = 2;
  int steps = 12, rounds = 3;
  std::string topology = WALLFACER_SOURCE_DIR "/topologies/cpu-epyc-2core.yaml";
  std::string calibration = WALLFACER_SOURCE_DIR "/bench/cpu-epyc-2core-calibration.yaml";
};

Plan plan_of(const Workload& w, StrategyKind kind, int ranks, const Topology& topology) {
  Plan plan;
  plan.scope = Scope::Step;
  plan.topology_name = topology.name();
  plan.topology_hash = topology.content_hash();
  plan.topology_nodes = 1;
  plan.workload = w;
  plan.strategy = kind;
  plan.params.sequence_parallel = ranks;
  for (int r = 0; r < ranks; ++r)
    plan.ranks.push_back(RankSlot{r, r, 0, r, ""});
  plan.groups = make_groups(kind, plan.params, ranks);
  return plan;
}

train::TrainingSample random_bytes(int64_t seq, int64_t step, int sample) {
  train::SampleRandom random(7, step, sample, 1);
  train::TrainingSample s;
  for (int64_t i = 0; i <= seq; ++i)
    s.tokens.push_back(int32_t(random.below(256)));
  s.loss_mask.assign(size_t(seq), 1);
  return s;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct StepTimes {
  std::vector<double> wall, cpu;  // per timed step; cpu: the slowest rank thread's
};

// Step seconds of `steps` steps after the first (which allocates and warms up).
StepTimes step_times(const Plan& plan, const Options& o, double peak) {
  const Schedule schedule = train::attention_schedule(plan);
  train::RunSettings settings;
  settings.steps = o.steps + 1;
  settings.trainer.total_steps = settings.steps;
  settings.peak_flops_per_rank = peak;
  StepTimes times;
  times.cpu.assign(size_t(o.steps), 0.0);
  std::mutex mutex;
  runtime::run_local_ranks(plan.num_ranks(), [&](runtime::Backend& backend) {
    auto batches = [&](int64_t step, int sample) { return random_bytes(plan.workload.seq, step, sample); };
    double last = thread_cpu_seconds();
    train::train_run(backend, plan, schedule, batches, settings, [&](const train::StepRecord& r) {
      const double now = thread_cpu_seconds();
      if (r.step > 1) {
        std::lock_guard lock(mutex);
        double& cpu = times.cpu[size_t(r.step - 2)];
        cpu = std::max(cpu, now - last);
        if (backend.rank() == 0) times.wall.push_back(r.seconds);
      }
      last = now;
    });
  });
  return times;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Training throughput of the gpt-tiny preset on 1 and 2 ranks (threads)");
  app.add_option("--seq", o.seq, "Tokens per sequence")->capture_default_str();
  app.add_option("--batch", o.batch, "Sequences per step")->capture_default_str();
  app.add_option("--steps", o.steps, "Timed steps per round")->capture_default_str();
  app.add_option("--rounds", o.rounds, "Rounds (1 rank, then 2 ranks, per round)")->capture_default_str();
  app.add_option("--topology", o.topology, "CPU topology the prediction prices the plan on")->capture_default_str();
  app.add_option("--calibration", o.calibration, "This CPU's calibration (bench_cpu_calibration)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  keep_freed_memory();  // as `wallfacer train` (cli/main.cpp): freed activations are not returned to the OS
  Workload w = load_workload("gpt-tiny");
  w.seq = o.seq;
  w.batch = o.batch;
  std::optional<Topology> topology;
  std::optional<Calibration> calibration;
  try {
    topology.emplace(Topology::load(o.topology));
    calibration.emplace(Calibration::load(o.calibration));
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const double peak = train::measure_peak_flops(false);
  const double flops = step_model_flops(w);
  std::printf("gpt-tiny, seq %lld, batch %d, fp32; one core's GEMM peak %.1f GFLOP/s; model FLOPs per step %.3g\n",
              static_cast<long long>(w.seq), w.batch, peak / 1e9, flops);
  const CostModel model(*topology, *calibration);
  double predicted[2] = {};
  StepTimes times[2];
  for (int round = 0; round < o.rounds; ++round)
    for (int ranks : {1, 2}) {
      const Plan plan = plan_of(w, ranks == 1 ? StrategyKind::Ring : StrategyKind::Zigzag, ranks, *topology);
      if (round == 0) predicted[ranks - 1] = 1e-3 * model.evaluate_step(plan).step_ms;
      StepTimes t = step_times(plan, o, peak);
      times[ranks - 1].wall.insert(times[ranks - 1].wall.end(), t.wall.begin(), t.wall.end());
      times[ranks - 1].cpu.insert(times[ranks - 1].cpu.end(), t.cpu.begin(), t.cpu.end());
    }
  std::printf(
      "| ranks | strategy | median step ms (wall) | median step ms (CPU) | predicted ms | predicted / CPU | "
      "tokens/s | MFU |\n|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (int ranks : {1, 2}) {
    const double s = median(times[ranks - 1].wall), cpu = median(times[ranks - 1].cpu);
    std::printf("| %d | %s | %.1f | %.1f | %.1f | %.2f | %.0f | %.1f %% |\n", ranks,
                ranks == 1 ? "ring S=1" : "zigzag S=2", 1e3 * s, 1e3 * cpu, 1e3 * predicted[ranks - 1],
                predicted[ranks - 1] / cpu, double(w.seq * w.batch) / s, 100 * flops / s / (peak * ranks));
  }
  return 0;
}
