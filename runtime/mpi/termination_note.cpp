#include "termination_note.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

namespace wallfacer::runtime::detail {
namespace {

// Two buffers, so the handler never reads one being rewritten: a new wait writes the other one
// and then publishes its index.
char g_waits[2][768];
std::atomic<int> g_current{-1};  // the buffer holding the current wait, -1: none
std::atomic<int64_t> g_since_ns{0};
int g_rank = -1;

int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// Only async-signal-safe calls below: no stdio, no allocation.
void put(char* line, size_t& at, size_t capacity, const char* text) {
  for (; *text && at + 1 < capacity; ++text)
    line[at++] = *text;
}

void put_number(char* line, size_t& at, size_t capacity, int64_t value) {
  char digits[24];
  size_t n = 0;
  do {
    digits[n++] = char('0' + value % 10);
    value /= 10;
  } while (value > 0 && n < sizeof digits);
  while (n > 0 && at + 1 < capacity)
    line[at++] = digits[--n];
}

void on_terminate(int signal) {
  char line[1024];
  size_t at = 0;
  put(line, at, sizeof line, "rank ");
  put_number(line, at, sizeof line, g_rank);
  put(line, at, sizeof line, ": ended by SIGTERM (what mpirun sends every rank once one has died)");
  const int current = g_current.load();
  if (current >= 0) {
    const int64_t tenths = std::max<int64_t>(0, (now_ns() - g_since_ns.load()) / 100000000);
    put(line, at, sizeof line, " after waiting ");
    put_number(line, at, sizeof line, tenths / 10);
    put(line, at, sizeof line, ".");
    put_number(line, at, sizeof line, tenths % 10);
    put(line, at, sizeof line, " s on");
    put(line, at, sizeof line, g_waits[current]);
  } else {
    put(line, at, sizeof line, " while not waiting on another rank");
  }
  put(line, at, sizeof line, "\n");
  ssize_t ignored = ::write(STDERR_FILENO, line, at);
  (void)ignored;
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

}  // namespace

void install_termination_note(int rank) {
  static const bool installed = [rank] {
    g_rank = rank;
    struct sigaction previous {};
    ::sigaction(SIGTERM, nullptr, &previous);
    if (previous.sa_handler != SIG_DFL) return false;
    struct sigaction action {};
    action.sa_handler = on_terminate;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGTERM, &action, nullptr);
    return true;
  }();
  (void)installed;
}

void note_waiting(const std::string& what) {
  const int next = g_current.load() == 0 ? 1 : 0;
  const size_t n = std::min(what.size(), sizeof g_waits[next] - 1);
  std::memcpy(g_waits[next], what.data(), n);
  g_waits[next][n] = '\0';
  g_since_ns = now_ns();
  g_current = next;
}

void note_not_waiting() {
  g_current = -1;
}

}  // namespace wallfacer::runtime::detail
