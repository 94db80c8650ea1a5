// Thread lenders for tests of work done on lent threads (ThreadLender): one that starts a thread
// per loan, up to a number at once, and one that runs each loan to its end before answering, so
// that a test knows what the lent thread did when the loan returns.
#pragma once

#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>

namespace wallfacer::testing {

// Lends up to `most` threads at once, each a new thread; joins them all when destroyed.
class ThreadsToLend {
 public:
  explicit ThreadsToLend(int most) : most_(most) {}
  ~ThreadsToLend() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      threads.swap(threads_);
    }
    for (std::thread& thread : threads)
      thread.join();
  }
  ThreadsToLend(const ThreadsToLend&) = delete;
  ThreadsToLend& operator=(const ThreadsToLend&) = delete;

  ThreadLender lender() {
    return [this](std::function<void()> work) {
      std::lock_guard lock(mutex_);
      if (out_ >= most_) return false;
      ++out_;
      ++loans_;
      threads_.emplace_back([this, work = std::move(work)] {
        work();
        std::lock_guard done(mutex_);
        --out_;
      });
      return true;
    };
  }
  int loans() {
    std::lock_guard lock(mutex_);
    return loans_;
  }

 private:
  std::mutex mutex_;
  int most_, out_ = 0, loans_ = 0;
  std::vector<std::thread> threads_;
};

// Runs each loan on a new thread and waits for it before answering.
inline bool lend_and_wait(std::function<void()> work) {
  std::thread thread(std::move(work));
  thread.join();
  return true;
}

}  // namespace wallfacer::testing
