// Hostile and accidental inputs to the YAML readers: alias bombs, deep nesting, binary bytes,
// directories, oversized files and integers past 2^32. Each must be refused quickly with a
// message that says what is wrong, never hang, wrap or exhaust memory.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/input_limits.hpp>
#include <wallfacer/core/yaml_util.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/topology/topology.hpp>

#include "common/compact_topology.hpp"

namespace wallfacer {
namespace {

using test::edit;
constexpr const char* kCompact = test::kCompactTopology;

std::string topology_error(const std::string& text) {
  try {
    Topology::parse(text, "t.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string plan_error(const std::string& text) {
  try {
    parse_plan(text, "p.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The classic "billion laughs": ten levels of ten aliases each, 10^10 nodes once expanded.
std::string alias_bomb() {
  std::string text = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int level = 1; level <= 10; ++level) {
    text += fmt::format("a{}: &a{} [", level, level);
    for (int k = 0; k < 10; ++k)
      text += fmt::format("{}*a{}", k ? ", " : "", level - 1);
    text += "]\n";
  }
  return text;
}

TEST(YamlLimits, AliasBombIsRefusedBeforeTheWalk) {
  const auto start = std::chrono::steady_clock::now();
  const std::string topo = topology_error(alias_bomb());
  const std::string plan = plan_error(alias_bomb());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(topo.find("t.yaml:"), std::string::npos) << topo;
  EXPECT_NE(topo.find("expands to more than"), std::string::npos) << topo;
  EXPECT_NE(topo.find("aliases"), std::string::npos) << topo;
  EXPECT_NE(plan.find("p.yaml:"), std::string::npos) << plan;
  EXPECT_NE(plan.find("expands to more than"), std::string::npos) << plan;
  // Not a time limit on the test: the scan is linear in the 11-line text, so this records that
  // nothing was expanded (the walk took over a minute before).
  RecordProperty("seconds", std::to_string(seconds));
}

TEST(YamlLimits, ModestAliasesStillWork) {
  // An anchor reused a few times is fine: the gpu mapping is named once and aliased.
  std::string text = edit(kCompact, "gpu: {", "gpu: &g {");
  text += "description: x\n";
  EXPECT_EQ(topology_error(text), "");
  const std::string expanded = "x: &x [1, 2]\ny: [*x, *x, *x]\n";
  EXPECT_NO_THROW(yaml::parse(expanded, "e.yaml"));
}

TEST(YamlLimits, ExpansionIsCountedThroughNestedAnchors) {
  // 3 levels of 200 aliases: 8 million leaves, past the budget, though no level alone is large.
  std::string text = "a0: &a0 [x";
  for (int k = 1; k < 200; ++k)
    text += ", x";
  text += "]\n";
  for (int level = 1; level <= 2; ++level) {
    text += fmt::format("a{}: &a{} [", level, level);
    for (int k = 0; k < 200; ++k)
      text += fmt::format("{}*a{}", k ? ", " : "", level - 1);
    text += "]\n";
  }
  EXPECT_THROW(yaml::parse(text, "n.yaml"), InputError);
  try {
    yaml::parse(text, "n.yaml");
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "n.yaml");
    EXPECT_EQ(e.line(), 3);  // the line whose alias crosses the budget
  }
}

TEST(YamlLimits, DeepNestingNamesTheLimit) {
  const std::string deep = "x: " + std::string(10000, '[') + std::string(10000, ']') + "\n";
  const std::string message = topology_error(deep);
  EXPECT_NE(message.find("nest deeper than the limit of"), std::string::npos) << message;
  EXPECT_EQ(message.find("bad file"), std::string::npos) << message;
  const std::string block = [] {
    std::string t;
    for (int i = 0; i < 100; ++i)
      t += std::string(2 * static_cast<size_t>(i), ' ') + "k" + std::to_string(i) + ":\n";
    return t + std::string(200, ' ') + "v\n";
  }();
  EXPECT_NE(topology_error(block).find("nest deeper than the limit of 64 levels"), std::string::npos);
}

TEST(YamlLimits, BinaryInputIsNotText) {
  std::string binary = "name: x\n";
  binary += std::string(
      "\x7f"
      "ELF\x02\x01\x01\x00",
      8);
  const std::string message = topology_error(binary);
  EXPECT_NE(message.find("t.yaml:2: error: not a text YAML file: byte 0x02 at offset 12"), std::string::npos)
      << message;
  EXPECT_NE(topology_error("name: \xff\xfe\n").find("byte 0xff at offset 6"), std::string::npos);
  // Valid UTF-8 (a citation with an accent) is text.
  EXPECT_NO_THROW(yaml::parse("source: \"Ã©cole\"\n", "u.yaml"));
}

TEST(YamlLimits, IntegersPastTwoToThe32AreRefusedNotWrapped) {
  // 4294967298 = 2^32 + 2 used to read as 2.
  struct Case {
    std::string from, to, field;
  };
  const Case cases[] = {
      {"nodes: 2", "nodes: 4294967298", "'nodes' must be at most 65536, got 4294967298"},
      {"nodes: 2", "nodes: 1000000000000", "'nodes' must be at most 65536, got 1000000000000"},
      {"gpus: 2", "gpus: 4294967298", "'gpus' must be at most 4096, got 4294967298"},
      {"count: 1,", "count: 4294967297,", "'count' must be at most 4096, got 4294967297"},
  };
  for (const Case& c : cases) {
    const std::string message = topology_error(edit(kCompact, c.from, c.to));
    EXPECT_NE(message.find(c.field), std::string::npos) << c.to << ": " << message;
  }
  const std::string explicit_form = R"(name: ex
gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, hbm_GBps: 1}
devices:
  - {name: g0, kind: gpu, node: 4294967296}
  - {name: sw, kind: pcie_switch, node: 0}
links:
  - {ends: [g0, sw], kind: pcie, bandwidth_GBps: 16, latency_us: 0.5}
)";
  EXPECT_NE(topology_error(explicit_form).find("t.yaml:4: error: 'node' must be at most 65535, got 4294967296"),
            std::string::npos)
      << topology_error(explicit_form);
}

class InputFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("wf_limits_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

std::string load_error(const std::string& path) {
  try {
    Topology::load(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST_F(InputFiles, DirectoryIsNamedAsOne) {
  const std::string message = load_error(dir_.string());
  EXPECT_EQ(message, dir_.string() + ": error: is a directory, not a file");
  EXPECT_THROW(read_plan_file(dir_.string()), InputError);
}

TEST_F(InputFiles, OversizedFileIsRefusedBeforeReading) {
  const auto path = dir_ / "big.yaml";
  {
    std::ofstream out(path);
    out << "name: x\n";
  }
  // A sparse file: its size is what the limit looks at, so no 65 MiB need be written.
  std::filesystem::resize_file(path, limits::kDefaultMaxInputBytes + 1);
  const std::string message = load_error(path.string());
  EXPECT_NE(message.find("is larger than the input limit of 64 MiB"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(limits::kDefaultMaxInputBytes + 1) + " bytes"), std::string::npos);
  setenv("WALLFACER_MAX_INPUT_MIB", "1", 1);
  std::filesystem::resize_file(path, (1 << 20) + 1);
  EXPECT_NE(load_error(path.string()).find("limit of 1 MiB"), std::string::npos);
  unsetenv("WALLFACER_MAX_INPUT_MIB");
}

TEST_F(InputFiles, StreamsAreBoundedToo) {
  setenv("WALLFACER_MAX_INPUT_MIB", "1", 1);
  // /dev/zero has no size: the chunked read stops at the limit instead of reading forever.
  const std::string message = load_error("/dev/zero");
  unsetenv("WALLFACER_MAX_INPUT_MIB");
  EXPECT_EQ(message,
            "/dev/zero: error: a stream is larger than the input limit of 1 MiB; set "
            "WALLFACER_MAX_INPUT_MIB to raise it");
}

}  // namespace
}  // namespace wallfacer
