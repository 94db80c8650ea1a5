// Shared by the libFuzzer targets (docs/reliability.md, "Fuzzing"): the one rule every reader
// is held to. Bad input may only end in wallfacer's typed InputError; any other exception,
// a crash, a hang or a sanitizer report is a bug the fuzzer reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>

namespace wallfacer::fuzz {

inline std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Runs `parse` on the input; an InputError is the expected answer to bad input, anything else
// escapes to libFuzzer, which reports it as a crash with the input that caused it.
template <typename Parse>
void expect_only_input_errors(Parse&& parse) {
  try {
    parse();
  } catch (const InputError&) {
  }
}

// Keeps the readers' warnings off the fuzzer's output (millions of runs).
inline void quiet_logs() {
  static const bool once = [] {
    log::set_level("all", log::Level::Off);
    return true;
  }();
  (void)once;
}

}  // namespace wallfacer::fuzz
