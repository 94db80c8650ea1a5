// Every command shown in README.md and docs/**/*.md runs and prints what the expectations next to
// it say (docs/doc-tests.md). One test per document, so ctest lists and times them separately.
// The list of documents is fixed when the test is built; a check that it still matches the
// source tree keeps a document added since then from going untested unnoticed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli_runner.hpp"
#include "doc_commands/doc_blocks.hpp"
#include "doc_commands/doc_run.hpp"

namespace wallfacer::doc_commands {
namespace {

namespace fs = std::filesystem;

// The documents when the test was built (tests.cmake writes the list).
const std::vector<std::string> kBuiltWith = {
#include "documents.inc"
};

// README.md and every .md under docs/ now, as paths relative to the source tree.
std::vector<std::string> documents() {
  const fs::path root = WALLFACER_SOURCE_DIR;
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root / "docs", ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file() && it->path().extension() == ".md")
      names.push_back(fs::relative(it->path(), root).generic_string());
  std::sort(names.begin(), names.end());
  if (fs::exists(root / "README.md")) names.insert(names.begin(), "README.md");
  return names;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace_if(
      name.begin(), name.end(), [](unsigned char c) { return !std::isalnum(c); }, '_');
  return name;
}

void print_times(const DocOutcome& outcome) {
  double total = 0;
  for (const CommandTime& t : outcome.times) {
    std::printf("  %-28s %7.2f s\n", t.where.c_str(), t.seconds);
    total += t.seconds;
  }
  std::printf("  %zu command(s) in %.2f s\n", outcome.times.size(), total);
  for (const std::string& reason : outcome.not_run)
    std::printf("  not run: %s\n", reason.c_str());
}

class Document : public ::testing::TestWithParam<std::string> {};

TEST_P(Document, CommandsPrintWhatTheirExpectationsSay) {
  ASSERT_TRUE(test::cli_present());
  const fs::path path = fs::path(WALLFACER_SOURCE_DIR) / GetParam();
  ASSERT_TRUE(fs::exists(path)) << path << " is gone since the test was built: rebuild it";
  const Doc doc = parse_doc(GetParam(), read_text(path));
  std::string problems;
  for (const std::string& problem : doc.problems)
    problems += "\n  " + problem;
  ASSERT_TRUE(doc.problems.empty()) << GetParam() << " breaks the conventions of docs/doc-tests.md:" << problems;
  const DocOutcome outcome = run_doc(doc, {WALLFACER_SOURCE_DIR, WALLFACER_BINARY_DIR});
  print_times(outcome);
  for (const std::string& failure : outcome.failures)
    ADD_FAILURE() << failure;
}

INSTANTIATE_TEST_SUITE_P(Docs, Document, ::testing::ValuesIn(kBuiltWith), test_name);

TEST(Documents, EveryDocumentHasItsTest) {
  const std::vector<std::string> now = documents();
  for (const std::string& name : now)
    EXPECT_NE(std::find(kBuiltWith.begin(), kBuiltWith.end(), name), kBuiltWith.end())
        << name << " is newer than test_doc_commands, so it has no test yet: rebuild the test";
  for (const char* expected : {"README.md", "docs/cli.md", "docs/runtime.md", "docs/doc-tests.md"})
    EXPECT_NE(std::find(now.begin(), now.end(), expected), now.end()) << expected << " under " << WALLFACER_SOURCE_DIR;
}

}  // namespace
}  // namespace wallfacer::doc_commands
