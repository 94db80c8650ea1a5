// Runs one shell command line for the documentation tests: in a given directory and environment,
// stdout and stderr captured together, stdin empty, and killed (with everything it started) when
// it runs past its time, so that a hanging command fails its test instead of hanging ctest.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace wallfacer::doc_commands {

struct ShellResult {
  int status = -1;  // exit status; 128 + N when killed by signal N; -1 when it could not start
  bool timed_out = false;
  double seconds = 0;
  std::string output;  // stdout and stderr interleaved as written
  std::string error;   // why the command could not start
};

// Runs `command` with bash -c in `directory` with exactly the variables `environment`
// ("NAME=value"). The command gets its own process group; past `timeout_seconds` the group is sent
// SIGTERM, and SIGKILL five seconds later. Whatever the group leaves running when the shell exits
// is killed as well.
ShellResult run_shell(const std::string& command, const std::filesystem::path& directory,
                      const std::vector<std::string>& environment, double timeout_seconds);

}  // namespace wallfacer::doc_commands
