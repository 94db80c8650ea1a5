// Independent per-candidate work of the search spread over threads. Each index is handled by
// exactly one thread and writes only its own result, so what the search computes does not depend
// on the thread count; the first error in index order is the one raised, as on one thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
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

template <typename Future>
bool is_ready(const Future& job) {
  return job.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

// Threads that run submitted jobs for as long as they live, in submission order. Jobs of one
// search run on the same few threads instead of a thread each: a thread's allocator keeps the
// memory its jobs freed for the next job (a whole step's timeline is hundreds of MB, which a new
// thread would take as fresh pages, zeroed by the kernel on first touch). Jobs not started when
// it is destroyed are dropped (their futures report a broken promise); running ones finish.
class WorkerThreads {
 public:
  explicit WorkerThreads(int threads) {
    for (int t = 0; t < threads; ++t)
      threads_.emplace_back([this] { work(); });
  }
  ~WorkerThreads() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      queue_.clear();
    }
    wake_.notify_all();
    for (std::thread& thread : threads_)
      thread.join();
  }
  WorkerThreads(const WorkerThreads&) = delete;
  WorkerThreads& operator=(const WorkerThreads&) = delete;

  // Waits for `job` (one of these threads' futures), calling `meanwhile` first and again each
  // time another job finishes: the caller gives a thread that came free its next job.
  template <typename Future, typename Meanwhile>
  void wait(const Future& job, Meanwhile&& meanwhile) {
    for (;;) {
      // The count is read before the future, so a job finishing in between is not missed.
      const size_t seen = finished();
      if (is_ready(job)) return;
      meanwhile();
      std::unique_lock lock(mutex_);
      done_.wait(lock, [&] { return finished_ > seen; });
    }
  }

  template <typename Job>
  std::future<std::invoke_result_t<Job>> submit(Job&& job) {
    auto task = std::make_shared<std::packaged_task<std::invoke_result_t<Job>()>>(std::forward<Job>(job));
    auto result = task->get_future();
    {
      std::lock_guard lock(mutex_);
      queue_.emplace_back([task] { (*task)(); });
    }
    wake_.notify_one();
    return result;
  }

 private:
  size_t finished() {
    std::lock_guard lock(mutex_);
    return finished_;
  }
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
      {
        std::lock_guard lock(mutex_);
        ++finished_;
      }
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  size_t finished_ = 0;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace wallfacer::detail
