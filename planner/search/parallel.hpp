// Independent per-candidate work of the search spread over threads. Each index is handled by
// exactly one thread and writes only its own result, so what the search computes does not depend
// on the thread count; the first error in index order is the one raised, as on one thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace wallfacer::detail {

// Calls `work(i)` for every i in [0, count) on up to `threads` threads (the caller's included).
// Indices are taken in increasing order, one at a time, so uneven work spreads evenly. An
// exception thrown by `work(i)` stops the handing out of further indices; once all threads have
// stopped, the one of the smallest index is rethrown.
template <typename Work>
void for_each_index(size_t count, int threads, Work&& work) {
  const size_t workers = std::min(count, size_t(std::max(1, threads)));
  if (workers <= 1) {
    for (size_t i = 0; i < count; ++i)
      work(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(count);
  auto drain = [&] {
    for (size_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < count;) {
      try {
        work(i);
      } catch (...) {
        errors[i] = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(workers - 1);
  for (size_t t = 1; t < workers; ++t)
    helpers.emplace_back(drain);
  drain();
  for (std::thread& helper : helpers)
    helper.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace wallfacer::detail
