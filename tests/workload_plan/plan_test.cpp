// Plan files: names of the enums, lossless and byte-stable round trips, the documented layout.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <wallfacer/plan/plan.hpp>
#include "sample_plan.hpp"
#include "test_util.hpp"

namespace wallfacer {
namespace {

using testing::input_error_of;
using testing::sample_plan;

TEST(PlanNames, Strategies) {
  const std::vector<std::string> expected = {"ring",        "zigzag",    "ulysses",   "usp",
                                             "double-ring", "allgather", "wallfacer", "lss"};
  ASSERT_EQ(all_strategies().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(to_string(all_strategies()[i]), expected[i]);
    EXPECT_EQ(parse_strategy(expected[i]), all_strategies()[i]);
  }
  EXPECT_EQ(input_error_of([] { parse_strategy("Ring"); }),
            "error: unknown strategy 'Ring' (ring, zigzag, ulysses, usp, double-ring, allgather, wallfacer, lss)");
}

TEST(PlanNames, Placements) {
  const std::pair<Placement, const char*> names[] = {{Placement::Default, "default"},
                                                     {Placement::HeadFirst, "head-first"},
                                                     {Placement::ContextFirst, "context-first"},
                                                     {Placement::CollectIntra, "collect-intra"},
                                                     {Placement::P2PIntra, "p2p-intra"}};
  for (const auto& [value, name] : names) {
    EXPECT_STREQ(to_string(value), name);
    EXPECT_EQ(parse_placement(name), value);
  }
  EXPECT_EQ(input_error_of([] { parse_placement("head_first"); }),
            "error: unknown placement 'head_first' (default, head-first, context-first, collect-intra, p2p-intra)");
}

TEST(PlanNames, GroupKinds) {
  const std::pair<GroupKind, const char*> names[] = {
      {GroupKind::Ring, "ring"},           {GroupKind::SubRing, "sub-ring"}, {GroupKind::Team, "team"},
      {GroupKind::AllToAll, "all-to-all"}, {GroupKind::Window, "window"},    {GroupKind::InterWindow, "inter-window"},
      {GroupKind::Sequence, "sequence"},   {GroupKind::Data, "data"},        {GroupKind::World, "world"},
      {GroupKind::Tensor, "tensor"}};
  for (const auto& [value, name] : names) {
    EXPECT_STREQ(to_string(value), name);
    EXPECT_EQ(parse_group_kind(name), value);
  }
  EXPECT_EQ(input_error_of([] { parse_group_kind("subring"); }),
            "error: unknown group kind 'subring' (ring, sub-ring, team, all-to-all, window, inter-window, sequence, "
            "data, world, tensor, pipeline)");
}

TEST(Plan, FindGroup) {
  const Plan plan = sample_plan();
  EXPECT_EQ(plan.find_group("team0"), 0);
  EXPECT_EQ(plan.find_group("subring.g0.a1"), 5);
  EXPECT_EQ(plan.find_group("world"), 6);
  EXPECT_EQ(plan.find_group("team9"), -1);
  EXPECT_EQ(plan.num_ranks(), 8);
}

TEST(PlanRoundTrip, LosslessAndByteStable) {
  const Plan plan = sample_plan();
  const std::string text = plan_to_yaml(plan);
  const Plan back = parse_plan(text, "p.yaml");
  EXPECT_TRUE(back == plan) << text;
  // Field by field as well, so a wrong operator== cannot hide a loss.
  EXPECT_TRUE(back.workload == plan.workload);
  EXPECT_EQ(back.ranks, plan.ranks);
  EXPECT_EQ(back.groups, plan.groups);
  ASSERT_TRUE(back.prediction.has_value());
  EXPECT_EQ(back.prediction->backward_ms, 1.0 / 3.0);
  EXPECT_EQ(back.prediction->memory_GiB, 71.25e-300);
  EXPECT_EQ(back.prediction->p2p_bytes_forward, 9007199254740993);
  EXPECT_EQ(plan_to_yaml(back), text);
}

// grad_comm_dtype is written only when it is not the default, and reads back.
TEST(PlanRoundTrip, GradCommDtype) {
  Plan plan = sample_plan();
  EXPECT_EQ(plan_to_yaml(plan).find("grad_comm_dtype"), std::string::npos);
  plan.workload.grad_comm_dtype = DType::FP16;
  const std::string text = plan_to_yaml(plan);
  EXPECT_NE(text.find("  grad_comm_dtype: fp16\n"), std::string::npos) << text;
  const Plan back = parse_plan(text, "p.yaml");
  EXPECT_EQ(back.workload.grad_comm_dtype, DType::FP16);
  EXPECT_TRUE(back == plan);
}

TEST(PlanRoundTrip, WithoutPredictionAndWithOddNames) {
  Plan plan = sample_plan();
  plan.prediction.reset();
  plan.workload.model = "my model: v2 \"quoted\" \\ #1";
  plan.workload.causal = false;
  plan.workload.gated_ffn = false;
  plan.workload.dtype = DType::FP32;
  plan.topology_name = "true";  // would read back as a boolean if written plain
  plan.topology_hash = "0123456789012345";
  plan.ranks[3].nic = "";
  plan.groups[0].name = "null";
  std::get<WallFacerKnobs>(plan.params.knobs).placement = TeamPlacement::P2PIntra;
  const std::string text = plan_to_yaml(plan);
  const Plan back = parse_plan(text, "p.yaml");
  EXPECT_TRUE(back == plan) << text;
  EXPECT_FALSE(back.prediction.has_value());
  EXPECT_EQ(back.workload.model, plan.workload.model);
  EXPECT_EQ(plan_to_yaml(back), text);
}

TEST(PlanRoundTrip, AllReduceAlgorithm) {
  Plan plan = sample_plan();
  const int world = plan.find_group("world");
  ASSERT_GE(world, 0);
  const std::string ring_text = plan_to_yaml(plan);
  EXPECT_EQ(ring_text.find("all_reduce"), std::string::npos);  // ring, the default, is not written
  plan.groups[size_t(world)].all_reduce = AllReduceAlgorithm::Tree;
  const std::string text = plan_to_yaml(plan);
  EXPECT_NE(text.find("{name: world, kind: world, ranks: [0, 1, 2, 3, 4, 5, 6, 7], all_reduce: tree}"),
            std::string::npos)
      << text;
  const Plan back = parse_plan(text, "p.yaml");
  EXPECT_EQ(back.groups[size_t(world)].all_reduce, AllReduceAlgorithm::Tree);
  EXPECT_TRUE(back == plan);
  EXPECT_EQ(parse_plan(ring_text, "p.yaml").groups[size_t(world)].all_reduce, AllReduceAlgorithm::Ring);
}

// The topology file is optional: absent for presets and in older plans, which read as before.
TEST(PlanRoundTrip, TopologyFile) {
  Plan plan = sample_plan();
  const std::string preset_text = plan_to_yaml(plan);
  EXPECT_EQ(preset_text.find("file:"), std::string::npos);
  EXPECT_EQ(parse_plan(preset_text, "p.yaml").topology_file, "");
  plan.topology_file = "../clusters/my lab: 4 nodes.yaml";
  const std::string text = plan_to_yaml(plan);
  EXPECT_NE(text.find(", file: \"../clusters/my lab: 4 nodes.yaml\"}"), std::string::npos) << text;
  const Plan back = parse_plan(text, "p.yaml");
  EXPECT_EQ(back.topology_file, plan.topology_file);
  EXPECT_TRUE(back == plan);
}

TEST(PlanRoundTrip, EveryStrategyAndGroupKind) {
  for (StrategyKind kind : all_strategies()) {
    Plan plan = sample_plan();
    plan.strategy = kind;
    // Each strategy's own knobs, away from their defaults where it has any.
    plan.params.knobs = default_knobs(kind);
    if (kind == StrategyKind::Usp) plan.params.knobs = UspKnobs{2, 4, ContextPlacement::ContextFirst};
    if (kind == StrategyKind::DoubleRing) plan.params.knobs = DoubleRingKnobs{2, 2, ContextPlacement::ContextFirst};
    if (kind == StrategyKind::WallFacer) plan.params.knobs = WallFacerKnobs{2, TeamPlacement::P2PIntra};
    plan.groups.push_back({"extra", GroupKind::InterWindow, {7, 6}});
    EXPECT_TRUE(parse_plan(plan_to_yaml(plan), "p.yaml") == plan) << to_string(kind);
  }
}

TEST(PlanFile, DocumentedLayout) {
  const std::string text = plan_to_yaml(sample_plan());
  EXPECT_NE(text.find("\nformat_version: 2\n"), std::string::npos);
  EXPECT_NE(text.find("\nscope: attention\n"), std::string::npos);
  EXPECT_NE(text.find("\ntopology: {name: two-node, hash: \"0f3a9c21d4e5b687\", nodes: 2}\n"), std::string::npos);
  EXPECT_NE(text.find("\nstrategy: wallfacer\n"), std::string::npos);
  EXPECT_NE(text.find("\n  - {rank: 5, gpu: 5, node: 1, local_gpu: 1, nic: n1/nic1}\n"), std::string::npos);
  EXPECT_NE(text.find("\n  - {name: subring.g0.a1, kind: sub-ring, ranks: [3, 1]}\n"), std::string::npos);
  EXPECT_NE(text.find("\n  forward_ms: 0.10000000000000001\n"), std::string::npos);
}

// The worked example of docs/formats/plan.md is a valid plan, written exactly as the writer does.
TEST(PlanFile, DocumentedExampleIsExact) {
  const std::string example = testing::yaml_block_of("docs/formats/plan.md");
  ASSERT_FALSE(example.empty());
  const Plan plan = parse_plan(example, "plan.md");
  EXPECT_EQ(plan.num_ranks(), 16);
  EXPECT_EQ(plan.params.sequence_parallel * plan.params.data_parallel, 16);
  EXPECT_EQ(plan.groups.size(), 10u);
  ASSERT_TRUE(plan.prediction.has_value());
  EXPECT_EQ(plan.prediction->forward_ms, 10.7);
  EXPECT_EQ(plan.prediction->mfu, 0.48);
  EXPECT_EQ(plan_to_yaml(plan), example);
}

TEST(PlanFile, ReadFromDisk) {
  const std::filesystem::path path = testing::scratch_path("plan.yaml");
  {
    std::ofstream out(path);
    write_plan(sample_plan(), out);
  }
  const Plan back = read_plan_file(path.string());
  std::filesystem::remove(path);
  EXPECT_TRUE(back == sample_plan());
  EXPECT_EQ(input_error_of([&] { read_plan_file(path.string()); }), path.string() + ": error: cannot open file");
}

}  // namespace
}  // namespace wallfacer
