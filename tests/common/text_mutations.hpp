// Deterministic edits of a valid input file, for tests that every reader either accepts the
// result or rejects it with an InputError (never another exception, a crash or a hang): a line
// deleted, duplicated or swapped, or one token (number, name, bracketed list) replaced by a value
// chosen to break assumptions (negative, zero, huge, NaN, empty, a list or a mapping as a key).
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::testing {

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

// Start and end of each token of `line` a mutation may replace.
inline std::vector<std::pair<size_t, size_t>> tokens_of(const std::string& line) {
  std::vector<std::pair<size_t, size_t>> tokens;
  size_t i = 0;
  while (i < line.size()) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    if (line[i] == '#') break;  // a comment
    if (line[i] == '[') {
      const size_t close = line.find(']', i);
      if (close == std::string::npos) break;
      tokens.emplace_back(i, close + 1);
      i = close + 1;
    } else if (std::isalnum(c) || line[i] == '-' || line[i] == '.' || line[i] == '_') {
      size_t end = i;
      while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '-' ||
                                   line[end] == '.' || line[end] == '_'))
        ++end;
      tokens.emplace_back(i, end);
      i = end;
    } else {
      ++i;
    }
  }
  return tokens;
}

// The `index`-th mutation of `text` (the same text for the same index on every platform: the
// engine and the arithmetic on its output are fully specified).
inline std::string mutated(const std::string& text, uint32_t index) {
  static const char* const kValues[] = {"-1",   "0",      "1",     "2",          "99999999999", "1e308",
                                        "nan",  "inf",    "-0",    "abc",        "\"\"",        "[]",
                                        "{}",   "3.5",    "65536", "2147483648", "null",        "~",
                                        "true", "[0, 0]", "[-1]",  "1e-300",     "{a: 1}: 2",   "[x]: 1"};
  std::mt19937 rng(index * 2654435761u + 17u);
  auto below = [&](size_t n) { return size_t(rng() % uint32_t(n)); };
  std::vector<std::string> lines = split_lines(text);
  const size_t edits = 1 + below(3);
  for (size_t e = 0; e < edits && !lines.empty(); ++e) {
    const size_t i = below(lines.size());
    const uint32_t kind = rng() % 10;
    if (kind == 0) {
      lines.erase(lines.begin() + ptrdiff_t(i));
    } else if (kind == 1) {
      std::swap(lines[i], lines[below(lines.size())]);
    } else if (kind == 2) {
      lines.insert(lines.begin() + ptrdiff_t(i), lines[below(lines.size())]);
    } else {
      const auto tokens = tokens_of(lines[i]);
      if (tokens.empty()) continue;
      const auto [begin, end] = tokens[below(tokens.size())];
      lines[i] = lines[i].substr(0, begin) + kValues[below(std::size(kValues))] + lines[i].substr(end);
    }
  }
  std::string out;
  for (const std::string& line : lines)
    out += line + "\n";
  return out;
}

// Which exceptions count as a rejection of an edit.
enum class Rejection { InputError, InputOrScheduleError };

// Runs `use` (taking the edited text) on edits first .. first + count - 1 of `text` and returns
// how many it rejected; any other exception fails the calling test with the edit's index and text.
template <typename Use>
int rejected_edits(const std::string& text, uint32_t first, uint32_t count, Use&& use,
                   Rejection rejection = Rejection::InputError) {
  int rejected = 0;
  for (uint32_t index = first; index < first + count; ++index) {
    const std::string edited = mutated(text, index);
    SCOPED_TRACE("edit " + std::to_string(index) + ":\n" + edited);
    try {
      use(edited);
    } catch (const InputError&) {
      ++rejected;
    } catch (const ScheduleError& e) {
      if (rejection == Rejection::InputOrScheduleError)
        ++rejected;
      else
        ADD_FAILURE() << "escaped as ScheduleError: " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "escaped as " << typeid(e).name() << ": " << e.what();
    }
  }
  return rejected;
}

}  // namespace wallfacer::testing
