// Edited plan files (tests/common/text_mutations.hpp) of real plans: the reader, the topology
// check and the schedule builders either accept each one or reject it with an InputError or a
// ScheduleError, whatever the edit; and edited model files are accepted or InputErrors.
#include <gtest/gtest.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "common/text_mutations.hpp"
#include "sample_plan.hpp"

namespace wallfacer {
namespace {

void read_check_and_build(const std::string& text, const Topology& topology) {
  const Plan plan = parse_plan(text, "p.yaml");
  check_plan_against_topology(plan, topology, "p.yaml");
  build_schedule(plan);
}

TEST(PlanMutations, EveryEditIsAcceptedOrAnInputError) {
  const Topology topology = Topology::load("dgx-h100", 2);
  const Workload w = testing::gqa_workload();  // the sample plan's; any workload would do
  const std::vector<std::pair<StrategyKind, StrategyParams>> cases = {
      {StrategyKind::WallFacer, {.sequence_parallel = 8, .data_parallel = 2, .knobs = WallFacerKnobs{.team = 2}}},
      {StrategyKind::Usp, {.sequence_parallel = 16, .knobs = UspKnobs{.ulysses = 2, .ring = 8}}},
      {StrategyKind::DoubleRing, {.sequence_parallel = 16, .knobs = DoubleRingKnobs{.ulysses = 2, .window = 2}}},
      {StrategyKind::Lss, {.sequence_parallel = 8, .data_parallel = 2}},
  };
  for (const auto& [kind, p] : cases) {
    SCOPED_TRACE(to_string(kind));
    const std::string text = plan_to_yaml(make_plan(kind, p, w, topology, 16));
    ASSERT_NO_THROW(read_check_and_build(text, topology));
    const int rejected = testing::rejected_edits(
        text, 0, 150, [&](const std::string& edited) { read_check_and_build(edited, topology); },
        testing::Rejection::InputOrScheduleError);
    // The edits reach the checks: most of them break the plan.
    EXPECT_GT(rejected, 75);
  }
}

TEST(WorkloadMutations, EveryEditIsAcceptedOrAnInputError) {
  const std::string text =
      "model: edited\nlayers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\nhead_dim: 128\nffn: 14336\n"
      "vocab: 128256\ngated_ffn: true\nseq: 131072\nbatch: 1\ndtype: bf16\ncausal: true\nzero_stage: 1\n";
  ASSERT_NO_THROW(parse_workload(text, "m.yaml"));
  const int rejected =
      testing::rejected_edits(text, 9000, 300, [](const std::string& edited) { parse_workload(edited, "m.yaml"); });
  EXPECT_GT(rejected, 150);  // the edits reach the checks
}

}  // namespace
}  // namespace wallfacer
