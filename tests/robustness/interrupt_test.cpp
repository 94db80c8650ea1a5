// Ctrl-C (SIGINT) during a long search (`plan`) and a long simulation (`simulate`): the command
// stops with exit status 130 and one line on stderr, and leaves no output file, complete or
// partial, nor a temporary one. The child is signalled once it has installed its handler (its
// caught-signal mask in /proc says so), while the work it was given still takes many seconds.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/cli_runner.hpp"

namespace wallfacer {
namespace {

namespace fs = std::filesystem;

// True once `pid` catches SIGINT (bit SIGINT - 1 of SigCgt in /proc/PID/status).
bool catches_sigint(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (SIGINT - 1)) & 1;
  return false;
}

struct Interrupted {
  int status = 0;  // as waitpid reports it
  std::string err;
};

// Runs the CLI with `args`, stderr into `err_path`, and interrupts it once it catches SIGINT.
Interrupted interrupt_cli(const std::vector<std::string>& args, const std::string& err_path) {
  const pid_t child = fork();
  if (child == 0) {
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(err, STDERR_FILENO);
    ::dup2(null, STDOUT_FILENO);
    std::vector<char*> argv{const_cast<char*>(test::cli_binary().c_str())};
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Interrupted result;
  if (child < 0) return result;
  while (!catches_sigint(child) && ::waitpid(child, &result.status, WNOHANG) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(child, SIGINT);
  ::waitpid(child, &result.status, 0);
  std::ifstream in(err_path);
  std::ostringstream text;
  text << in.rdbuf();
  result.err = text.str();
  return result;
}

class Interrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::cli_present());
    dir_ = fs::temp_directory_path() /
           ("wf_interrupt_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  int files_in_out() const {
    int n = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_ / "out"))
      ++n;
    return n;
  }
  fs::path dir_;
};

void expect_clean_stop(const Interrupted& r, const std::string& command) {
  ASSERT_TRUE(WIFEXITED(r.status)) << "killed by signal " << (WIFSIGNALED(r.status) ? WTERMSIG(r.status) : 0);
  EXPECT_EQ(WEXITSTATUS(r.status), 130) << r.err;
  // One line: the command, what happened, and that nothing was written.
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  EXPECT_EQ(r.err.rfind(command + ": interrupted (Ctrl-C)", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("nothing written"), std::string::npos) << r.err;
}

TEST_F(Interrupt, PlanSearchStopsOnCtrlC) {
  // The search of 64 GPUs prices thousands of candidates: many seconds of work.
  const Interrupted r = interrupt_cli({"plan", "--gpus", "64", "--out", path("out/plan.yaml")}, path("err.txt"));
  expect_clean_stop(r, "wallfacer plan");
  EXPECT_EQ(files_in_out(), 0);
}

TEST_F(Interrupt, SimulationStopsOnCtrlC) {
  const auto made =
      test::run_cli("plan --strategy ring --tp 1 --gpus 64 --out " + path("ring64.yaml"), "2>&1 >/dev/null");
  ASSERT_EQ(made.status, 0) << made.output;
  // A 64-rank replay of 32 layers: seconds of SimGrid work before the trace would be written.
  const Interrupted r =
      interrupt_cli({"simulate", path("ring64.yaml"), "--trace", path("out/trace.json")}, path("err.txt"));
  expect_clean_stop(r, "wallfacer simulate");
  EXPECT_EQ(files_in_out(), 0);
}

}  // namespace
}  // namespace wallfacer
