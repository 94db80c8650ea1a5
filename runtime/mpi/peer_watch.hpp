// Noticing a lost peer while a rank waits on it. mpirun ends a job when a process exits, but a
// process that is stopped (SIGSTOP, a debugger) or gone without its launcher noticing holds its
// peers until their stall limit. Ranks on the same host can ask the kernel about each other:
// every rank learns each rank's host and process id at start, and a rank that has waited a
// while checks the process state of the ranks it waits on. A slow rank (running or sleeping) is
// never taken for a lost one. Internal to the MPI backend; no MPI here.
#pragma once

#include <string>
#include <vector>

namespace wallfacer::runtime::detail {

struct PeerProcess {
  std::string host;
  int pid = 0;
};

// The state letter of /proc/PID/stat (R, S, D, T, t, Z, X...), or '?' when the process is gone.
char process_state(int pid);

class PeerWatch {
 public:
  PeerWatch() = default;
  PeerWatch(int self, std::vector<PeerProcess> peers) : self_(self), peers_(std::move(peers)) {}

  // "" when every rank of `ranks` on this host is alive and not stopped; else what is wrong
  // with the first that is not ("rank 2 (process 1234 on host) is stopped (SIGSTOP or a
  // debugger)"). Ranks on other hosts are not checked (their stall limit still applies).
  std::string lost(const std::vector<int>& ranks) const;

 private:
  int self_ = -1;
  std::vector<PeerProcess> peers_;
};

}  // namespace wallfacer::runtime::detail
