// Compiled into each executable that links mimalloc (cmake: wallfacer_use_fast_malloc), not into
// the simulator library. Asks mimalloc to back its memory with 2 MiB pages where the kernel allows
// transparent huge pages. A simulation of thousands of ranks wakes a different rank actor at
// nearly every event and touches its stack and its SimGrid objects; with 4 KiB pages almost each
// of those touches misses the TLB, which costs most under virtualisation (docs/benchmarks.md,
// "Simulator"). MIMALLOC_LARGE_OS_PAGES in the environment still decides when it is set.
#include <mimalloc.h>

#include <cstdlib>

namespace {

const bool large_pages_requested = [] {
  if (std::getenv("MIMALLOC_LARGE_OS_PAGES") != nullptr) return false;
  mi_option_enable(mi_option_large_os_pages);
  return true;
}();

}  // namespace
