#include "interrupt.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace wallfacer::cli {
namespace {

std::atomic<const char*> g_command{"wallfacer"};
std::atomic<const char*> g_outcome{""};
std::atomic<const char*> g_stage{nullptr};
std::atomic<size_t> g_done{0}, g_total{0};
pid_t g_main_pid = 0;
bool g_terminal = false;

// Only async-signal-safe calls below: no stdio, no allocation.
void put(char* line, size_t& at, size_t capacity, const char* text) {
  for (; text && *text && at + 1 < capacity; ++text)
    line[at++] = *text;
}

void put_number(char* line, size_t& at, size_t capacity, size_t value) {
  char digits[24];
  size_t n = 0;
  do {
    digits[n++] = char('0' + value % 10);
    value /= 10;
  } while (value && n < sizeof digits);
  while (n > 0 && at + 1 < capacity)
    line[at++] = digits[--n];
}

void on_interrupt(int) {
  // Children forked for isolated simulations get the terminal's SIGINT too; only the command
  // itself speaks.
  if (::getpid() == g_main_pid) {
    char line[512];
    size_t at = 0;
    if (g_terminal) put(line, at, sizeof line, "\r\x1b[K");  // over a progress line
    put(line, at, sizeof line, g_command.load());
    put(line, at, sizeof line, ": interrupted (Ctrl-C)");
    if (const char* stage = g_stage.load()) {
      put(line, at, sizeof line, " while pricing ");
      put(line, at, sizeof line, stage);
      put(line, at, sizeof line, " ");
      put_number(line, at, sizeof line, g_done.load());
      put(line, at, sizeof line, "/");
      put_number(line, at, sizeof line, g_total.load());
      put(line, at, sizeof line, " candidates");
    }
    if (const char* outcome = g_outcome.load(); outcome && *outcome) {
      put(line, at, sizeof line, "; ");
      put(line, at, sizeof line, outcome);
    }
    put(line, at, sizeof line, "\n");
    ssize_t ignored = ::write(STDERR_FILENO, line, at);
    (void)ignored;
  }
  ::_exit(128 + SIGINT);
}

}  // namespace

void stop_cleanly_on_interrupt() {
  g_main_pid = ::getpid();
  g_terminal = ::isatty(STDERR_FILENO) != 0;
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
}

void set_interrupt_context(const char* command, const char* outcome) {
  g_command = command;
  g_outcome = outcome;
}

void set_interrupt_progress(const char* stage, size_t done, size_t total) {
  g_done = done;
  g_total = total;
  g_stage = stage;
}

}  // namespace wallfacer::cli
