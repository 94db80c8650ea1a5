// Reads the command blocks of a markdown document and the expectations written next to them
// (the convention is in docs/doc-tests.md). Parsing only: nothing here runs a command, so the
// harness's self-test can check every rule on in-memory text.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace wallfacer::doc_commands {

struct Command {
  int line = 0;      // where the command starts in the document
  std::string text;  // continuation lines joined
};

enum class CheckKind {
  kMatches,  // $N ~ REGEX: some output line matches
  kNoMatch,  // $N !~ REGEX: no output line matches
  kExit,     // $N exit S
  kTimeout,  // $N timeout SECONDS
};

struct Check {
  int line = 0;     // the directive's line
  int command = 0;  // 1-based index of the command in its block
  CheckKind kind = CheckKind::kMatches;
  std::string pattern;  // kMatches, kNoMatch
  int value = 0;        // kExit: status, kTimeout: seconds
};

struct Block {
  int line = 0;  // the opening fence
  std::vector<Command> setup;
  std::vector<Command> commands;
  std::vector<Check> checks;
  bool expected = false;               // an <!-- expect --> comment follows the block
  std::optional<std::string> not_run;  // the reason of <!-- not-run: reason -->
};

struct Doc {
  std::string name;                   // shown in messages: README.md, docs/cli.md
  std::vector<Block> blocks;          // command blocks only, in document order
  std::vector<std::string> problems;  // "name:line: what is wrong"; a doc with any fails
};

// The command blocks of `text` with their checks, and every breach of the convention.
Doc parse_doc(const std::string& name, const std::string& text);

// The lines of `text` without their line ends (a trailing '\r' dropped too).
std::vector<std::string> split_lines(const std::string& text);

// The checks of `block` that apply to command `index` (1-based).
std::vector<Check> checks_of(const Block& block, int index);

}  // namespace wallfacer::doc_commands
