// How the process's memory allocator hands back freed memory. The planner builds and drops rank
// programs and timelines of tens of megabytes per candidate; with glibc's defaults much of that
// goes back to the kernel when freed (large blocks are mapped and unmapped one by one, the heap's
// top is trimmed), and every later allocation then takes fresh pages the kernel must fault in
// and zero: up to half of a search's CPU time. Programs call this once at start.
#pragma once

namespace wallfacer {

// Keeps freed memory in the process for reuse: blocks up to 32 MiB come from the heap, and up to
// 1 GiB of free heap is kept before it is returned. No effect outside glibc.
void keep_freed_memory();

}  // namespace wallfacer
