// Runs a piece of work in a forked child process and hands its text result back. SimGrid 3.32
// keeps process-wide state (clock, models, configuration) that no API resets, so a second
// simulation in one process would inherit the first one's clock and model; a fresh child per
// simulation makes every call independent and deterministic.
#pragma once

#include <atomic>
#include <functional>
#include <stdexcept>
#include <string>

namespace wallfacer::sim {

// Forks, runs `work` in the child and returns the string it returned. An InputError,
// ScheduleError or other std::exception thrown by `work` is rethrown here with the same type
// (InputError keeps its file and line) and message; a child killed by a signal becomes a
// std::runtime_error naming the signal.
std::string run_in_child_process(const std::function<std::string()>& work);

// The same in two halves, so that several children can run at once: start_child_process forks
// and returns at once; finish_child_process waits for that child and returns its result or
// rethrows its error, as run_in_child_process does. Every started child must be finished.
struct ChildProcess {
  int pid = -1;
  int result_fd = -1;
};
ChildProcess start_child_process(const std::function<std::string()>& work);
// With `cancel`, the wait checks the flag every 50 ms; once it is set the child is killed and
// reaped and SimulationCancelled is thrown.
std::string finish_child_process(ChildProcess& child, const std::atomic<bool>* cancel = nullptr);

}  // namespace wallfacer::sim
