// The documentation harness tested on in-memory markdown: what counts as a command, how
// annotations attach, which breaches of the convention are reported, and that a failing
// expectation, a wrong exit status and a hanging command each fail. Without this a parser that
// found no commands would let every document pass.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "doc_commands/doc_blocks.hpp"
#include "doc_commands/doc_run.hpp"

namespace wallfacer::doc_commands {
namespace {

Doc parse(const std::string& markdown) {
  return parse_doc("in-memory", markdown);
}

// Runs `markdown`, which must be well formed, as a document.
DocOutcome run(const std::string& markdown) {
  const Doc doc = parse(markdown);
  for (const std::string& problem : doc.problems)
    ADD_FAILURE() << problem;
  return run_doc(doc, {WALLFACER_SOURCE_DIR, WALLFACER_BINARY_DIR});
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines)
    text += line + "\n";
  return text;
}

// A failed run keeps its directory for a look; these failures are on purpose.
void discard(const DocOutcome& outcome) {
  std::error_code ignored;
  std::filesystem::remove_all(outcome.directory, ignored);
}

bool mentions(const std::vector<std::string>& lines, const std::string& part) {
  return joined(lines).find(part) != std::string::npos;
}

TEST(DocParser, DollarLinesAreCommandsAndContinuationsAreJoined) {
  const Doc doc = parse(
      "Text.\n\n```\n$ wallfacer plan --gpus 16 \\\n      --out p.yaml   # comment\nshown output\n\n$ ls\n```\n"
      "<!-- expect\n$1 ~ wrote\n$2 ~ p\\.yaml\n$2 exit 0\n-->\n");
  ASSERT_TRUE(doc.problems.empty()) << joined(doc.problems);
  ASSERT_EQ(doc.blocks.size(), 1u);
  const Block& block = doc.blocks[0];
  EXPECT_EQ(block.line, 3);
  ASSERT_EQ(block.commands.size(), 2u);
  EXPECT_EQ(block.commands[0].line, 4);
  EXPECT_EQ(block.commands[0].text, "wallfacer plan --gpus 16 --out p.yaml   # comment");
  EXPECT_EQ(block.commands[1].line, 8);
  ASSERT_EQ(block.checks.size(), 3u);
  EXPECT_EQ(block.checks[1].command, 2);
  EXPECT_EQ(block.checks[1].line, 12);
  EXPECT_EQ(block.checks[1].pattern, "p\\.yaml");
  EXPECT_EQ(block.checks[2].kind, CheckKind::kExit);
}

TEST(DocParser, OrdinaryBlocksAndWhatIsInsideThemAreNotCommands) {
  const Doc doc = parse(
      "```yaml\nname: x\n<!-- expect\n$1 ~ x\n-->\n```\n\n````\n```\n$ inside a longer fence\n```\n````\n"
      "<!-- not-run: fences nest -->\n\n    $ an indented code block\n    <!-- expect -->\n");
  EXPECT_TRUE(doc.problems.empty()) << joined(doc.problems);
  ASSERT_EQ(doc.blocks.size(), 1u);  // the four-backtick block, with its one command
  EXPECT_EQ(doc.blocks[0].commands.size(), 1u);
  EXPECT_EQ(doc.blocks[0].not_run, "fences nest");
}

TEST(DocParser, MarkedBlocksRunEveryLineAndSetupRunsFirst) {
  const Doc doc = parse(
      "<!-- setup\n# made before the block\necho seed > s.txt\n-->\n<!-- commands -->\n```\ncat s.txt\n\n"
      "# a comment\nwc -c \\\n  s.txt\n```\n\n<!-- expect\n$1 ~ seed\n$2 ~ 5\n-->\n");
  ASSERT_TRUE(doc.problems.empty()) << joined(doc.problems);
  ASSERT_EQ(doc.blocks.size(), 1u);
  const Block& block = doc.blocks[0];
  ASSERT_EQ(block.setup.size(), 1u);
  EXPECT_EQ(block.setup[0].text, "echo seed > s.txt");
  EXPECT_EQ(block.setup[0].line, 3);
  ASSERT_EQ(block.commands.size(), 2u);
  EXPECT_EQ(block.commands[1].text, "wc -c s.txt");
}

TEST(DocParser, ACommandBlockWithoutExpectationsIsAProblem) {
  const Doc doc = parse("# T\n\n```\n$ wallfacer plan\n```\n\nMore text.\n");
  ASSERT_EQ(doc.problems.size(), 1u);
  EXPECT_TRUE(mentions(doc.problems, "in-memory:3: the command block has no <!-- expect")) << joined(doc.problems);
  const Doc marked = parse("<!-- commands -->\n```\nwallfacer plan\n```\n");
  EXPECT_TRUE(mentions(marked.problems, "in-memory:2: the command block has no")) << joined(marked.problems);
}

TEST(DocParser, EveryCommandNeedsAnOutputPattern) {
  const Doc doc = parse("```\n$ a\n$ b\n$ c\n```\n<!-- expect\n$1 ~ x\n$2 exit 3\n-->\n");
  ASSERT_EQ(doc.problems.size(), 2u) << joined(doc.problems);
  EXPECT_TRUE(mentions(doc.problems, "in-memory:3: command $2 has no output pattern"));
  EXPECT_TRUE(mentions(doc.problems, "in-memory:4: command $3 has no output pattern"));
}

TEST(DocParser, MalformedDirectivesAreProblemsAtTheirLine) {
  const Doc doc = parse(
      "```\n$ a\n```\n<!-- expect\n$1 ~ (unclosed\n$2 ~ x\n$1 exit 300\n$1 timeout 0\n$1 matches x\n$1 ~\n$1 ~ ok\n"
      "# a comment line\n-->\n");
  const std::string all = joined(doc.problems);
  EXPECT_NE(all.find("in-memory:5: bad regular expression /(unclosed/"), std::string::npos) << all;
  EXPECT_NE(all.find("in-memory:6: $2 names no command: the block has 1"), std::string::npos) << all;
  EXPECT_NE(all.find("in-memory:7: exit takes a whole number from 0 to 255"), std::string::npos) << all;
  EXPECT_NE(all.find("in-memory:8: timeout takes a whole number from 1"), std::string::npos) << all;
  EXPECT_NE(all.find("in-memory:9: not a directive"), std::string::npos) << all;
  EXPECT_NE(all.find("in-memory:10: the pattern is empty"), std::string::npos) << all;
  EXPECT_EQ(doc.problems.size(), 6u) << all;
}

TEST(DocParser, AnnotationsAwayFromTheirBlockAreProblems) {
  const Doc doc = parse("```\n$ a\n```\nA paragraph.\n<!-- expect\n$1 ~ a\n-->\n\n<!-- commands -->\nText.\n");
  EXPECT_TRUE(mentions(doc.problems, "in-memory:5: the annotation is not next to a fenced block"))
      << joined(doc.problems);
  EXPECT_TRUE(mentions(doc.problems, "in-memory:9: the annotation is not next to a fenced block"));
  EXPECT_TRUE(mentions(doc.problems, "in-memory:1: the command block has no <!-- expect"));
  const Doc both = parse("```\n$ a\n```\n<!-- expect\n$1 ~ a\n-->\n<!-- not-run:  -->\n");
  EXPECT_TRUE(mentions(both.problems, "must say why")) << joined(both.problems);
  EXPECT_TRUE(mentions(both.problems, "both expected and not run"));
  EXPECT_TRUE(mentions(parse("```\n$ a\n").problems, "in-memory:1: the fenced block is never closed"));
  EXPECT_TRUE(mentions(parse("```\n$ a\n```\n<!-- expect\n$1 ~ a\n").problems, "never closed with -->"));
}

TEST(DocRunner, PassingAndFailingExpectations) {
  const DocOutcome good =
      run("```\n$ echo hello; echo world >&2\n```\n<!-- expect\n$1 ~ ^hel+o$\n$1 ~ ^world$\n"
          "$1 !~ goodbye\n-->\n");
  EXPECT_TRUE(good.failures.empty()) << joined(good.failures);
  EXPECT_EQ(good.times.size(), 1u);
  const DocOutcome bad =
      run("```\n$ echo hello\n$ echo never\n```\n<!-- expect\n$1 ~ ^goodbye$\n$1 !~ ell\n"
          "$2 ~ never\n-->\n");
  ASSERT_EQ(bad.failures.size(), 1u);
  const std::string& message = bad.failures[0];
  EXPECT_NE(message.find("in-memory:2: $ echo hello"), std::string::npos) << message;
  EXPECT_NE(message.find("no output line matches /^goodbye$/ (in-memory:6)"), std::string::npos) << message;
  EXPECT_NE(message.find("output line 1 matches /ell/, which must not appear (in-memory:7)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("  | hello"), std::string::npos) << message;
  EXPECT_NE(message.find("the 1 later command(s) of in-memory were not run"), std::string::npos) << message;
  EXPECT_EQ(bad.times.size(), 1u);  // the second command did not run
  discard(bad);
}

TEST(DocRunner, ExitStatusIsZeroUnlessStated) {
  const std::string block = "```\n$ echo oops; exit 3\n```\n<!-- expect\n$1 ~ oops\n";
  EXPECT_TRUE(run(block + "$1 exit 3\n-->\n").failures.empty());
  const DocOutcome wrong = run(block + "-->\n");
  ASSERT_EQ(wrong.failures.size(), 1u);
  EXPECT_NE(wrong.failures[0].find("exit status 3, expected 0"), std::string::npos) << wrong.failures[0];
  discard(wrong);
}

TEST(DocRunner, CommandsShareOneFreshDirectoryAndNameTheBinaryUnderTest) {
  const DocOutcome outcome = run(
      "<!-- setup\necho seeded > s.txt\n-->\n```\n$ ls | grep -v -e build -e s.txt | wc -l\n$ cat s.txt\n```\n"
      "<!-- expect\n$1 ~ ^0$\n$2 ~ ^seeded$\n-->\n\n```\n$ wallfacer --version\n"
      "$ build/bin/wallfacer --version\n$ echo \"$OMPI_ALLOW_RUN_AS_ROOT $OMPI_ALLOW_RUN_AS_ROOT_CONFIRM\"\n"
      "$ command -v wallfacer\n```\n<!-- expect\n$1 ~ ^wallfacer \\d+\\.\\d+\\.\\d+ \\(CPU/MPI runtime: (yes|no)\\)$\n"
      "$2 ~ ^wallfacer \\d\n$3 ~ ^1 1$\n$4 ~ /bin/wallfacer$\n-->\n");
  EXPECT_TRUE(outcome.failures.empty()) << joined(outcome.failures);
  EXPECT_EQ(outcome.times.size(), 7u);
  EXPECT_FALSE(std::filesystem::exists(outcome.directory)) << "removed after a pass";
}

TEST(DocRunner, AHangingCommandIsKilledAndFails) {
  const auto start = std::chrono::steady_clock::now();
  const DocOutcome outcome =
      run("```\n$ echo started; sleep 120 & sleep 120\n```\n<!-- expect\n$1 ~ started\n"
          "$1 timeout 1\n-->\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(outcome.failures.size(), 1u);
  EXPECT_NE(outcome.failures[0].find("killed after 1 s"), std::string::npos) << outcome.failures[0];
  EXPECT_NE(outcome.failures[0].find("  | started"), std::string::npos) << outcome.failures[0];
  EXPECT_LT(seconds, 15);
  discard(outcome);
}

TEST(DocRunner, NotRunBlocksAreListedWithTheirReason) {
  const DocOutcome outcome = run("```\nbash scripts/install-deps.sh\n```\n<!-- not-run: installs packages -->\n");
  EXPECT_TRUE(outcome.failures.empty());
  EXPECT_TRUE(outcome.times.empty());
  ASSERT_EQ(outcome.not_run.size(), 1u);
  EXPECT_EQ(outcome.not_run[0], "in-memory:1: installs packages");
}

// Without the CPU/MPI runtime, `mpirun -np 8 wallfacer run` would run 8 separate local runs
// that all pass; the runner must fail before that, saying why.
TEST(DocRunner, MpiCommandsFailLoudlyWithoutTheMpiRuntime) {
  const std::filesystem::path build =
      std::filesystem::temp_directory_path() / ("wallfacer-doc-no-mpi-" + std::to_string(::getpid()));
  std::filesystem::create_directories(build / "bin");
  {
    std::ofstream script(build / "bin" / "wallfacer");
    script << "#!/bin/sh\necho 'wallfacer 0.1.0 (CPU/MPI runtime: no)'\n";
  }
  std::filesystem::permissions(build / "bin" / "wallfacer", std::filesystem::perms::owner_all);
  const Doc doc = parse(
      "```\n$ mpirun --oversubscribe -np 8 wallfacer run --plan small.yaml\n```\n"
      "<!-- expect\n$1 ~ all checks passed\n-->\n");
  const DocOutcome outcome = run_doc(doc, {WALLFACER_SOURCE_DIR, build});
  ASSERT_EQ(outcome.failures.size(), 1u);
  EXPECT_NE(outcome.failures[0].find("in-memory:2: $ mpirun --oversubscribe -np 8 wallfacer run"), std::string::npos)
      << outcome.failures[0];
  EXPECT_NE(outcome.failures[0].find("the command starts MPI ranks, but the binary under test has no CPU/MPI "
                                     "runtime (`wallfacer --version`: wallfacer 0.1.0 (CPU/MPI runtime: no))"),
            std::string::npos)
      << outcome.failures[0];
  EXPECT_TRUE(outcome.times.empty()) << "mpirun must not have started";
  discard(outcome);
  std::filesystem::remove_all(build);
}

TEST(DocRunner, MpiLaunchersAreRecognised) {
  for (const char* command : {"mpirun -np 8 wallfacer run", "mpiexec -n 2 x", "/usr/bin/mpirun --oversubscribe x",
                              "OMPI_MCA_x=1 mpirun -np 2 x"})
    EXPECT_TRUE(starts_mpi_ranks(command)) << command;
  for (const char* command : {"wallfacer run --plan mpirun.yaml", "echo mpirun", "mpirunner"})
    EXPECT_FALSE(starts_mpi_ranks(command)) << command;
}

}  // namespace
}  // namespace wallfacer::doc_commands
