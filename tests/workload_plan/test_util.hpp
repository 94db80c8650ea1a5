// Small helpers for the workload and plan tests: the message of the InputError a call throws, and
// the line of a piece of text (so expected line numbers follow the test input, not the reader).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::testing {

// what() of the InputError `call` throws; "<no error>" when it returns normally.
template <typename Call>
std::string input_error_of(Call&& call) {
  try {
    call();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

// 1-based line of the first occurrence of `needle` in `text`, 0 when absent.
inline int line_of(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  if (at == std::string::npos) return 0;
  int line = 1;
  for (size_t i = 0; i < at; ++i)
    line += text[i] == '\n';
  return line;
}

// A file name in the temporary directory that no other test process uses.
inline std::filesystem::path scratch_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("wallfacer-test-" + std::to_string(::getpid()) + "-" + name);
}

// The first ```yaml block of a markdown file under the source tree ("" when there is none), so
// the examples in docs/ are checked by the code they describe.
inline std::string yaml_block_of(const std::string& relative_path) {
  std::ifstream in(std::string(WALLFACER_SOURCE_DIR) + "/" + relative_path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::string open = "```yaml\n";
  const size_t begin = doc.find(open);
  if (begin == std::string::npos) return "";
  const size_t end = doc.find("```", begin + open.size());
  return end == std::string::npos ? "" : doc.substr(begin + open.size(), end - begin - open.size());
}

}  // namespace wallfacer::testing
