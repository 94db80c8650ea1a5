// The search's thread helpers (planner/search/parallel.hpp): every index handled exactly once
// whatever the thread count, the first error in index order raised after the ones before it ran,
// and worker threads that run every job they are given on their own few threads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "parallel.hpp"

namespace wallfacer::detail {
namespace {

TEST(ForEachIndex, HandlesEveryIndexOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 8})
    for (size_t count : {0, 1, 5, 100}) {
      std::vector<std::atomic<int>> seen(count);
      for_each_index(count, threads, [&](size_t i) { ++seen[i]; });
      for (size_t i = 0; i < count; ++i)
        EXPECT_EQ(seen[i].load(), 1) << threads << " threads, " << count << " indices, index " << i;
    }
}

// As on one thread: the error of the smallest failing index is the one raised, and every index
// before it was handled.
TEST(ForEachIndex, RaisesTheFirstErrorInIndexOrder) {
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> seen(100);
    try {
      for_each_index(seen.size(), threads, [&](size_t i) {
        if (i == 13 || i == 37 || i == 38) throw std::runtime_error(std::to_string(i));
        ++seen[i];
      });
      ADD_FAILURE() << threads << " threads: no error raised";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "13") << threads << " threads";
    }
    for (size_t i = 0; i < 13; ++i)
      EXPECT_EQ(seen[i].load(), 1) << threads << " threads, index " << i;
  }
}

TEST(WorkerThreads, RunsEveryJobOnItsOwnThreads) {
  std::mutex mutex;
  std::set<std::thread::id> ran_on;
  std::vector<std::future<int>> results;
  {
    WorkerThreads workers(3);
    for (int i = 0; i < 50; ++i)
      results.push_back(workers.submit([&, i] {
        std::lock_guard lock(mutex);
        ran_on.insert(std::this_thread::get_id());
        return i * i;
      }));
    for (int i = 0; i < 50; ++i)
      EXPECT_EQ(results[size_t(i)].get(), i * i);
  }
  EXPECT_LE(ran_on.size(), 3u);
  EXPECT_EQ(ran_on.count(std::this_thread::get_id()), 0u);
}

// Destroying the threads lets the running job finish and settles every job queued behind it:
// each future is ready afterwards, with its result or, for a job dropped unstarted, a broken
// promise (which of the two depends on whether the thread took the job before the queue was
// dropped), never left pending.
TEST(WorkerThreads, SettlesEveryJobWhenDestroyed) {
  std::promise<void> started, release;
  std::future<void> running;
  std::vector<std::future<void>> queued;
  std::atomic<bool> finished{false};
  {
    WorkerThreads workers(1);
    running = workers.submit([&] {
      started.set_value();
      release.get_future().wait();
      finished = true;
    });
    for (int i = 0; i < 20; ++i)
      queued.push_back(workers.submit([] {}));
    started.get_future().wait();
    release.set_value();
  }
  EXPECT_TRUE(finished.load());
  EXPECT_NO_THROW(running.get());
  for (std::future<void>& job : queued) {
    ASSERT_EQ(job.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    try {
      job.get();
    } catch (const std::future_error& e) {
      EXPECT_EQ(e.code(), std::future_errc::broken_promise);
    }
  }
}

}  // namespace
}  // namespace wallfacer::detail
