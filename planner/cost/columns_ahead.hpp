// Columns of a sampled step timed ahead on threads lent to its pricing (docs/cost-model.md,
// "Columns timed side by side"). The pricing takes the columns' results one after another in its
// timing order and decides on each as if it had timed it there; the threads it borrows meanwhile
// time the next columns with what the pricing knew when they took them. A column's result depends
// on the column and on what was known of the columns before it, and the pricing decides with what
// it knows at its turn, so what it returns does not depend on how many threads helped.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>

namespace wallfacer::detail {

// `Column`: a column's result; `Known`: what the pricing knows of the columns taken so far.
template <typename Column, typename Known>
class ColumnsAhead {
 public:
  // `time(k, known)`: column k timed with `known`. It runs on several threads at once, for
  // different columns.
  using Time = std::function<Column(size_t, const Known&)>;
  // `ahead[k]`: whether column k (in timing order) may be timed ahead; at most `window` columns
  // past the one the pricing is at are, which bounds the results held.
  ColumnsAhead(std::vector<bool> ahead, size_t window, Time time)
      : state_(std::make_shared<State>(std::move(ahead), window, std::move(time))) {}
  // Lent threads finish the column they time; those not started yet time nothing.
  ~ColumnsAhead() {
    std::unique_lock lock(state_->mutex);
    state_->stopping = true;
    state_->changed.wait(lock, [this] { return state_->running == 0; });
  }
  ColumnsAhead(const ColumnsAhead&) = delete;
  ColumnsAhead& operator=(const ColumnsAhead&) = delete;

  // Borrows threads from `lender`, one for each column that may be timed ahead now (within the
  // window, not taken), as long as it lends them.
  void lend(const ThreadLender& lender) {
    for (;;) {
      {
        std::lock_guard lock(state_->mutex);
        if (state_->lent >= state_->free_in_window()) return;
        ++state_->lent;
      }
      if (lender([state = state_] { state->help(); })) continue;
      std::lock_guard lock(state_->mutex);
      --state_->lent;
      return;
    }
  }
  // Column k (ahead[k]): the result of a lent thread, or timed here with `known`. While a lent
  // thread times it, this one times the next free columns.
  Column take(size_t k, const Known& known) {
    State& s = *state_;
    std::unique_lock lock(s.mutex);
    s.reach(k, known);
    for (;;) {
      if (s.status[k] == Status::Done) {
        s.status[k] = Status::Taken;
        if (s.errors[k]) std::rethrow_exception(s.errors[k]);
        Column column = std::move(*s.results[k]);
        s.results[k].reset();
        return column;
      }
      if (s.status[k] == Status::Free) {
        s.status[k] = Status::Taken;
        lock.unlock();
        return s.time(k, known);
      }
      if (const std::optional<size_t> other = s.next_free()) {
        s.time_one(*other, lock);
        continue;
      }
      s.changed.wait(lock);
    }
  }
  // The pricing has come to column k, which it times itself: the window moves on.
  void reach(size_t k, const Known& known) {
    std::lock_guard lock(state_->mutex);
    state_->reach(k, known);
  }

 private:
  enum class Status { Free, Running, Done, Taken };
  // Shared with the lent threads, which may start after the pricing is over (they see `stopping`).
  struct State {
    State(std::vector<bool> ahead_, size_t window_, Time time_)
        : ahead(std::move(ahead_)),
          status(ahead.size(), Status::Free),
          results(ahead.size()),
          errors(ahead.size()),
          window(window_),
          time(std::move(time_)) {}
    std::mutex mutex;
    std::condition_variable changed;  // a column done, a lent thread gone
    std::vector<bool> ahead;
    std::vector<Status> status;
    std::vector<std::optional<Column>> results;
    std::vector<std::exception_ptr> errors;
    size_t window, at = 0;  // at: the column the pricing is at
    Known known{};          // what the pricing knew there
    bool stopping = false;
    int lent = 0, running = 0;  // threads lent and not gone yet; those of them started
    Time time;

    void reach(size_t k, const Known& now) {
      at = k;
      known = now;
    }
    // The columns a lent thread may take now: within the window, not taken, while the pricing lasts.
    size_t window_end() const { return stopping ? at : std::min(ahead.size(), at + window + 1); }
    bool takeable(size_t k) const { return ahead[k] && status[k] == Status::Free; }
    std::optional<size_t> next_free() const {
      for (size_t k = at; k < window_end(); ++k)
        if (takeable(k)) return k;
      return std::nullopt;
    }
    int free_in_window() const {
      int count = 0;
      for (size_t k = at; k < window_end(); ++k)
        count += takeable(k);
      return count;
    }
    // Times column k with what is known now, unlocking meanwhile.
    void time_one(size_t k, std::unique_lock<std::mutex>& lock) {
      status[k] = Status::Running;
      const Known now = known;
      lock.unlock();
      std::optional<Column> column;
      std::exception_ptr error;
      try {
        column.emplace(time(k, now));
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      results[k] = std::move(column);
      errors[k] = error;
      status[k] = Status::Done;
      changed.notify_all();
    }
    // A lent thread: times free columns until none is left in the window.
    void help() {
      std::unique_lock lock(mutex);
      ++running;
      while (const std::optional<size_t> k = next_free())
        time_one(*k, lock);
      --running;
      --lent;
      changed.notify_all();
    }
  };
  std::shared_ptr<State> state_;
};

}  // namespace wallfacer::detail
