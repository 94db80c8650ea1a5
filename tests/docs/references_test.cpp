// References in docs and comments must resolve inside the repository, so that a reader of any
// checkout can follow every one of them. The rules, applied to the Markdown, C++, YAML, CMake and
// shell files that git lists (or, without git, that lie outside .git and the build folders):
//
// (a) Pages. A Markdown link whose target ends in ".md" (or in a source extension of (d))
//     resolves from the citing file's folder, as a Markdown viewer resolves it. Every other name
//     ending in ".md" (plain, in backticks, in a string, before a "§") resolves from the repository
//     root: docs/algorithms.md is written so from every file, docs/ included. A leading '/' also
//     means the root (source_dir + "/docs/.."). URLs are skipped, and so is a bare name in double
//     quotes ("plan.md"), a label for a parser.
// (b) Sections. "§N" or "§N.M" must be a numbered heading ("## 8. ...", "### 8.2 ...") of the page
//     it cites: the nearest page with numbered headings named before it on its line, or a page
//     named right in front of it; else the page it stands in, if that page numbers its headings;
//     else the last such page named earlier in the file. A "§" with none of these is an error.
// (c) Machines. No absolute path under the home, root, work or temporary directories (or macOS
//     home folders): anywhere in Markdown files, and in the comments of every other file. Code
//     may use such paths (tests create temporary files); system paths and URLs are fine anywhere.
// (d) Sources. In the same prose as (c), a path that starts at a top-level folder (planner/,
//     simulator/, runtime/, cli/, tests/, bench/, docs/, topologies/, models/, scripts/, cmake/,
//     gui/, .ci/) and ends in .hpp, .cpp, .cmake, .yaml, .sh, .md, .txt, .json or .py must be a
//     file of the repository, and one that ends in '/' a folder holding a file; a header in include
//     form, wallfacer/<x>/<y>.hpp (in angle brackets or not), must be some
//     <component>/include/wallfacer/<x>/<y>.hpp. A '*' stands for any part of one name and a
//     placeholder such as <area> for a non-empty part of one, and the mention must then match at
//     least one file (topologies/*.yaml, tests/<area>/tests.cmake); "x.{hpp,cpp}" names each. A
//     leading "./" or "/" means the root, as in (a). Paths that start elsewhere (build/, a subfolder
//     as in strategies/*.cpp) and bare names (network.cpp) are not read: they do not say which file
//     they mean. Code is not read either: tests build paths of files they create.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "reference_check.hpp"

namespace wallfacer::docs_check {
namespace {

const std::string kRoot = WALLFACER_SOURCE_DIR;

// Broken text is assembled at run time, so that this file itself holds no broken reference.
const std::string kMd = ".md";
const std::string kSec = "\u00a7";
const std::string kExample = "docs/example" + kMd;  // a page of the self-tests' repository only

// The repository the self-tests see: three pages, one with numbered sections, and a few sources.
Repository small_repository() {
  return Repository({"docs/algorithms.md", kExample, "docs/formats/plan.md", "planner/x.cpp",
                     "planner/core/include/wallfacer/core/errors.hpp", "topologies/dgx.yaml", "tests/docs/tests.cmake"},
                    {{"docs/algorithms.md", {"1", "8", "8.2"}}, {kExample, {}}, {"docs/formats/plan.md", {}}});
}

std::string joined(const std::vector<Finding>& findings) {
  std::string out;
  for (const Finding& f : findings)
    out += to_string(f) + "\n";
  return out;
}

TEST(DocsCheck, CatchesABrokenLinkAnUnknownSectionAndAMachinePath) {
  const std::string text = "See [the plan](missing-page" + kMd + ").\n" +  //
                           "Cited: docs/algorithms" + kMd + " " + kSec + "99.1 and " + kSec + "8.2.\n" +
                           "Copied from /" + "home/someone/notes.\n";
  const std::vector<Finding> findings = scan(kExample, text, small_repository());
  ASSERT_EQ(findings.size(), 3u) << joined(findings);
  EXPECT_EQ(findings[0].line, 1);
  EXPECT_NE(findings[0].what.find("missing-page.md"), std::string::npos) << findings[0].what;
  EXPECT_EQ(findings[1].line, 2);
  EXPECT_NE(findings[1].what.find(kSec + "99.1"), std::string::npos) << findings[1].what;
  EXPECT_EQ(findings[2].line, 3);
  EXPECT_NE(findings[2].what.find("/" + std::string("home/someone/notes.")), std::string::npos) << findings[2].what;
  EXPECT_EQ(to_string(findings[0]).rfind(kExample + ":1: ", 0), 0u) << to_string(findings[0]);
}

TEST(DocsCheck, ResolvesLinksFromTheFileAndOtherPathsFromTheRoot) {
  const std::string text = "[formats](formats/plan" + kMd + ") and [up](../docs/algorithms" + kMd + "#x)\n" +
                           "algorithms" + kMd + " " + kSec + "8 is not read from docs/\n" + "docs/algorithms" + kMd +
                           ": " + kSec + "8 (one), " + kSec + "1 (two)\n" + "[web](https://example.org/README" + kMd +
                           ") and https://example.org/a" + kMd + "\n";
  const std::vector<Finding> findings = scan(kExample, text, small_repository());
  ASSERT_EQ(findings.size(), 1u) << joined(findings);
  EXPECT_EQ(findings[0].line, 2);
}

TEST(DocsCheck, BindsBareSectionsToThePageInContext) {
  const Repository repo = small_repository();
  EXPECT_EQ(scan("planner/x.cpp", "// " + kSec + "8.2 first\n", repo).size(), 1u);
  EXPECT_TRUE(
      scan("planner/x.cpp", "// docs/algorithms" + kMd + " " + kSec + "8\n// then " + kSec + "8.2\n", repo).empty());
  EXPECT_TRUE(scan("docs/algorithms.md", "as in " + kSec + "1\n", repo).empty());
  // A numbered page citing another page's section still means itself on the following lines.
  EXPECT_EQ(scan("docs/algorithms.md", "see " + kExample + "\nas in " + kSec + "8.2\n", repo).size(), 0u);
  const auto unnumbered = scan("planner/x.cpp", "// docs/example" + kMd + " " + kSec + "3\n", repo);
  ASSERT_EQ(unnumbered.size(), 1u);
  EXPECT_NE(unnumbered[0].what.find("no numbered sections"), std::string::npos) << unnumbered[0].what;
  const auto range = scan("planner/x.cpp", "// docs/algorithms" + kMd + " " + kSec + "8-9\n", repo);
  ASSERT_EQ(range.size(), 1u);
  EXPECT_NE(range[0].what.find(kSec + "9 "), std::string::npos) << range[0].what;
}

TEST(DocsCheck, LooksForMachinePathsInCommentsOnly) {
  const std::string tmp = "/" + std::string("tmp/wf");
  const std::string code = "auto p = \"" + tmp + "\";  // writes " + tmp + "\n" +  //
                           "auto q = R\"(// " + tmp + ")\";\n" +                   //
                           "/* multi\n   " + tmp + " */ int x = '\"';\n" +         //
                           "// /usr/local/cuda/bin and https://example.org/home/x are fine\n";
  const std::vector<Finding> findings = scan("planner/x.cpp", code, small_repository());
  ASSERT_EQ(findings.size(), 2u) << joined(findings);
  EXPECT_EQ(findings[0].line, 1);
  EXPECT_EQ(findings[1].line, 4);
  EXPECT_EQ(scan("scripts/x.sh", "echo " + tmp + "  # " + tmp + "\n", small_repository()).size(), 1u);
}

TEST(DocsCheck, QuotedFileNamesAreLabelsNotReferences) {
  const std::string code = "parse(text, \"plan" + kMd + "\");\nread(dir + \"/docs/formats/plan" + kMd + "\");\n";
  EXPECT_TRUE(scan("planner/x.cpp", code, small_repository()).empty());
}

TEST(DocsCheck, CatchesStaleSourcePathsAndHeaders) {
  const std::string text =
      "Moved: planner/topology.hpp, <wallfacer/plan/nope.hpp> and planner/strategies/.\n"
      "Fine: planner/x.cpp, ./planner/x.cpp, <wallfacer/core/errors.hpp>, wallfacer/<stage>/*.hpp, planner/.\n"
      "Globs: topologies/*.yaml, tests/<area>/tests.cmake, docs/*.md; but models/*.yaml.\n"
      "Braces: planner/x.{cpp,hpp}. Not read: network.cpp, strategies/*.cpp, build/out.json, yaml*.cpp.\n";
  const std::vector<Finding> findings = scan(kExample, text, small_repository());
  ASSERT_EQ(findings.size(), 5u) << joined(findings);
  EXPECT_EQ(findings[0].line, 1);
  EXPECT_NE(findings[0].what.find("`planner/topology.hpp` is not a file"), std::string::npos) << findings[0].what;
  EXPECT_NE(findings[1].what.find("`wallfacer/plan/nope.hpp` is no public header"), std::string::npos)
      << findings[1].what;
  EXPECT_NE(findings[2].what.find("`planner/strategies/` is not a folder"), std::string::npos) << findings[2].what;
  EXPECT_EQ(findings[3].line, 3);
  EXPECT_NE(findings[3].what.find("`models/*.yaml` matches no file"), std::string::npos) << findings[3].what;
  EXPECT_EQ(findings[4].line, 4);
  EXPECT_NE(findings[4].what.find("`planner/x.hpp`"), std::string::npos) << findings[4].what;
  // A link to a source resolves from the citing file's folder, as a link to a page does.
  const std::string cpp = ".cpp";  // assembled: (a) reads links in code too
  const std::string links =
      "[x](../planner/x" + cpp + "), [gone](../planner/gone" + cpp + "), [root](planner/x" + cpp + ")\n";
  const std::vector<Finding> broken = scan(kExample, links, small_repository());
  ASSERT_EQ(broken.size(), 2u) << joined(broken);
  EXPECT_NE(broken[0].what.find("../planner/gone.cpp"), std::string::npos) << broken[0].what;
  EXPECT_NE(broken[1].what.find("docs/planner/x.cpp"), std::string::npos) << broken[1].what;
}

TEST(DocsCheck, ReadsSourcePathsInCommentsOnlyAndNamesFilesOfTheSameName) {
  const std::string code =
      "load(\"planner/gone.cpp\");  // reads planner/gone.cpp\n"
      "/* see tests/errors.hpp */\n";
  const std::vector<Finding> findings = scan("planner/x.cpp", code, small_repository());
  ASSERT_EQ(findings.size(), 2u) << joined(findings);
  EXPECT_EQ(findings[0].line, 1);
  EXPECT_EQ(findings[1].line, 2);
  EXPECT_NE(findings[1].what.find("(of that name: planner/core/include/wallfacer/core/errors.hpp)"), std::string::npos)
      << findings[1].what;
  EXPECT_EQ(scan("scripts/x.sh", "cat planner/gone.cpp  # planner/gone.cpp\n", small_repository()).size(), 1u);
}

TEST(DocsCheck, ReadsNumberedHeadingsOutsideCodeFences) {
  const std::string page = "# Title\n## 8. WallFacer\n### 8.2 Rank formulas\n```\n# 9. not a heading\n```\n## Plain\n";
  EXPECT_EQ(numbered_headings(page), (std::set<std::string>{"8", "8.2"}));
}

// The pages the rest of the repository cites by section exist and number their sections.
TEST(DocsCheck, TheRepositoryListsItsFilesAndPages) {
  const Repository repo = Repository::load(kRoot);
  EXPECT_TRUE(repo.has_file("README.md"));
  EXPECT_TRUE(repo.has_file("tests/docs/tests.cmake"));
  EXPECT_TRUE(repo.sections_of("docs/algorithms.md").count("8.2"));
  EXPECT_TRUE(repo.sections_of("docs/hardware.md").count("6.6"));
}

TEST(DocsCheck, EveryReferenceInTheRepositoryResolves) {
  const Repository repo = Repository::load(kRoot);
  size_t scanned = 0;
  for (const std::string& file : repo.files()) {
    if (!is_scanned(file)) continue;
    std::ifstream in(kRoot + "/" + file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    for (const Finding& finding : scan(file, text.str(), repo))
      ADD_FAILURE() << to_string(finding);
    ++scanned;
  }
  EXPECT_GT(scanned, 100u) << "the walk found too few files to mean anything";
}

}  // namespace
}  // namespace wallfacer::docs_check
