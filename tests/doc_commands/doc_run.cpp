// The documentation runner: one temporary directory per document, holding `work/` (the commands'
// directory, with a link `build` to the build tree) and `bin/wallfacer` (a link to the binary,
// first on PATH). The environment is the test's own minus what would change wallfacer's output
// (WALLFACER_LOG), plus what lets mpirun start as root, which CI and containers are.
#include "doc_commands/doc_run.hpp"

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <regex>
#include <sstream>

#include "doc_commands/shell_run.hpp"

extern char** environ;

namespace wallfacer::doc_commands {
namespace {

namespace fs = std::filesystem;

constexpr size_t kTailLines = 40, kTailWidth = 400;

std::string where(const Doc& doc, int line) {
  return doc.name + ":" + std::to_string(line);
}

// The last lines of a command's output, indented under the failure message.
std::string output_tail(const std::string& output) {
  const std::vector<std::string> lines = split_lines(output);
  if (lines.empty()) return "  output: (none)\n";
  const size_t from = lines.size() > kTailLines ? lines.size() - kTailLines : 0;
  std::string text =
      from == 0 ? "  output:\n"
                : "  output (last " + std::to_string(kTailLines) + " of " + std::to_string(lines.size()) + " lines):\n";
  for (size_t i = from; i < lines.size(); ++i)
    text += "  | " + (lines[i].size() > kTailWidth ? lines[i].substr(0, kTailWidth) + " ..." : lines[i]) + "\n";
  return text;
}

std::vector<std::string> command_environment(const fs::path& bin, const DocSetting& setting) {
  static const char* const kReplaced[] = {"PATH",
                                          "WALLFACER_LOG",
                                          "WALLFACER_SOURCE_DIR",
                                          "WALLFACER_BINARY_DIR",
                                          "OMPI_ALLOW_RUN_AS_ROOT",
                                          "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"};
  std::vector<std::string> environment;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    const std::string text = *variable;
    const std::string name = text.substr(0, text.find('='));
    if (std::find(std::begin(kReplaced), std::end(kReplaced), name) == std::end(kReplaced)) environment.push_back(text);
  }
  const char* path = std::getenv("PATH");
  environment.push_back("PATH=" + bin.string() + ":" + (path ? path : "/usr/local/bin:/usr/bin:/bin"));
  environment.push_back("WALLFACER_SOURCE_DIR=" + setting.source_dir.string());
  environment.push_back("WALLFACER_BINARY_DIR=" + setting.binary_dir.string());
  environment.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
  environment.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  return environment;
}

// What each failed expectation of one command says; empty when all of them hold.
std::vector<std::string> unmet(const Doc& doc, const std::vector<Check>& checks, const ShellResult& result,
                               double timeout) {
  if (!result.error.empty()) return {result.error};
  if (result.timed_out)
    return {"killed after " + std::to_string(int(timeout)) +
            " s without finishing (a slow command may say `$N timeout SECONDS` in its expect comment)"};
  std::vector<std::string> messages;
  int expected_status = 0;
  for (const Check& c : checks)
    if (c.kind == CheckKind::kExit) expected_status = c.value;
  if (result.status != expected_status)
    messages.push_back("exit status " + std::to_string(result.status) + ", expected " +
                       std::to_string(expected_status));
  const std::vector<std::string> lines = split_lines(result.output);
  for (const Check& c : checks) {
    if (c.kind != CheckKind::kMatches && c.kind != CheckKind::kNoMatch) continue;
    const std::regex pattern(c.pattern);
    const auto hit = std::find_if(lines.begin(), lines.end(),
                                  [&](const std::string& line) { return std::regex_search(line, pattern); });
    if (c.kind == CheckKind::kMatches && hit == lines.end())
      messages.push_back("no output line matches /" + c.pattern + "/ (" + where(doc, c.line) + ")");
    if (c.kind == CheckKind::kNoMatch && hit != lines.end())
      messages.push_back("output line " + std::to_string(hit - lines.begin() + 1) + " matches /" + c.pattern +
                         "/, which must not appear (" + where(doc, c.line) + "): " + *hit);
  }
  return messages;
}

class DocRun {
 public:
  DocRun(const Doc& doc, const DocSetting& setting) : doc_(doc), setting_(setting) {}
  DocOutcome run();

 private:
  bool prepare();
  bool run_block(const Block& block);
  bool run_one(const Command& command, const std::vector<Check>& checks, bool setup);
  std::string mpi_problem();
  void fail(const Command& command, const std::vector<std::string>& messages, const std::string& output);

  const Doc& doc_;
  const DocSetting& setting_;
  fs::path work_;
  std::vector<std::string> environment_;
  DocOutcome outcome_;
  int left_ = 0;  // commands not yet run, for the message that stops the document
};

DocOutcome DocRun::run() {
  for (const Block& block : doc_.blocks)
    if (!block.not_run) left_ += int(block.setup.size() + block.commands.size());
  if (left_ > 0 && prepare()) {
    for (const Block& block : doc_.blocks)
      if (!run_block(block)) break;
  }
  for (const Block& block : doc_.blocks)
    if (block.not_run) outcome_.not_run.push_back(where(doc_, block.line) + ": " + *block.not_run);
  if (outcome_.failures.empty() && !outcome_.directory.empty()) {
    std::error_code ignored;
    fs::remove_all(outcome_.directory, ignored);
  }
  return std::move(outcome_);
}

bool DocRun::prepare() {
  std::string pattern = (fs::temp_directory_path() / "wallfacer-doc-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    outcome_.failures.push_back(doc_.name + ": cannot make a temporary directory: " + std::strerror(errno));
    return false;
  }
  outcome_.directory = pattern;
  work_ = outcome_.directory / "work";
  const fs::path bin = outcome_.directory / "bin";
  std::error_code ec;
  fs::create_directories(work_, ec);
  if (!ec) fs::create_directories(bin, ec);
  if (!ec) fs::create_directory_symlink(setting_.binary_dir, work_ / "build", ec);
  if (!ec) fs::create_symlink(setting_.binary_dir / "bin" / "wallfacer", bin / "wallfacer", ec);
  if (ec) {
    outcome_.failures.push_back(doc_.name + ": cannot prepare " + outcome_.directory.string() + ": " + ec.message());
    return false;
  }
  environment_ = command_environment(bin, setting_);
  return true;
}

bool DocRun::run_block(const Block& block) {
  if (block.not_run) return true;
  for (const Command& command : block.setup)
    if (!run_one(command, {}, true)) return false;
  for (size_t i = 0; i < block.commands.size(); ++i)
    if (!run_one(block.commands[i], checks_of(block, int(i) + 1), false)) return false;
  return true;
}

bool DocRun::run_one(const Command& command, const std::vector<Check>& checks, bool setup) {
  --left_;
  if (starts_mpi_ranks(command.text)) {
    if (const std::string problem = mpi_problem(); !problem.empty()) {
      fail(command, {problem}, "");
      return false;
    }
  }
  double timeout = setting_.timeout_seconds;
  for (const Check& c : checks)
    if (c.kind == CheckKind::kTimeout) timeout = c.value;
  const ShellResult result = run_shell(command.text, work_, environment_, timeout);
  outcome_.times.push_back({where(doc_, command.line), result.seconds});
  std::vector<std::string> messages = unmet(doc_, checks, result, timeout);
  if (messages.empty()) return true;
  if (setup) messages.front() = "setup command: " + messages.front();
  fail(command, messages, result.output);
  return false;
}

// Why the binary cannot run MPI ranks, or "": under mpirun a binary without the CPU/MPI runtime
// runs every rank on threads in each process and passes its checks, so the documented MPI run
// would silently not happen.
std::string DocRun::mpi_problem() {
  const ShellResult version = run_shell("wallfacer --version", work_, environment_, 60);
  if (version.status == 0 && version.output.find("CPU/MPI runtime: yes") != std::string::npos) return "";
  const std::vector<std::string> lines = split_lines(version.output);
  std::string said = lines.empty() ? version.error : lines.front();
  return "the command starts MPI ranks, but the binary under test has no CPU/MPI runtime (`wallfacer --version`: " +
         said + "); configure with -DWALLFACER_MPI=ON, with Open MPI installed, and rebuild";
}

void DocRun::fail(const Command& command, const std::vector<std::string>& messages, const std::string& output) {
  std::string text = where(doc_, command.line) + ": $ " + command.text + "\n";
  for (const std::string& message : messages)
    text += "  " + message + "\n";
  text += output_tail(output);
  text += "  ran in " + work_.string();
  if (left_ > 0) text += "; the " + std::to_string(left_) + " later command(s) of " + doc_.name + " were not run";
  outcome_.failures.push_back(text);
}

}  // namespace

DocOutcome run_doc(const Doc& doc, const DocSetting& setting) {
  return DocRun(doc, setting).run();
}

bool starts_mpi_ranks(const std::string& command) {
  static const std::regex launcher(R"(^\s*(\w+=\S*\s+)*(\S*/)?(mpirun|mpiexec)(\s|$))");
  return std::regex_search(command, launcher);
}

}  // namespace wallfacer::doc_commands
