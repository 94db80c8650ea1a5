// Typed errors for bad user input. Libraries throw these; executables print what() and exit 2.
// what() reads "FILE:LINE: error: message" (or "FILE: error: message" when no line is known),
// the format compilers use, so editors can jump to the spot.
#pragma once

#include <stdexcept>
#include <string>

namespace wallfacer {

// Bad input from a user: a file, a flag, a plan that does not fit its topology. Exit status 2.
class InputError : public std::runtime_error {
 public:
  InputError(std::string file, int line, const std::string& message);
  explicit InputError(const std::string& message);

  const std::string& file() const { return file_; }
  int line() const { return line_; }  // 1-based; 0 when unknown
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  int line_ = 0;
  std::string message_;
};

// A schedule or plan that breaks an invariant (a ring that does not close, a send without its
// receive). Raised by the checkers; a bug in a builder or a hand-edited plan file.
class ScheduleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Internal invariant; stays on in release builds. Not for user input.
[[noreturn]] void invariant_failed(const char* expr, const char* file, int line, const std::string& why);

}  // namespace wallfacer

#define WF_ASSERT(cond, why)                                                      \
  do {                                                                            \
    if (!(cond)) ::wallfacer::invariant_failed(#cond, __FILE__, __LINE__, (why)); \
  } while (0)
