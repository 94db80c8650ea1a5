// `wallfacer plan`'s explanation through the built binary: the JSON breakdown sums to each step and
// ties follow the expected error, the table's legend and sentences, suggestions when nothing is
// feasible, the warnings about an uncalibrated GPU and an unsourced topology file, and plans
// made from a topology file that `simulate` and `run` find again (or say which file to pass).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "common/cli_runner.hpp"

namespace wallfacer {
namespace {

namespace fs = std::filesystem;

// One node of four GPUs on an NVSwitch; the GPU model is not in the calibration and only the
// NVSwitch cites a source.
const char* kLab = R"(name: lab-node
description: a lab node
gpu: {model: LabGPU-80GB, peak_bf16_tflops: 300, peak_fp16_tflops: 300, memory_GiB: 80, hbm_GBps: 2000}
nodes: 1
node:
  gpus: 4
  gpu_fabric: {type: nvswitch, bandwidth_GBps: 300, latency_us: 0.5, source: "vendor sheet"}
  pcie:
    bandwidth_GBps: 32
    latency_us: 0.5
    switches:
      - {cpu: 0, gpus: [0, 1, 2, 3]}
)";

const std::string kSmall = "--seq 4096 --layers 2 --heads 8 --kv-heads 8 --head-dim 64";

class PlanExplain : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::cli_present());
    dir_ = fs::temp_directory_path() / ("wallfacer-explain-" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "topo");
    fs::create_directories(dir_ / "plans");
    write(dir_ / "topo" / "lab.yaml", kLab);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  static void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }
  std::string topo() const { return (dir_ / "topo" / "lab.yaml").string(); }
  std::string plan_file() const { return (dir_ / "plans" / "p.yaml").string(); }
  fs::path dir_;
};

TEST_F(PlanExplain, JsonBreakdownSumsToTheStepAndTiesFollowTheExpectedError) {
  const auto r = test::run_cli("plan --topology dgx-h100 --nodes 2 --gpus 16 " + kSmall + " --json", "2>/dev/null");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  const double error = j.at("expected_error").get<double>();
  EXPECT_EQ(error, 0.02);
  const int best_index = j["best"].get<int>();
  const double best = j["candidates"][best_index]["predicted_ms"]["step"].get<double>();
  int with_breakdown = 0, index = -1;
  for (const auto& c : j["candidates"]) {
    ++index;
    if (!c["feasible"].get<bool>() || c["pruned"].get<bool>()) continue;
    const auto& b = c.at("breakdown");
    const double sum = b["compute"].get<double>() + b["load_imbalance"].get<double>() + b["idle"].get<double>() +
                       b["exposed_comm"]["nvlink"].get<double>() + b["exposed_comm"]["pcie"].get<double>() +
                       b["exposed_comm"]["network"].get<double>();
    const double step = c["predicted_ms"]["step"].get<double>();
    EXPECT_NEAR(sum, step, 1e-6 * step);
    // Every other candidate within the expected error of the best is tied with it, an equal step included.
    EXPECT_EQ(c["tie"].get<bool>(), index != best_index && step <= best * (1 + error)) << step << " vs " << best;
    ++with_breakdown;
  }
  EXPECT_GT(with_breakdown, 3);
  ASSERT_FALSE(j["explanation"].empty());
  EXPECT_NE(j["explanation"][0].get<std::string>().find(" wins: "), std::string::npos);
}

TEST_F(PlanExplain, TableShowsThePartsTheLegendAndTheSentences) {
  const auto r = test::run_cli("plan --topology dgx-h100 --nodes 2 --gpus 16 " + kSmall, "2>/dev/null");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("cmp imb nvl pci net idle"), std::string::npos);
  EXPECT_NE(r.output.find("in % of the step: compute, load imbalance"), std::string::npos);
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\n\\S.* wins: of its [0-9.]+ ms")));
  EXPECT_NE(r.output.find("the runner-up "), std::string::npos);
  // Ties carry '=' after their step and the legend explains it.
  if (std::regex_search(r.output, std::regex("[0-9]\\.[0-9]{3}= "))) {
    EXPECT_NE(r.output.find("'=' marks a tie"), std::string::npos);
  }
}

TEST_F(PlanExplain, NothingFeasibleListsCheckedChanges) {
  const auto r =
      test::run_cli("plan --topology dgx-h100 --nodes 2 --gpus 16 --seq 1032 --tp 1 --strategy zigzag", "2>&1");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("no feasible plan for strategy zigzag"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("each of these changes makes one feasible"), std::string::npos);
  EXPECT_NE(r.output.find("  --seq 1024  "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  --strategy auto  "), std::string::npos) << r.output;
  const auto j = test::run_cli(
      "plan --topology dgx-h100 --nodes 2 --gpus 16 --seq 1032 --tp 1 --strategy zigzag --json", "2>/dev/null");
  EXPECT_EQ(j.status, 1);
  const nlohmann::json out = nlohmann::json::parse(j.output);
  EXPECT_TRUE(out["best"].is_null());
  EXPECT_GE(out.at("suggestions").size(), 2u);
}

TEST_F(PlanExplain, WarnsOnceAboutTheUncalibratedGpuAndTheUnsourcedNumbers) {
  const auto r = test::run_cli("plan --topology " + topo() + " " + kSmall + " --top 1", "2>&1 >/dev/null");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string warning =
      "warning: the calibration has no measurements for GPU model 'LabGPU-80GB': attention "
      "kernels at 50 % of the 300 TFLOP/s bf16 peak";
  const size_t at = r.output.find(warning);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("warning: the calibration", at + 1), std::string::npos) << "warned twice";
  EXPECT_NE(r.output.find("docs/calibration.md"), std::string::npos);
  // The GPU and the PCIe block cite nothing; the NVSwitch does.
  EXPECT_NE(r.output.find("gives no source for the numbers of gpu (line 3), node.pcie (line 8)"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("gpu_fabric"), std::string::npos);
}

TEST_F(PlanExplain, PlansRecordTheirTopologyFileForSimulateAndRun) {
  const auto planned =
      test::run_cli("plan --topology " + topo() + " " + kSmall + " --scope attention --out " + plan_file(), "2>&1");
  ASSERT_EQ(planned.status, 0) << planned.output;
  std::ifstream in(plan_file());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("file: \"../topo/lab.yaml\""), std::string::npos) << text;

  const auto simulated = test::run_cli("simulate " + plan_file(), "2>&1");
  EXPECT_EQ(simulated.status, 0) << simulated.output;
  EXPECT_NE(simulated.output.find("simulated"), std::string::npos);
  EXPECT_EQ(test::run_cli("run --plan " + plan_file(), "2>&1").status, 0);

  std::string changed = kLab;
  changed.replace(changed.find("latency_us: 0.5"), 15, "latency_us: 0.7");
  write(topo(), changed);
  const auto stale = test::run_cli("simulate " + plan_file(), "2>&1");
  EXPECT_EQ(stale.status, 2);
  EXPECT_NE(stale.output.find("now has hash"), std::string::npos) << stale.output;
  EXPECT_NE(stale.output.find("pass --topology FILE"), std::string::npos);

  fs::remove(topo());
  for (const std::string& command : {"simulate " + plan_file(), "run --plan " + plan_file()}) {
    const auto missing = test::run_cli(command, "2>&1");
    EXPECT_EQ(missing.status, 2) << command;
    EXPECT_NE(missing.output.find("which does not exist; pass --topology FILE"), std::string::npos) << missing.output;
  }
}

TEST_F(PlanExplain, ArgumentErrorsNameTheFlagWhatItAcceptsAndAnExample) {
  const auto typo = test::run_cli("plan --serch auto", "2>&1");
  EXPECT_EQ(typo.status, 2);
  EXPECT_EQ(typo.output,
            "wallfacer plan: error: unknown argument '--serch'; did you mean --search?\n"
            "  `wallfacer plan --help` lists what it takes\n");
  const auto range = test::run_cli("plan --memory-fraction 2", "2>&1");
  EXPECT_EQ(range.status, 2);
  EXPECT_EQ(range.output,
            "wallfacer plan: error: --memory-fraction: expects a number from 0.01 to 1, got 2\n"
            "  --memory-fraction: Share of GPU memory a plan may use\n"
            "  example: wallfacer plan --memory-fraction 0.9\n");
  const auto word = test::run_cli("plan --seq abc", "2>&1");
  EXPECT_EQ(word.status, 2);
  EXPECT_EQ(word.output.substr(0, word.output.find('\n')), "wallfacer plan: error: --seq: expects a number, got 'abc'");
  const auto cut = test::run_cli("plan --zero 1", "2>&1");
  EXPECT_EQ(cut.status, 2);
  EXPECT_NE(cut.output.find("unknown argument '--zero'; did you mean --zero-stage?"), std::string::npos) << cut.output;
  const auto missing = test::run_cli("run", "2>&1");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.output.find("wallfacer run: error: --plan is required"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("example: wallfacer run --plan plan.yaml"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace wallfacer
