// The checker behind test_docs: finds references in the repository's text that lead nowhere, so
// that docs and comments only ever point at pages the repository ships. The rules are spelled out
// in references_test.cpp, the one place that states them.
#pragma once

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace wallfacer::docs_check {

struct Finding {
  std::string file;  // repository-relative path
  int line = 0;      // 1-based
  std::string what;
};

// "file:line: what", the form a failure message shows.
std::string to_string(const Finding& finding);

// What the checker knows of the repository: its files (repository-relative, '/'-separated) and
// the numbered headings of every Markdown page among them.
class Repository {
 public:
  Repository(std::set<std::string> files, std::map<std::string, std::set<std::string>> sections);

  // The files `git ls-files` lists (tracked and untracked, not ignored), or, without git, every
  // file under `root` outside .git and the build folders.
  static Repository load(const std::filesystem::path& root);

  bool has_file(const std::string& path) const { return files_.count(path) > 0; }
  // Whether some file lies below `folder` ("planner/cost/", with its trailing '/').
  bool has_folder(const std::string& folder) const;
  // The section numbers ("8", "8.2") of a Markdown page, empty when it numbers none.
  const std::set<std::string>& sections_of(const std::string& page) const;
  const std::set<std::string>& files() const { return files_; }

 private:
  std::set<std::string> files_;
  std::map<std::string, std::set<std::string>> sections_;
};

// Section numbers of the headings "## 8. WallFacer" and "### 8.2 Rank formulas" in a Markdown
// text, outside fenced code blocks.
std::set<std::string> numbered_headings(const std::string& markdown);

// Whether test_docs reads the file at all: Markdown, C++, YAML, CMake and shell files.
bool is_scanned(const std::string& path);

// Every broken reference in one file's text. `path` is where the file sits in the repository: it
// decides how relative links resolve and whether machine paths and source paths are looked for in
// the whole text (Markdown) or in comments only (everything else).
std::vector<Finding> scan(const std::string& path, const std::string& text, const Repository& repo);

}  // namespace wallfacer::docs_check
