// Runs the built `wallfacer` binary from a test and captures its output and exit status, for the
// command-line tests. Their targets depend on the binary, so a missing one is a failure (see
// cli_present), never a reason to skip.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace wallfacer::test {

inline const std::string& cli_binary() {
  static const std::string path = std::string(WALLFACER_BINARY_DIR) + "/bin/wallfacer";
  return path;
}

inline bool cli_built() {
  return std::filesystem::exists(cli_binary());
}

// ASSERT_TRUE(cli_present()) in a test's SetUp: a skipped command-line test would pass a build
// whose binary is missing.
inline ::testing::AssertionResult cli_present() {
  if (cli_built()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << cli_binary() << " is not built (build the `wallfacer` target)";
}

struct CliResult {
  int status = -1;  // exit status; -1 when the command did not exit normally
  std::string output;
};

// Runs `wallfacer ARGS` through the shell; `streams` picks what is captured ("2>/dev/null" for
// stdout only, "2>&1" for both).
inline CliResult run_cli(const std::string& args, const std::string& streams) {
  const std::string command = cli_binary() + " " + args + " " + streams;
  CliResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace wallfacer::test
