// Columns timed ahead on lent threads (columns_ahead.hpp): each column is timed once, with what was
// known at or before its turn, never more than the window ahead, its result (or its error) handed
// over at its turn; columns not marked ahead are left to the caller, and a lent thread that starts
// after the pricing is over times nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "columns_ahead.hpp"
#include "lent_threads.hpp"

namespace wallfacer {
namespace {

using Columns = detail::ColumnsAhead<int, int>;

// What a test's columns saw: how often each was timed and with what was known.
struct Seen {
  explicit Seen(size_t n) : times(n, 0), known(n, -1) {}
  std::mutex mutex;
  std::vector<int> times, known;
  Columns::Time time() {
    return [this](size_t k, const int& now) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard lock(mutex);
      ++times[k];
      known[k] = now;
      return int(k) * 7;
    };
  }
};

TEST(ColumnsAhead, EachColumnIsTimedOnceWithWhatWasKnownWithinTheWindow) {
  constexpr size_t kColumns = 24, kWindow = 2;
  for (const int lent : {0, 1, 3}) {
    SCOPED_TRACE(lent);
    testing::ThreadsToLend threads(lent);
    Seen seen(kColumns);
    std::vector<bool> ahead(kColumns);
    for (size_t k = 0; k < kColumns; ++k)
      ahead[k] = k % 3 != 1;
    {
      Columns columns(ahead, kWindow, seen.time());
      for (size_t k = 0; k < kColumns; ++k) {
        // What the pricing knows at column k: the number of columns before it.
        columns.reach(k, int(k));
        columns.lend(threads.lender());
        if (ahead[k]) {
          EXPECT_EQ(columns.take(k, int(k)), int(k) * 7);
        }
      }
    }
    for (size_t k = 0; k < kColumns; ++k) {
      EXPECT_EQ(seen.times[k], ahead[k] ? 1 : 0) << k;
      if (!ahead[k]) continue;
      EXPECT_LE(seen.known[k], int(k)) << k;
      EXPECT_GE(seen.known[k], int(k) - int(kWindow)) << k;
    }
    if (lent > 0) {
      EXPECT_GT(threads.loans(), 0);
    }
  }
}

// A lent thread that runs while the pricing is at column 0 times the free columns within the
// window, no further; the pricing then takes their results without timing them again.
TEST(ColumnsAhead, ALentThreadTimesTheColumnsWithinTheWindow) {
  Seen seen(6);
  Columns columns(std::vector<bool>(6, true), 2, seen.time());
  columns.reach(0, 0);
  columns.lend(testing::lend_and_wait);
  EXPECT_EQ(seen.times, (std::vector<int>{1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(seen.known, (std::vector<int>{0, 0, 0, -1, -1, -1}));
  for (size_t k = 0; k < 6; ++k)
    EXPECT_EQ(columns.take(k, int(k)), int(k) * 7);
  EXPECT_EQ(seen.times, std::vector<int>(6, 1));
  EXPECT_EQ(seen.known, (std::vector<int>{0, 0, 0, 3, 4, 5}));
}

// An error of a column timed on a lent thread is raised when the pricing takes that column.
TEST(ColumnsAhead, AnErrorIsRaisedWhenItsColumnIsTaken) {
  Columns columns(std::vector<bool>(4, true), 3, [](size_t k, const int&) -> int {
    if (k == 2) throw std::runtime_error("column 2 cannot be timed");
    return int(k);
  });
  columns.reach(0, 0);
  columns.lend(testing::lend_and_wait);  // times columns 0 to 3, the error kept for column 2
  EXPECT_EQ(columns.take(0, 0), 0);
  EXPECT_EQ(columns.take(1, 1), 1);
  EXPECT_THROW(columns.take(2, 2), std::runtime_error);
  EXPECT_EQ(columns.take(3, 3), 3);
}

// Loans that start only after the pricing is over time nothing; those never started leave the
// pricing to time every column itself.
TEST(ColumnsAhead, LoansStartedAfterThePricingTimeNothing) {
  Seen seen(5);
  std::vector<std::function<void()>> deferred;
  auto defer = [&](std::function<void()> work) {
    deferred.push_back(std::move(work));
    return true;
  };
  {
    Columns columns(std::vector<bool>(5, true), 2, seen.time());
    for (size_t k = 0; k < 5; ++k) {
      columns.reach(k, int(k));
      columns.lend(defer);
      EXPECT_EQ(columns.take(k, int(k)), int(k) * 7);
    }
  }
  EXPECT_FALSE(deferred.empty());
  EXPECT_EQ(seen.times, std::vector<int>(5, 1));
  for (std::function<void()>& work : deferred)
    work();
  EXPECT_EQ(seen.times, std::vector<int>(5, 1));
}

}  // namespace
}  // namespace wallfacer
