// Writes small plans (make_plan on the dgx-h100 preset) and .npy inputs for the `wallfacer run`
// integration tests in tests/runtime/tests.cmake:
//   runtime_test_plan plan STRATEGY RANKS OUT.yaml [--team C] [--placement P] [--ulysses U] ...
//   runtime_test_plan inputs DIR [--seq N] [--heads H] ...   (q.npy, k.npy, v.npy, do.npy)
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/layer_runner.hpp>
#include <wallfacer/runtime/npy.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "common/synthetic_workload.hpp"

namespace {

struct Shape {
  int64_t seq = 64;
  int heads = 4, kv_heads = 2, head_dim = 16, batch = 1;
  bool full = false;
};

void add_shape(CLI::App* app, Shape& s) {
  app->add_option("--seq", s.seq);
  app->add_option("--heads", s.heads);
  app->add_option("--kv-heads", s.kv_heads);
  app->add_option("--head-dim", s.head_dim);
  app->add_option("--batch", s.batch);
  app->add_flag("--full", s.full, "Full (non-causal) mask");
}

wallfacer::Workload workload_of(const Shape& s) {
  return wallfacer::test::synthetic_workload(
      {s.seq, s.heads, s.kv_heads, s.head_dim, s.batch, !s.full, wallfacer::DType::FP32, 128});
}

// The first feasible enumerated parameters that match the requested overrides.
wallfacer::StrategyParams pick_params(wallfacer::StrategyKind kind, const wallfacer::Workload& w, int ranks, int team,
                                      int ulysses, int data_parallel, const std::string& placement) {
  for (const auto& p : wallfacer::enumerate_params(kind, w, ranks)) {
    if (!wallfacer::check_feasible(kind, p, w, ranks).ok) continue;
    if (p.data_parallel != data_parallel) continue;
    if (team > 0 && team_size(p) != team) continue;
    if (ulysses > 0 && ulysses_degree(p) != ulysses) continue;
    if (!placement.empty() && placement_of(p) != wallfacer::parse_placement(placement)) continue;
    return p;
  }
  throw wallfacer::InputError(
      fmt::format("no feasible {} parameters for {} ranks with these options", wallfacer::to_string(kind), ranks));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Plans and inputs for the runtime integration tests"};
  app.require_subcommand(1);
  Shape shape;
  std::string strategy, out, placement;
  int ranks = 1, team = 0, ulysses = 0, data_parallel = 1;
  CLI::App* plan = app.add_subcommand("plan", "Write a plan");
  plan->add_option("strategy", strategy)->required();
  plan->add_option("ranks", ranks)->required();
  plan->add_option("out", out)->required();
  plan->add_option("--team", team);
  plan->add_option("--ulysses", ulysses);
  plan->add_option("--data-parallel", data_parallel);
  plan->add_option("--placement", placement);
  add_shape(plan, shape);
  CLI::App* inputs = app.add_subcommand("inputs", "Write q.npy, k.npy, v.npy and do.npy");
  inputs->add_option("dir", out)->required();
  add_shape(inputs, shape);
  try {
    app.parse(argc, argv);
    const wallfacer::Workload w = workload_of(shape);
    if (plan->parsed()) {
      const auto kind = wallfacer::parse_strategy(strategy);
      const auto params = pick_params(kind, w, ranks, team, ulysses, data_parallel, placement);
      const auto topology = wallfacer::Topology::load("dgx-h100");
      const auto parent = std::filesystem::path(out).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      std::ofstream file(out);
      wallfacer::write_plan(wallfacer::make_plan(kind, params, w, topology, ranks), file);
      if (!file) throw wallfacer::InputError(out, 0, "cannot write");
    } else {
      std::filesystem::create_directories(out);
      const auto in = wallfacer::runtime::seeded_inputs(w, 42, false);
      namespace rt = wallfacer::runtime;
      rt::write_npy(out + "/q.npy", rt::convert<float>(in.q));
      rt::write_npy(out + "/k.npy", rt::convert<float>(in.k));
      rt::write_npy(out + "/v.npy", rt::convert<float>(in.v));
      rt::write_npy(out + "/do.npy", rt::convert<float>(in.dO));
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
