// Compiled into each executable that links mimalloc (cmake: wallfacer_use_fast_malloc), not into
// the simulator library: the allocator's settings for the whole process. Set in the environment
// (MIMALLOC_LARGE_OS_PAGES, MIMALLOC_ALLOW_DECOMMIT), a setting is left as the environment says.
//
// - 2 MiB pages where the kernel allows transparent huge pages. A simulation of thousands of ranks
//   wakes a different rank actor at nearly every event and touches its stack and its SimGrid
//   objects; with 4 KiB pages almost each of those touches misses the TLB, which costs most under
//   virtualisation (docs/benchmarks.md, "Simulator"). The planner's searches take twice as long
//   without them.
// - Freed memory stays committed. The planner builds and drops the programs and timelines of one
//   candidate after another, hundreds of MB each; returned to the kernel, every 2 MiB page came
//   back as a fresh page the kernel zeroed in full: a third of the page faults of a 16,384-GPU
//   plan, and a fifth of its time in zeroing (docs/benchmarks.md, "Planner"). The peak resident
//   memory is the same either way.
#include <mimalloc.h>

#include <cstdlib>

namespace {

const bool allocator_configured = [] {
  if (std::getenv("MIMALLOC_LARGE_OS_PAGES") == nullptr) mi_option_enable(mi_option_large_os_pages);
  if (std::getenv("MIMALLOC_ALLOW_DECOMMIT") == nullptr) mi_option_disable(mi_option_allow_decommit);
  return true;
}();

}  // namespace
