// Runs a piece of work in a forked child process and hands its text result back. SimGrid 3.32
// keeps process-wide state (clock, models, configuration) that no API resets, so a second
// simulation in one process would inherit the first one's clock and model; a fresh child per
// simulation makes every call independent and deterministic.
#pragma once

#include <functional>
#include <string>

namespace wallfacer::sim {

// Forks, runs `work` in the child and returns the string it returned. An InputError,
// ScheduleError or other std::exception thrown by `work` is rethrown here with the same type
// (InputError keeps its file and line) and message; a child killed by a signal becomes a
// std::runtime_error naming the signal.
std::string run_in_child_process(const std::function<std::string()>& work);

}  // namespace wallfacer::sim
