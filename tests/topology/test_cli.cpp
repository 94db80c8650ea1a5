// `wallfacer topo check|show`: runs the built binary on every preset and on bad input, and
// compares its JSON with the library's own answers. Fails when the binary is not built.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include <wallfacer/topology/topology.hpp>
#include "common/cli_runner.hpp"

namespace wallfacer {
namespace {

using test::CliResult;

CliResult run(const std::string& args, const std::string& streams) {
  return test::run_cli(args, streams);
}

class TopoCommand : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(test::cli_present()); }
};

TEST_F(TopoCommand, ShowJsonAgreesWithTheLibraryForEveryPreset) {
  for (const std::string& name : Topology::preset_names()) {
    const CliResult result = run("topo show " + name + " --json", "2>/dev/null");
    ASSERT_EQ(result.status, 0) << name;
    const nlohmann::json json = nlohmann::json::parse(result.output);
    const Topology topo = Topology::load(name);
    EXPECT_EQ(json["name"], topo.name());
    EXPECT_EQ(json["gpus"], topo.num_gpus()) << name;
    EXPECT_EQ(json["nodes"], topo.num_nodes()) << name;
    EXPECT_EQ(json["gpu"]["model"], topo.gpu().name) << name;
    EXPECT_EQ(json["content_hash"], topo.content_hash()) << name;
    EXPECT_DOUBLE_EQ(json["bisection_GBps"].get<double>(), topo.bisection_bandwidth_GBps()) << name;
    int links = 0;
    for (const auto& c : json["link_classes"])
      links += c["count"].get<int>();
    EXPECT_EQ(links, static_cast<int>(topo.links().size())) << name;
    // The best pair inside node 0 has the highest route bandwidth among node 0's pairs.
    double best = 0;
    for (int a = 0; a < topo.num_gpus(); ++a)
      for (int b = 0; b < topo.num_gpus(); ++b)
        if (a != b && topo.node_of_gpu(a) == 0 && topo.node_of_gpu(b) == 0)
          best = std::max(best, topo.route(a, b).bottleneck_GBps);
    EXPECT_DOUBLE_EQ(json["intra_node"]["best"]["bandwidth_GBps"].get<double>(), best) << name;
    EXPECT_EQ(json["inter_node"]["best"].is_null(), topo.num_nodes() == 1) << name;
  }
}

TEST_F(TopoCommand, CheckPrintsTheCountsAndHonoursNodes) {
  CliResult result = run("topo check dgx-h100", "2>&1");
  EXPECT_EQ(result.status, 0);
  EXPECT_EQ(result.output, "dgx-h100: ok: 64 GPUs in 8 nodes\n");
  result = run("topo check summit --nodes 16", "2>&1");
  EXPECT_EQ(result.status, 0);
  EXPECT_EQ(result.output, "summit: ok: 96 GPUs in 16 nodes\n");
  result = run("topo check dgx-h100 --nodes 1", "2>&1");
  EXPECT_EQ(result.status, 0);
  EXPECT_EQ(result.output, "dgx-h100: ok: 8 GPUs in 1 node\n");
}

TEST_F(TopoCommand, ShowTextEndsWithTheHash) {
  const CliResult result = run("topo show pcie-8gpu", "2>/dev/null");
  EXPECT_EQ(result.status, 0);
  EXPECT_NE(result.output.find("content hash: " + Topology::load("pcie-8gpu").content_hash()), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("bisection bandwidth: 16 GB/s per direction"), std::string::npos) << result.output;
}

TEST_F(TopoCommand, BadInputExitsWithStatusTwoAndTheMessage) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "wallfacer-topo-cli-bad.yaml";
  {
    std::ofstream out(path);
    out << "name: bad\ngpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}\n"
           "nodes: 0\nnode: {gpus: 1}\n";
  }
  CliResult result = run("topo check " + path.string(), "2>&1");
  EXPECT_EQ(result.status, 2);
  EXPECT_EQ(result.output, path.string() + ":3: error: 'nodes' must be at least 1, got 0\n");
  std::filesystem::remove(path);

  result = run("topo check lab-mixed --nodes 3", "2>&1");
  EXPECT_EQ(result.status, 2);
  EXPECT_NE(result.output.find("--nodes cannot resize an explicit-form topology"), std::string::npos) << result.output;
  result = run("topo show no-such-preset", "2>&1");
  EXPECT_EQ(result.status, 2);
  EXPECT_NE(result.output.find("no such file, and no preset of that name"), std::string::npos) << result.output;
  result = run("topo check dgx-h100 --nodes 0", "2>&1");
  EXPECT_EQ(result.status, 2);
  EXPECT_EQ(result.output, "error: --nodes must be at least 1, got 0\n");
}

TEST_F(TopoCommand, HelpListsThePresetsAndOptions) {
  const CliResult result = run("topo show --help", "2>&1");
  EXPECT_EQ(result.status, 0);
  EXPECT_NE(result.output.find("--nodes"), std::string::npos);
  EXPECT_NE(result.output.find("--json"), std::string::npos);
  EXPECT_NE(result.output.find("dgx-h100"), std::string::npos);
}

}  // namespace
}  // namespace wallfacer
