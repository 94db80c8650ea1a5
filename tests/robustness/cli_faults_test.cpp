// The command line under bad inputs and failing outputs: a plan written to a full device, a
// failed write that must leave the previous file, NaN in .npy inputs, non-finite flags, a plan
// for another topology given to `run`, and directories where files are expected.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <wallfacer/core/atomic_file.hpp>
#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/npy.hpp>
#include "common/cli_runner.hpp"

namespace wallfacer {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

// A ring plan small enough for the threads backend: 4 ranks, 64 tokens, 4 heads of 16.
constexpr const char* kPlanFlags = "plan --strategy ring --gpus 4 --seq 64 --heads 4 --kv-heads 4 --head-dim 16";

class CliFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::cli_present());
    dir_ = fs::temp_directory_path() /
           ("wf_cli_faults_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string make_plan(const std::string& name) {
    const auto r = run_cli(std::string(kPlanFlags) + " --out " + path(name), "2>&1");
    EXPECT_EQ(r.status, 0) << r.output;
    return path(name);
  }
  fs::path dir_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_F(CliFaults, PlanToAFullDeviceFails) {
  const auto r = run_cli(std::string(kPlanFlags) + " --out /dev/full", "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("/dev/full: error: cannot write the file: write failed: No space left on device"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("wrote "), std::string::npos) << r.output;
}

TEST_F(CliFaults, FailedWriteLeavesThePreviousFile) {
  const std::string plan = make_plan("plan.yaml");
  const std::string before = read_all(plan);
  ASSERT_FALSE(before.empty());
  // A writer that fails halfway, as a full disk or a crash in the middle of a plan would.
  EXPECT_THROW(write_file_atomically(plan,
                                     [](std::ostream& out) {
                                       out << "format_version: 2\nstrat";
                                       throw std::runtime_error("interrupted");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read_all(plan), before);
  // No temporary file is left next to it.
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir_))
    entries += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(entries, 1);
  // A successful rewrite replaces it whole.
  write_file_atomically(plan, [](std::ostream& out) { out << "new\n"; });
  EXPECT_EQ(read_all(plan), "new\n");
}

TEST_F(CliFaults, CtrlCDuringAWriteLeavesThePreviousFileAndNoTemporary) {
  const std::string plan = make_plan("plan.yaml");
  const std::string before = read_all(plan);
  // A child process is interrupted halfway through rewriting the plan.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    write_file_atomically(plan, [](std::ostream& out) {
      out << "format_version: 2\nstrat";
      out.flush();
      raise(SIGINT);
      out << "never\n";
    });
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  EXPECT_EQ(read_all(plan), before);
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir_))
    entries += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(entries, 1);
}

TEST_F(CliFaults, WritingOverADirectoryIsRefused) {
  fs::create_directories(path("out.yaml"));
  const auto r = run_cli(std::string(kPlanFlags) + " --out " + path("out.yaml"), "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("out.yaml: error: is a directory, not a file"), std::string::npos) << r.output;
}

TEST_F(CliFaults, NonFiniteToleranceIsNamed) {
  const std::string plan = make_plan("plan.yaml");
  for (const char* value : {"nan", "inf"}) {
    const auto r = run_cli("run --backend local --check --plan " + plan + " --tolerance " + value, "2>&1");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(std::string("not a finite number: ") + value), std::string::npos) << r.output;
  }
  const auto small = run_cli("run --backend local --check --plan " + plan + " --tolerance 1e-3", "2>&1");
  EXPECT_EQ(small.status, 0) << small.output;
  const auto zero = run_cli("run --backend local --check --plan " + plan + " --tolerance 0", "2>&1");
  EXPECT_EQ(zero.status, 2) << zero.output;
}

void write_inputs(const fs::path& dir, double poison, int64_t at) {
  fs::create_directories(dir);
  const std::vector<int64_t> shape{1, 64, 4, 16};
  for (const char* name : {"q.npy", "k.npy", "v.npy", "do.npy"}) {
    runtime::Tensor<float> t(shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      t[i] = static_cast<float>(std::sin(0.1 * static_cast<double>(i)));
    if (std::string(name) == "k.npy") t[at] = static_cast<float>(poison);
    runtime::write_npy((dir / name).string(), t);
  }
}

TEST_F(CliFaults, NonFiniteInputsAreRefusedNamingTheFile) {
  const std::string plan = make_plan("plan.yaml");
  // Element 1 * 4 * 16 + 2 * 16 + 5 = 101 is [0, 1, 2, 5].
  write_inputs(dir_ / "nan", NAN, 101);
  auto r = run_cli("run --backend local --check --plan " + plan + " --load " + path("nan"), "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("k.npy: error: element [0, 1, 2, 5] is nan; inputs must be finite numbers"),
            std::string::npos)
      << r.output;
  write_inputs(dir_ / "inf", -INFINITY, 0);
  r = run_cli("run --backend local --check --plan " + plan + " --load " + path("inf"), "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("element [0, 0, 0, 0] is -inf"), std::string::npos) << r.output;
  write_inputs(dir_ / "good", 0.5, 0);
  r = run_cli("run --backend local --check --plan " + plan + " --load " + path("good"), "2>&1");
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST_F(CliFaults, RunRefusesAPlanForAnotherTopology) {
  const std::string plan = make_plan("plan.yaml");
  std::string text = read_all(plan);
  const size_t at = text.find("hash: \"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at + 7, 16, "0123456789abcdef");
  std::ofstream(path("edited.yaml")) << text;
  const auto r = run_cli("run --backend local --plan " + path("edited.yaml"), "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("plan was made for topology 'dgx-h100' with hash 0123456789abcdef"), std::string::npos)
      << r.output;
  const auto simulate = run_cli("simulate " + path("edited.yaml"), "2>&1");
  EXPECT_EQ(simulate.status, 2) << simulate.output;
}

TEST_F(CliFaults, DirectoriesAreNamedAsDirectories) {
  auto r = run_cli("run --backend local --plan " + dir_.string(), "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(dir_.string() + ": error: is a directory, not a file"), std::string::npos) << r.output;
  r = run_cli("topo show " + dir_.string(), "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is a directory, not a file"), std::string::npos) << r.output;
}

TEST_F(CliFaults, NpyHeaderClaimingTerabytesIsRefusedBeforeAllocating) {
  // A 128-byte file whose header claims 10^6 x 10^6 x 10^3 float32 (4 PB).
  const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000, 1000), }";
  std::string dict = header;
  dict.append((64 - (10 + dict.size() + 1) % 64) % 64, ' ');
  dict.push_back('\n');
  std::string bytes = "\x93NUMPY";
  bytes += std::string{'\x01', '\x00', static_cast<char>(dict.size() & 0xff), static_cast<char>(dict.size() >> 8)};
  bytes += dict;
  bytes += std::string(16, '\0');
  std::ofstream(path("huge.npy"), std::ios::binary) << bytes;
  try {
    runtime::read_npy(path("huge.npy"));
    FAIL() << "read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated: shape [1000000, 1000000, 1000] of float32 needs "
                                         "4000000000000000 data bytes, the file has 16"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CliFaults, RunRefusesAPlanThatDoesNotFitInMemoryBeforeAllocating) {
  // A plan `plan` writes for GPUs: 4M tokens on 4 ranks of a one-layer model. Its fp64 check
  // alone needs a 4M x 4M score matrix (128 TiB), more than any machine has.
  const auto made = run_cli(
      "plan --strategy ring --gpus 4 --tp 1 --seq 4194304 --heads 8 --kv-heads 8 --head-dim 64 "
      "--hidden 512 --layers 1 --ffn 1024 --vocab 1000 --out " +
          path("big.yaml"),
      "2>&1");
  ASSERT_EQ(made.status, 0) << made.output;
  const auto r = run_cli("run --backend local --check --plan " + path("big.yaml"), "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("big.yaml: error: running this plan needs about"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fp64 reference 128.1 TiB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of memory is available here (MemAvailable)"), std::string::npos) << r.output;
}

TEST_F(CliFaults, HugeSizesAreRefusedBeforeAllocating) {
  auto r = run_cli("plan --seq 4611686018427387904", "2>&1");  // 2^62 tokens
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("'seq' must be at most 2147483647, got 4611686018427387904"), std::string::npos) << r.output;
  r = run_cli("plan --gpus 1000000000000", "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  r = run_cli("topo show dgx-h100 --nodes 1000000000", "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--nodes must be at most 65536"), std::string::npos) << r.output;
  // A 10^12-GPU cluster written out in a topology file.
  std::ofstream(path("huge.yaml")) << "name: huge\n"
                                      "gpu: {model: X, peak_bf16_tflops: 1, peak_fp16_tflops: 1, memory_GiB: 1, "
                                      "hbm_GBps: 1}\n"
                                      "nodes: 1000000000000\n"
                                      "node: {gpus: 1}\n";
  r = run_cli("topo show " + path("huge.yaml"), "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("huge.yaml:3: error: 'nodes' must be at most 65536, got 1000000000000"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace wallfacer

namespace wallfacer {
namespace {

// A tensor, pipeline or data parallel degree, or a count of virtual stages, that cannot split the
// GPUs, the heads, the layers or the batch is named, not answered by an empty ranking.
TEST(CliDegrees, DegreesThatDoNotDivideAreNamed) {
  struct Case {
    const char* flags;
    const char* message;
  };
  for (const Case& c :
       {Case{"--gpus 16 --pp 3", "--pp: error: 3 pipeline stages do not divide the 16 GPUs"},
        Case{"--gpus 16 --pp 4 --tp 8",
             "--pp: error: 4 pipeline stages of 8 tensor slices do not "
             "divide the 16 GPUs"},
        Case{"--gpus 16 --pp 16 --tp 1 --layers 30",
             "--pp: error: 16 pipeline stages do not divide the model's 30 layers"},
        Case{"--gpus 12 --tp 8", "--tp: error: tensor parallel degree 8 does not divide the 12 GPUs"},
        Case{"--gpus 16 --pp x", "--pp: error: expects 'auto' or a degree of at least 1, got 'x'"},
        // Llama-3-8B has 8 kv heads: 16 tensor slices cannot each take whole heads.
        Case{"--gpus 16 --tp 16",
             "--tp: error: tensor parallel degree 16 does not divide the model's 32 heads and 8 kv "
             "heads (each tensor slice takes whole heads); degrees that do on 16 GPUs: 1, 2, 4, 8"},
        Case{"--gpus 12 --tp 3 --model gpt-7b",
             "--tp: error: tensor parallel degree 3 does not divide the model's 32 heads and 32 kv "
             "heads (each tensor slice takes whole heads); degrees that do on 12 GPUs: 1, 2, 4"},
        Case{"--gpus 16 --dp 2",
             "--dp: error: data parallel degree 2 needs a batch that splits into 2 replicas of whole "
             "sequences, but the batch is 1 sequence (try --batch 2)"},
        Case{"--gpus 16 --dp 4 --batch 6",
             "--dp: error: data parallel degree 4 needs a batch that splits into 4 replicas of whole "
             "sequences, but the batch is 6 sequences (try --batch 8)"},
        Case{"--gpus 16 --dp 3 --batch 3", "--dp: error: data parallel degree 3 does not divide the 16 GPUs"},
        Case{"--gpus 16 --dp 4 --batch 4 --tp 8 --pp 1",
             "--dp: error: data parallel degree 4 with 8 tensor slices does not divide the 16 GPUs"},
        Case{"--gpus 16 --dp 4 --batch 4 --tp 2 --pp 4",
             "--dp: error: data parallel degree 4 with 2 tensor slices and 4 pipeline stages does not "
             "divide the 16 GPUs"},
        Case{"--gpus 16 --vpp 2 --pp 1",
             "--vpp: error: 2 virtual stages per pipeline rank need pipeline stages, and the search "
             "tries none (--pp 1)"},
        // One node: --pp auto tries a single stage only.
        Case{"--gpus 8 --vpp 2", "--vpp: error: 2 virtual stages per pipeline rank need pipeline stages"},
        Case{"--gpus 64 --vpp 3",
             "--vpp: error: 3 virtual stages per pipeline rank do not divide the model's 32 layers "
             "over any of the pipeline degrees searched (2, 4, 8)"},
        Case{"--gpus 16 --vpp 2 --scope attention",
             "--vpp: error: 2 virtual stages per pipeline rank need a whole-step search (--scope "
             "step)"},
        Case{"--gpus 16 --pp 2 --scope attention",
             "--pp: error: 2 pipeline stages split the model's layers, and one attention layer (--scope attention) "
             "has none to split"},
        Case{"--microbatches 0", "wallfacer plan: error: --microbatches: must be at least 1 (got 0)"}}) {
    const auto r = test::run_cli(std::string("plan ") + c.flags, "2>&1");
    EXPECT_EQ(r.status, 2) << c.flags << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.flags << ": " << r.output;
  }
}

}  // namespace
}  // namespace wallfacer

namespace wallfacer {
namespace {

// A nested command's errors name it whole, and a default that describes where the value comes
// from is not offered as the example.
TEST(CliDegrees, NestedCommandsAreNamedWhole) {
  const auto r = test::run_cli("topo import /dev/null --nic-Gbps 0", "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("wallfacer topo import: error: --nic-Gbps: must be greater than 0 (got 0)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("example: wallfacer topo import --nic-Gbps 0.5"), std::string::npos) << r.output;
}

// An output path that cannot be written is refused before the search or the replay, not after it.
TEST(CliDegrees, UnwritableOutputsAreRefusedFirst) {
  auto r = test::run_cli("plan --gpus 16 --out /nonexistent-dir/plan.yaml", "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent-dir/plan.yaml: error: cannot write the file: creating a file in its "
                          "directory failed: No such file or directory"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("whole training step"), std::string::npos) << "searched first:\n" << r.output;
  r = test::run_cli("simulate plan.yaml --trace /nonexistent-dir/trace.json", "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent-dir/trace.json: error: cannot write the file"), std::string::npos) << r.output;
}

// A required flag left unset because its name was misspelt: the misspelt word is what is named.
// Where it is simply missing, the example offers a value it takes.
TEST(CliDegrees, RequiredFlagsNameTheMisspeltOneAndAValue) {
  auto r = test::run_cli("export plan.yaml --target megatron", "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("wallfacer export: error: unknown argument '--target'; did you mean --to?"),
            std::string::npos)
      << r.output;
  // The word a flag's description starts with names it too (--seq: "Sequence length N in tokens").
  r = test::run_cli("plan --sequence 4096", "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("unknown argument '--sequence'; did you mean --seq?"), std::string::npos) << r.output;
  r = test::run_cli("export plan.yaml", "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("wallfacer export: error: --to is required"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("example: wallfacer export --to megatron\n"), std::string::npos) << r.output;
  r = test::run_cli("export --to megatron", "2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("example: wallfacer export plan.yaml\n"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace wallfacer
