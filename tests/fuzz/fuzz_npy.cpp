// libFuzzer target: the .npy reader of `run --load` (wallfacer/runtime/npy.hpp), through a file as
// `run` reads it, so the size checks against the file are exercised too.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <wallfacer/runtime/npy.hpp>

#include "fuzz_common.hpp"

namespace {

const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/wallfacer-fuzz-npy-" + std::to_string(getpid()) + ".npy";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  fuzz::quiet_logs();
  const std::string bytes = fuzz::as_text(data, size);
  fuzz::expect_only_input_errors([&] { (void)runtime::parse_npy_header(bytes, "fuzz.npy"); });
  {
    std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  fuzz::expect_only_input_errors([&] { (void)runtime::read_npy(scratch_path()); });
  std::remove(scratch_path().c_str());
  return 0;
}
