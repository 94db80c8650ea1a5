// Edited plan files (tests/common/text_mutations.hpp) of real plans: the reader, the topology
// check and the schedule builders either accept each one or reject it with an InputError or a
// ScheduleError, whatever the edit; and edited model files are accepted or InputErrors.
#include <gtest/gtest.h>

#include <typeinfo>

#include "planner/errors.hpp"
#include "planner/plan.hpp"
#include "planner/strategy.hpp"
#include "planner/topology.hpp"
#include "planner/workload.hpp"
#include "tests/common/text_mutations.hpp"

namespace wallfacer {
namespace {

Workload small_gqa_workload() {
  Workload w;
  w.model = "edited";
  w.layers = 2;
  w.hidden = 512;
  w.heads = 8;
  w.kv_heads = 2;
  w.head_dim = 64;
  w.ffn = 1024;
  w.vocab = 1000;
  w.seq = 4096;
  w.batch = 2;
  w.causal = true;
  return w;
}

StrategyParams params(int S, int D, int team, int ulysses, int ring, int window) {
  StrategyParams p;
  p.sequence_parallel = S;
  p.data_parallel = D;
  p.team = team;
  p.ulysses = ulysses;
  p.ring = ring;
  p.window = window;
  return p;
}

// How one edited text fared; anything but these two outcomes fails the test where it happens.
enum class Outcome { Accepted, Rejected };

Outcome read_check_and_build(const std::string& text, const Topology& topology) {
  try {
    const Plan plan = parse_plan(text, "p.yaml");
    check_plan_against_topology(plan, topology, "p.yaml");
    build_schedule(plan);
    return Outcome::Accepted;
  } catch (const InputError&) {
    return Outcome::Rejected;
  } catch (const ScheduleError&) {
    return Outcome::Rejected;
  }
}

TEST(PlanMutations, EveryEditIsAcceptedOrAnInputError) {
  const Topology topology = Topology::load("dgx-h100", 2);
  const Workload w = small_gqa_workload();
  const std::vector<std::pair<StrategyKind, StrategyParams>> cases = {
      {StrategyKind::WallFacer, params(8, 2, 2, 1, 1, 1)},
      {StrategyKind::Usp, params(16, 1, 1, 2, 8, 1)},
      {StrategyKind::DoubleRing, params(16, 1, 1, 2, 1, 2)},
      {StrategyKind::Lss, params(8, 2, 1, 1, 1, 1)},
  };
  for (const auto& [kind, p] : cases) {
    SCOPED_TRACE(to_string(kind));
    const std::string text = plan_to_yaml(make_plan(kind, p, w, topology, 16));
    ASSERT_EQ(read_check_and_build(text, topology), Outcome::Accepted);
    int rejected = 0;
    for (uint32_t i = 0; i < 150; ++i) {
      const std::string edited = testing::mutated(text, i);
      try {
        rejected += read_check_and_build(edited, topology) == Outcome::Rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "edit " << i << " escaped as " << typeid(e).name() << ": " << e.what() << "\n" << edited;
      }
    }
    // The edits reach the checks: most of them break the plan.
    EXPECT_GT(rejected, 75);
  }
}

TEST(WorkloadMutations, EveryEditIsAcceptedOrAnInputError) {
  const std::string text =
      "model: edited\nlayers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\nhead_dim: 128\nffn: 14336\n"
      "vocab: 128256\ngated_ffn: true\nseq: 131072\nbatch: 1\ndtype: bf16\ncausal: true\nzero_stage: 1\n";
  ASSERT_NO_THROW(parse_workload(text, "m.yaml"));
  int rejected = 0;
  for (uint32_t i = 0; i < 300; ++i) {
    const std::string edited = testing::mutated(text, 9000 + i);
    try {
      parse_workload(edited, "m.yaml");
    } catch (const InputError&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "edit " << i << " escaped as " << typeid(e).name() << ": " << e.what() << "\n" << edited;
    }
  }
  EXPECT_GT(rejected, 150);  // the edits reach the checks
}

}  // namespace
}  // namespace wallfacer
