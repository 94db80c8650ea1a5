// The NCCL transport's host logic without NCCL (sequenced_backend.hpp): every strategy's layer
// must still run to the reference's numbers with every call released, which shows that the
// executor, reading the schedule once, posts every op of each call without waiting on a later
// one, and that posts map to the plan's calls.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/device_plan.hpp>
#include <wallfacer/runtime/layer_runner.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "device_plan/sequenced_backend.hpp"
#include "runtime/hand_programs.hpp"

namespace wallfacer::testing {
namespace {

const Topology& eight_gpus() {
  static const Topology topology = Topology::load("dgx-h100");
  return topology;
}

TEST(SequencedBackend, EveryStrategyRunsInDevicePlanOrder) {
  int runs = 0;
  for (const Workload& w : {tiny_workload(64, 8, 4, 16, 2, true), tiny_workload(48, 4, 2, 16, 1, false)}) {
    const auto inputs = runtime::seeded_inputs(w, 5, false);
    for (StrategyKind kind : all_strategies())
      for (int P : {2, 4, 8})
        for (const StrategyParams& params : enumerate_params(kind, w, P)) {
          if (!check_feasible(kind, params, w, P).ok) continue;
          const std::string what =
              fmt::format("{} P={} S={} D={}", to_string(kind), P, params.sequence_parallel, params.data_parallel);
          SCOPED_TRACE(what);
          const Plan plan = make_plan(kind, params, w, eight_gpus(), P);
          const Schedule schedule = build_schedule(plan);
          const runtime::DevicePlan device = runtime::make_device_plan(schedule, plan);
          runtime::LayerRunOptions options;
          options.check = true;
          runtime::LayerRunResult result;
          std::vector<int> released(static_cast<size_t>(P), 0);
          runtime::run_local_ranks(P, [&](Backend& inner) {
            SequencedBackend backend(inner, device.ranks[size_t(inner.rank())]);
            auto r = runtime::run_layer(backend, plan, schedule, inputs, options);
            released[size_t(inner.rank())] = backend.all_released();
            if (inner.rank() == 0) result = std::move(r);
          });
          EXPECT_TRUE(result.ok);
          for (const auto& c : result.checks)
            EXPECT_TRUE(c.ok) << c.name << " " << c.stats.relative;
          for (int r = 0; r < P; ++r)
            EXPECT_TRUE(released[size_t(r)]) << "rank " << r;
          ++runs;
        }
  }
  EXPECT_GE(runs, 20);
}

}  // namespace
}  // namespace wallfacer::testing
