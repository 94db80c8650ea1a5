// Allocator settings (allocator.hpp).
#include <wallfacer/core/allocator.hpp>

#include <cstdlib>  // defines __GLIBC__ under glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace wallfacer {

void keep_freed_memory() {
#if defined(__GLIBC__)
  // Setting either also turns off glibc's own adjustment of the mapping threshold.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace wallfacer
