#include "isolated_run.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/simulator/simulator.hpp>

namespace wallfacer::sim {
namespace {

// First byte of the child's message: what follows is a result or an error of this kind.
enum class Outcome : char { Ok = 'O', Input = 'I', Schedule = 'S', Other = 'E' };

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

std::string read_all(int fd) {
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, size_t(n));
  }
  return text;
}

// Fields separated by NUL: the message cannot contain one.
std::string encode_input_error(const InputError& e) {
  return std::string(1, char(Outcome::Input)) + e.file() + '\0' + std::to_string(e.line()) + '\0' + e.message();
}

[[noreturn]] void child_main(int fd, const std::function<std::string()>& work) {
  std::string message;
  try {
    message = std::string(1, char(Outcome::Ok)) + work();
  } catch (const InputError& e) {
    message = encode_input_error(e);
  } catch (const ScheduleError& e) {
    message = std::string(1, char(Outcome::Schedule)) + e.what();
  } catch (const std::exception& e) {
    message = std::string(1, char(Outcome::Other)) + e.what();
  }
  bool written = write_all(fd, message);
  std::fflush(stderr);
  // Skip destructors and atexit handlers: the parent owns every shared resource, and tearing
  // down a large simulation only costs time.
  ::_exit(written ? 0 : 3);
}

[[noreturn]] void rethrow(const std::string& message) {
  auto outcome = Outcome(message[0]);
  std::string body = message.substr(1);
  if (outcome == Outcome::Input) {
    size_t a = body.find('\0');
    size_t b = body.find('\0', a + 1);
    throw InputError(body.substr(0, a), std::stoi(body.substr(a + 1, b - a - 1)), body.substr(b + 1));
  }
  if (outcome == Outcome::Schedule) throw ScheduleError(body);
  throw std::runtime_error(body);
}

}  // namespace

ChildProcess start_child_process(const std::function<std::string()>& work) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(fmt::format("simulate: pipe failed: {}", std::strerror(errno)));
  // Buffered output would otherwise be written twice, once by each process.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  pid_t child = ::fork();
  if (child < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(fmt::format("simulate: fork failed: {}", std::strerror(errno)));
  }
  if (child == 0) {
    ::close(fds[0]);
#ifdef __linux__
    // A simulation is useless once its parent is gone (interrupted, killed): it goes too, rather
    // than running on for minutes. The signal follows the forking thread, which waits for the
    // child in finish_child_process, so it outlives the child unless the process dies. The
    // check covers a parent that died before the request took effect.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(3);
#endif
    child_main(fds[1], work);
  }
  ::close(fds[1]);
  return {int(child), fds[0]};
}

namespace {

// Waits until the child's pipe has data or is closed, or until `cancel` turns true (then false).
bool wait_readable(int fd, const std::atomic<bool>* cancel) {
  if (!cancel) return true;
  pollfd entry{fd, POLLIN, 0};
  for (;;) {
    if (cancel->load()) return false;
    const int n = ::poll(&entry, 1, 50);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let the blocking read report what is wrong
  }
}

}  // namespace

std::string finish_child_process(ChildProcess& child, const std::atomic<bool>* cancel) {
  if (!wait_readable(child.result_fd, cancel)) {
    ::kill(pid_t(child.pid), SIGKILL);
    ::close(child.result_fd);
    child.result_fd = -1;
    while (::waitpid(pid_t(child.pid), nullptr, 0) < 0 && errno == EINTR) {
    }
    child.pid = -1;
    throw SimulationCancelled();
  }
  // A child blocked on a full pipe waits until its turn comes here; it cannot deadlock. Once the
  // first bytes are there, the child has finished its work and only writes the rest.
  std::string message = read_all(child.result_fd);
  ::close(child.result_fd);
  child.result_fd = -1;
  int status = 0;
  while (::waitpid(pid_t(child.pid), &status, 0) < 0 && errno == EINTR) {
  }
  child.pid = -1;
  if (WIFSIGNALED(status))
    throw std::runtime_error(
        fmt::format("simulation process died of signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status))));
  if (message.empty() || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(fmt::format("simulation process failed (exit status {})", WEXITSTATUS(status)));
  if (Outcome(message[0]) != Outcome::Ok) rethrow(message);
  return message.substr(1);
}

std::string run_in_child_process(const std::function<std::string()>& work) {
  ChildProcess child = start_child_process(work);
  return finish_child_process(child);
}

}  // namespace wallfacer::sim
