// Runs the command blocks of a parsed document as docs/doc-tests.md describes: in order, in one
// fresh directory, `wallfacer` and `build/bin/wallfacer` naming the binary under test, and
// reports every expectation that does not hold with the command's place and its output.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "doc_commands/doc_blocks.hpp"

namespace wallfacer::doc_commands {

struct DocSetting {
  std::filesystem::path source_dir;  // exported to the commands as WALLFACER_SOURCE_DIR
  std::filesystem::path binary_dir;  // the build tree; its bin/wallfacer is the binary under test
  double timeout_seconds = 300;      // per command, unless `$N timeout S` says otherwise
};

struct CommandTime {
  std::string where;  // README.md:34
  double seconds = 0;
};

struct DocOutcome {
  std::vector<std::string> failures;  // one complete message each
  std::vector<std::string> not_run;   // "README.md:21: reason"
  std::vector<CommandTime> times;     // setup lines and commands that ran
  std::filesystem::path directory;    // where they ran; kept when something failed
};

// Runs every block of `doc` (whose problems must be empty) and stops at the first command whose
// expectations do not hold: later commands usually need its results.
DocOutcome run_doc(const Doc& doc, const DocSetting& setting);

// True when `command` starts MPI ranks (mpirun or mpiexec, after any VAR=value words); such a
// command needs a binary built with the CPU/MPI runtime.
bool starts_mpi_ranks(const std::string& command);

}  // namespace wallfacer::doc_commands
