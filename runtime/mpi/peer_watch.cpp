#include "peer_watch.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace wallfacer::runtime::detail {

char process_state(int pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text;
  if (!stat || !std::getline(stat, text)) return '?';
  // "PID (COMMAND) STATE ...": the command may hold spaces and parentheses; the state follows
  // the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return '?';
  return text[close + 2];
}

std::string PeerWatch::lost(const std::vector<int>& ranks) const {
  if (self_ < 0 || size_t(self_) >= peers_.size()) return {};
  const std::string& here = peers_[size_t(self_)].host;
  for (int rank : ranks) {
    if (rank < 0 || size_t(rank) >= peers_.size() || rank == self_) continue;
    const PeerProcess& peer = peers_[size_t(rank)];
    if (peer.host != here) continue;
    const char state = process_state(peer.pid);
    const char* why = nullptr;
    if (state == 'T' || state == 't') why = "is stopped (SIGSTOP or a debugger)";
    if (state == 'Z' || state == 'X' || state == '?') why = "has exited";
    if (why) return fmt::format("rank {} (process {} on {}) {}", rank, peer.pid, peer.host, why);
  }
  return {};
}

}  // namespace wallfacer::runtime::detail
