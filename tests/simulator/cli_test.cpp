// `wallfacer plan --simulate-top K` and `wallfacer simulate` through the built binary: every
// strategy on every topology preset (two nodes of the compact ones), the simulated ranking, and
// the agreement of the two commands on the plan they share. Fails when the binary is not built.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <wallfacer/topology/topology.hpp>
#include "common/cli_runner.hpp"

namespace wallfacer {
namespace {

using nlohmann::json;

const std::vector<std::string> kStrategies = {"ring",        "zigzag",    "ulysses",   "usp",
                                              "double-ring", "allgather", "wallfacer", "lss"};

// A workload every preset can hold: fp16 (V100s have no bf16), ZeRO-3 (40 GB A100s), and a
// sequence divisible by 2 x 12, 2 x 16 and 2 x 32 ranks (zigzag halves). The ranking test plans
// the whole step of 2 layers: all 32 do not fit summit's 16 GB V100s in any plan, and 2 replay
// quickly.
const std::string kWorkload = "--seq 61440 --dtype fp16 --zero-stage 3";

std::filesystem::path scratch_dir() {
  return std::filesystem::temp_directory_path() / ("wallfacer-sim-cli-" + std::to_string(::getpid()));
}

std::filesystem::path scratch(const std::string& name) {
  std::filesystem::create_directories(scratch_dir());
  return scratch_dir() / name;
}

class SimulateCommand : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_dir(), ignored);
  }
  void SetUp() override { ASSERT_TRUE(test::cli_present()); }
  std::string topology_args() const {
    const std::string& preset = GetParam();
    const bool compact = Topology::load(preset).fabric().type != "explicit";
    return "--topology " + preset + (compact ? " --nodes 2" : "");
  }
};

// What `simulate PLAN --json` must hold for a plan of `ranks` ranks.
void expect_simulation_json(const json& sim, int ranks, const std::string& what) {
  ASSERT_TRUE(sim.contains("step_ms") && sim.contains("forward_ms") && sim.contains("backward_ms")) << what;
  EXPECT_GT(sim["forward_ms"].get<double>(), 0) << what;
  EXPECT_GT(sim["backward_ms"].get<double>(), 0) << what;
  EXPECT_NEAR(sim["forward_ms"].get<double>() + sim["backward_ms"].get<double>(), sim["step_ms"].get<double>(),
              1e-9 * sim["step_ms"].get<double>())
      << what;
  ASSERT_TRUE(sim["ranks"].is_array()) << what;
  EXPECT_EQ(int(sim["ranks"].size()), ranks) << what;
  ASSERT_TRUE(sim.contains("links")) << what;
}

TEST_P(SimulateCommand, SimulateTopRanksByTimeAndSimulateAgrees) {
  int simulated_strategies = 0;
  for (const std::string& strategy : kStrategies) {
    const std::string what = GetParam() + " " + strategy;
    const auto plan_file = scratch(GetParam() + "-" + strategy + ".yaml");
    const test::CliResult planned =
        test::run_cli("plan " + topology_args() + " " + kWorkload + " --layers 2 --strategy " + strategy +
                          " --simulate-top 3 --json --out " + plan_file.string(),
                      "2>/dev/null");
    const json ranking = json::parse(planned.output, nullptr, false);
    ASSERT_FALSE(ranking.is_discarded()) << what << ": " << planned.output;
    if (planned.status == 1) {  // allowed only when nothing is feasible, each with its reason
      EXPECT_TRUE(ranking["best"].is_null()) << what;
      for (const auto& c : ranking["candidates"])
        EXPECT_FALSE(c["reason"].get<std::string>().empty()) << what;
      continue;
    }
    ASSERT_EQ(planned.status, 0) << what;
    ASSERT_EQ(ranking["best"], 0) << what;
    // The simulated candidates come first, by simulated step time.
    std::vector<double> simulated;
    for (const auto& c : ranking["candidates"])
      if (c.contains("simulated_ms")) simulated.push_back(c["simulated_ms"].get<double>());
    const auto& candidates = ranking["candidates"];
    size_t feasible = 0;
    for (const auto& c : candidates)
      feasible += c["feasible"].get<bool>() ? 1 : 0;
    ASSERT_EQ(simulated.size(), std::min<size_t>(3, feasible)) << what;
    for (size_t i = 0; i < simulated.size(); ++i) {
      EXPECT_TRUE(candidates[i].contains("simulated_ms")) << what << " candidate " << i;
      if (i > 0) {
        EXPECT_LE(simulated[i - 1], simulated[i]) << what;
      }
    }
    // `simulate` on the written best plan gives the time the ranking showed for it.
    const test::CliResult replayed = test::run_cli("simulate " + plan_file.string() + " --json", "2>/dev/null");
    ASSERT_EQ(replayed.status, 0) << what << ": " << replayed.output;
    const json sim = json::parse(replayed.output, nullptr, false);
    ASSERT_FALSE(sim.is_discarded()) << what;
    expect_simulation_json(sim, ranking["gpus"].get<int>(), what);
    EXPECT_EQ(sim["layers"], 2) << what;  // the whole step, both layers
    EXPECT_NEAR(sim["step_ms"].get<double>(), simulated.front(), 1e-9 * simulated.front()) << what;
    ++simulated_strategies;
  }
  // Ulysses needs the head count divisible by the rank count; everything else fits every preset.
  EXPECT_GE(simulated_strategies, int(kStrategies.size()) - 1) << GetParam();
}

TEST(SimulateCommandInput, BadCountsAreRejectedWithTheFlagAndStatus2) {
  ASSERT_TRUE(test::cli_present());
  const test::CliResult jobs = test::run_cli("plan --simulate-top 2 --jobs 0", "2>&1");
  EXPECT_EQ(jobs.status, 2);
  EXPECT_NE(jobs.output.find("--jobs: must be at least 1 (got 0)"), std::string::npos) << jobs.output;
  const test::CliResult top = test::run_cli("plan --simulate-top x", "2>&1");
  EXPECT_EQ(top.status, 2);
  EXPECT_NE(top.output.find("wallfacer plan: error: --simulate-top: expects a whole number, got 'x'"),
            std::string::npos)
      << top.output;
  EXPECT_NE(top.output.find("example: wallfacer plan --simulate-top 0"), std::string::npos) << top.output;
  const test::CliResult steps = test::run_cli("simulate plan.yaml --max-ring-steps -1", "2>&1");
  EXPECT_EQ(steps.status, 2);
  EXPECT_NE(steps.output.find("--max-ring-steps: must be at least 0 (got -1)"), std::string::npos) << steps.output;
  for (const char* command : {"simulate plan.yaml --sim-threads 65", "plan --simulate-top 1 --sim-threads -1"}) {
    const test::CliResult threads = test::run_cli(command, "2>&1");
    EXPECT_EQ(threads.status, 2) << command;
    EXPECT_NE(threads.output.find("--sim-threads"), std::string::npos) << threads.output;
  }
}

TEST(SimulateCommandInput, AllReduceFlagReachesThePlanAndTheReplay) {
  ASSERT_TRUE(test::cli_present());
  // A 16-rank ring over two DGX nodes; its world all-reduce is 30 ring steps per member on each
  // of 8 ring channels, one per NIC (3,840 transfers), or a double binary tree per channel (4
  // channels x 4 x 15 transfers); everything else is the same. One attention layer: the whole step under ZeRO-3
  // reduce-scatters its gradients, rings whatever the all-reduce algorithm.
  json simulated[2];
  for (int i = 0; i < 2; ++i) {
    const std::string algorithm = i == 0 ? "ring" : "tree";
    const std::filesystem::path plan = scratch("all-reduce-" + algorithm + ".yaml");
    const test::CliResult planned =
        test::run_cli("plan --nodes 2 --gpus 16 --strategy ring --tp 1 " + kWorkload +
                          " --scope attention --all-reduce " + algorithm + " --out " + plan.string(),
                      "2>&1");
    ASSERT_EQ(planned.status, 0) << planned.output;
    std::ifstream in(plan);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("kind: world") != std::string::npos && text.find("all_reduce: tree") != std::string::npos,
              algorithm == "tree")
        << text;
    const test::CliResult sim = test::run_cli("simulate " + plan.string() + " --json", "2>/dev/null");
    ASSERT_EQ(sim.status, 0) << sim.output;
    simulated[i] = json::parse(sim.output);
  }
  EXPECT_EQ(simulated[0]["transfers"].get<int64_t>() - simulated[1]["transfers"].get<int64_t>(),
            16 * 30 * 8 - 4 * 4 * 15);
  const test::CliResult bad = test::run_cli("plan --all-reduce star", "2>&1");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("--all-reduce: expects one of auto, ring, tree, got 'star'"), std::string::npos)
      << bad.output;
  EXPECT_NE(bad.output.find("example: wallfacer plan --all-reduce ring"), std::string::npos) << bad.output;
}

TEST(SimulateCommandProgress, LinesGoToStderrAndClimbTowardsTheStep) {
  ASSERT_TRUE(test::cli_present());
  const std::filesystem::path plan = scratch("progress-plan.yaml"), lines = scratch("progress.txt");
  ASSERT_EQ(test::run_cli("plan --nodes 2 --out " + plan.string(), "2>&1").status, 0);
  // A tiny interval prints at every clock check; stdout keeps nothing but the JSON. One replay of
  // every layer (a composed step's replays each print their own lines, labelled by their layers).
  const test::CliResult run =
      test::run_cli("simulate " + plan.string() + " --json --full-replay --progress 1e-9", "2>" + lines.string());
  ASSERT_EQ(run.status, 0) << run.output;
  const json sim = json::parse(run.output);
  std::ifstream in(lines);
  std::string line;
  double last_ms = 0;
  int count = 0;
  while (std::getline(in, line)) {
    if (line.rfind("==", 0) == 0) continue;  // a sanitizer runtime's own note, in sanitized builds
    double ms = -1, seconds = -1, predicted = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "simulator: %lf ms simulated after %lf s (the cost model's step: %lf ms)", &ms,
                          &seconds, &predicted),
              3)
        << line;
    EXPECT_GE(ms, last_ms) << line;
    EXPECT_LE(ms, sim["step_ms"].get<double>() * (1 + 1e-9)) << line;
    EXPECT_GT(predicted, 0) << line;
    last_ms = ms;
    ++count;
  }
  EXPECT_GT(count, 1);
  // 0 turns the lines off.
  const test::CliResult quiet =
      test::run_cli("simulate " + plan.string() + " --json --progress 0", "2>" + lines.string());
  ASSERT_EQ(quiet.status, 0);
  EXPECT_EQ(std::filesystem::file_size(lines), 0u);
  const test::CliResult bad = test::run_cli("simulate " + plan.string() + " --progress -1", "2>&1");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("--progress: must be 0 or more seconds (got -1)"), std::string::npos) << bad.output;
  std::error_code ignored;
  std::filesystem::remove_all(scratch_dir(), ignored);
}

INSTANTIATE_TEST_SUITE_P(Presets, SimulateCommand, ::testing::ValuesIn(Topology::preset_names()), [](const auto& info) {
  std::string name = info.param;
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
});

}  // namespace
}  // namespace wallfacer
