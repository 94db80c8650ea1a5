// posix_spawn of bash with one pipe for stdout and stderr, read with poll against a deadline.
// The shell is only reaped after its process group has been killed, so the group's id cannot be
// reused by an unrelated process before that kill.
#include "doc_commands/shell_run.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace wallfacer::doc_commands {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxOutput = size_t(64) << 20;

struct Child {
  pid_t pid = -1;
  int fd = -1;
  bool exited = false, eof = false;
  std::string output;
};

// Starts `bash -c command` in its own process group with the pipe as stdout and stderr.
Child spawn(const std::string& command, const std::filesystem::path& directory,
            const std::vector<std::string>& environment, std::string& error) {
  Child child;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return child;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addchdir_np(&actions, directory.c_str());
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, reset;
  sigemptyset(&none);
  sigemptyset(&reset);
  // A runner that ignores these (SIGPIPE often is) must not pass that on to the command.
  for (int signal : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD})
    sigaddset(&reset, signal);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &reset);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::string shell = "/bin/bash", dash_c = "-c", text = command;
  char* argv[] = {shell.data(), dash_c.data(), text.data(), nullptr};
  std::vector<char*> envp;
  for (const std::string& variable : environment)
    envp.push_back(const_cast<char*>(variable.c_str()));
  envp.push_back(nullptr);
  const int rc = posix_spawn(&child.pid, shell.c_str(), &actions, &attributes, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  close(fds[1]);
  if (rc != 0) {
    error = "cannot start /bin/bash in " + directory.string() + ": " + std::strerror(rc);
    close(fds[0]);
    child.pid = -1;
    return child;
  }
  child.fd = fds[0];
  return child;
}

// True once the shell has exited; it stays a zombie (WNOWAIT) until reap().
bool has_exited(const Child& child) {
  siginfo_t info{};
  return waitid(P_PID, id_t(child.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == child.pid;
}

// Reads output until the shell has exited and the pipe is closed, or until `until`. Once the
// shell is gone, whatever still holds the pipe gets two more seconds.
void pump(Child& child, Clock::time_point until) {
  char buffer[65536];
  while (!(child.exited && child.eof) && Clock::now() < until) {
    if (!child.exited && has_exited(child)) {
      child.exited = true;
      until = std::min(until, Clock::now() + std::chrono::seconds(2));
    }
    if (child.eof) {
      poll(nullptr, 0, 10);
      continue;
    }
    pollfd ready{child.fd, POLLIN, 0};
    if (poll(&ready, 1, 50) <= 0) continue;
    const ssize_t n = read(child.fd, buffer, sizeof buffer);
    if (n > 0 && child.output.size() < kMaxOutput)
      child.output.append(buffer, size_t(n));
    else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
      child.eof = true;
  }
}

// Kills what is left of the group, reaps the shell and returns its status as a shell reports it.
int reap(Child& child) {
  killpg(child.pid, SIGKILL);
  int status = 0;
  while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  child.exited = true;
  pump(child, Clock::now() + std::chrono::seconds(1));  // what was written before the kill
  close(child.fd);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

}  // namespace

ShellResult run_shell(const std::string& command, const std::filesystem::path& directory,
                      const std::vector<std::string>& environment, double timeout_seconds) {
  ShellResult result;
  const Clock::time_point start = Clock::now();
  Child child = spawn(command, directory, environment, result.error);
  if (child.pid < 0) return result;
  pump(child, start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds)));
  if (!child.exited) {
    result.timed_out = true;
    killpg(child.pid, SIGTERM);  // lets mpirun take its ranks down with it
    pump(child, Clock::now() + std::chrono::seconds(5));
  }
  result.status = reap(child);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.output = std::move(child.output);
  if (result.output.size() >= kMaxOutput) result.output += "\n[output cut at 64 MiB]\n";
  return result;
}

}  // namespace wallfacer::doc_commands
