// The scheduler's launch environment and the TCP control channel (rendezvous.hpp).
#include <wallfacer/runtime/rendezvous.hpp>

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::runtime {

EnvLookup process_environment() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

namespace {

const char* lookup(const EnvLookup& env, const char* name) {
  const char* value = env(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// A whole non-negative decimal number, or InputError naming the variable.
int64_t integer_variable(const char* name, const char* value) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || v < 0)
    throw InputError(fmt::format("{}='{}': expected a non-negative whole number", name, value));
  return int64_t(v);
}

using Clock = std::chrono::steady_clock;

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

}  // namespace

bool scheduler_launch(const EnvLookup& env) {
  const char* tasks = lookup(env, "SLURM_NTASKS");
  if (tasks == nullptr) tasks = lookup(env, "SLURM_NPROCS");
  return lookup(env, "SLURM_PROCID") != nullptr && tasks != nullptr && std::atoi(tasks) > 1;
}

std::string first_host(const std::string& nodelist) {
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == ',' && depth == 0) break;
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) break;
    first += c;
  }
  if (depth != 0 || first.empty())
    throw InputError(fmt::format("node list '{}': expected host names like gpu[01-04],login1", nodelist));
  // Each bracket keeps its first item's first number (zero padding included).
  std::string host;
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i] != '[') {
      host += first[i];
      continue;
    }
    const size_t close = first.find(']', i);
    const std::string items = first.substr(i + 1, close - i - 1);
    const std::string item = items.substr(0, items.find_first_of(",-"));
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
      throw InputError(fmt::format("node list '{}': '[{}]' is not a range of numbers", nodelist, items));
    host += item;
    i = close;
  }
  return host;
}

int default_rendezvous_port(const EnvLookup& env) {
  const char* job = lookup(env, "SLURM_JOB_ID");
  if (job == nullptr) return 29500;
  const char* step = lookup(env, "SLURM_STEP_ID");
  const int64_t id = integer_variable("SLURM_JOB_ID", job);
  const int64_t s = step != nullptr ? integer_variable("SLURM_STEP_ID", step) : 0;
  return int(20000 + (16 * (id % 100000) + s % 16) % 20000);
}

LaunchEnvironment launch_environment(const EnvLookup& env) {
  LaunchEnvironment launch;
  const char* rank = lookup(env, "SLURM_PROCID");
  const char* tasks_name = lookup(env, "SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  const char* tasks = lookup(env, tasks_name);
  if (rank == nullptr || tasks == nullptr)
    throw InputError(
        "--bootstrap env: SLURM_PROCID and SLURM_NTASKS are not set; start the ranks with srun, or use "
        "--bootstrap mpi under mpirun");
  launch.rank = int(integer_variable("SLURM_PROCID", rank));
  launch.size = int(integer_variable(tasks_name, tasks));
  if (launch.size < 1 || launch.rank >= launch.size)
    throw InputError(
        fmt::format("SLURM_PROCID={} with {}={}: the rank must be below the task count", rank, tasks_name, tasks));
  if (const char* local = lookup(env, "SLURM_LOCALID"))
    launch.local_rank = int(integer_variable("SLURM_LOCALID", local));
  if (const char* addr = lookup(env, "MASTER_ADDR")) {
    launch.address = addr;
    launch.origin = "MASTER_ADDR";
  } else {
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"})
      if (const char* list = lookup(env, name)) {
        launch.address = first_host(list);
        launch.origin = fmt::format("the first host of {}", name);
        break;
      }
  }
  if (launch.address.empty())
    throw InputError(
        "--bootstrap env: no rendezvous address: set MASTER_ADDR (rank 0's host), or run under srun, which sets "
        "SLURM_STEP_NODELIST");
  if (const char* port = lookup(env, "MASTER_PORT")) {
    const int64_t p = integer_variable("MASTER_PORT", port);
    if (p < 1 || p > 65535) throw InputError(fmt::format("MASTER_PORT={}: expected a port from 1 to 65535", port));
    launch.port = int(p);
    launch.origin += ", port MASTER_PORT";
  } else {
    launch.port = default_rendezvous_port(env);
    launch.origin += ", port derived from SLURM_JOB_ID";
  }
  return launch;
}

namespace {

// The introduction every rank sends rank 0: magic, rank, size.
constexpr uint32_t kMagic = 0x57465256;  // "WFRV"

void close_quietly(int fd) {
  if (fd >= 0) ::close(fd);
}

// Waits until fd is readable (or writable); false on timeout. timeout < 0: forever.
bool wait_for(int fd, short events, double timeout) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int ms = timeout < 0 ? -1 : int(std::max(0.0, timeout) * 1000);
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Sends or receives exactly `bytes`; an error message on failure, empty when done.
std::string transfer_all(int fd, char* data, size_t bytes, bool send, double timeout) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(timeout, 0.0)));
  size_t done = 0;
  while (done < bytes) {
    if (!wait_for(fd, send ? POLLOUT : POLLIN, timeout < 0 ? -1 : seconds_left(deadline)))
      return fmt::format("nothing within {:g} s", timeout);
    const ssize_t n =
        send ? ::send(fd, data + done, bytes - done, MSG_NOSIGNAL) : ::recv(fd, data + done, bytes - done, 0);
    if (n == 0) return "the connection was closed (its process ended?)";
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return std::strerror(errno);
    }
    done += size_t(n);
  }
  return {};
}

void put_u32(std::string& out, uint32_t v) {
  for (int b = 0; b < 4; ++b)
    out += char((v >> (8 * b)) & 0xff);
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int b = 3; b >= 0; --b)
    v = (v << 8) | uint8_t(p[b]);
  return v;
}

}  // namespace

TcpControlChannel::TcpControlChannel(const LaunchEnvironment& launch, const RendezvousOptions& options)
    : rank_(launch.rank), size_(launch.size), where_(fmt::format("{}:{}", launch.address, launch.port)) {
  sock_.assign(size_t(rank_ == 0 ? size_ : 1), -1);
  if (size_ == 1) return;
  if (rank_ != 0) {
    connect_to_root(options.connect_timeout_seconds);
    return;
  }
  const int listener = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (listener < 0) throw RendezvousError(fmt::format("rank 0: socket() failed: {}", std::strerror(errno)));
  const int yes = 1, no = 0;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  ::setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));  // IPv4 too
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_any;
  addr.sin6_port = htons(uint16_t(launch.port));
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listener, size_) != 0) {
    const std::string why = std::strerror(errno);
    close_quietly(listener);
    throw RendezvousError(
        fmt::format("rank 0: cannot listen on port {} for the rendezvous ({}): {}; choose another "
                    "with MASTER_PORT",
                    launch.port, launch.origin, why));
  }
  try {
    accept_ranks(listener, options.connect_timeout_seconds);
  } catch (...) {
    close_quietly(listener);
    throw;
  }
  close_quietly(listener);
}

TcpControlChannel::~TcpControlChannel() {
  for (int fd : sock_)
    close_quietly(fd);
}

void TcpControlChannel::accept_ranks(int listener, double timeout) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  int joined = 1;
  while (joined < size_) {
    if (!wait_for(listener, POLLIN, seconds_left(deadline))) {
      std::vector<int> missing;
      for (int r = 1; r < size_; ++r)
        if (sock_[size_t(r)] < 0) missing.push_back(r);
      throw RendezvousError(fmt::format("rank 0: ranks {} did not connect to {} within {:g} s",
                                        fmt::join(missing, ", "), where_, timeout));
    }
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) continue;
    std::string hello(12, '\0');
    if (!transfer_all(fd, hello.data(), hello.size(), false, std::max(1.0, seconds_left(deadline))).empty() ||
        get_u32(hello.data()) != kMagic) {
      close_quietly(fd);  // not one of ours (a port scan, another program)
      continue;
    }
    const int r = int(get_u32(hello.data() + 4)), size = int(get_u32(hello.data() + 8));
    std::string problem;
    if (size != size_)
      problem = fmt::format("rank {} was started with {} ranks, rank 0 with {}", r, size, size_);
    else if (r <= 0 || r >= size_)
      problem = fmt::format("a process introduced itself as rank {} of {}", r, size_);
    else if (sock_[size_t(r)] >= 0)
      problem = fmt::format("two processes introduced themselves as rank {}", r);
    if (!problem.empty()) {
      close_quietly(fd);
      throw RendezvousError(fmt::format("rank 0: rendezvous at {}: {}", where_, problem));
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sock_[size_t(r)] = fd;
    ++joined;
  }
  barrier();  // every rank knows the others are there
}

void TcpControlChannel::connect_to_root(double timeout) {
  const size_t colon = where_.rfind(':');
  const std::string host = where_.substr(0, colon), port = where_.substr(colon + 1);
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  std::string last = "no attempt";
  for (;;) {
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
    if (rc != 0) {
      last = fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc));
    } else {
      for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          sock_[0] = fd;
          break;
        }
        last = std::strerror(errno);
        close_quietly(fd);
      }
      ::freeaddrinfo(found);
    }
    if (sock_[0] >= 0) break;
    if (seconds_left(deadline) <= 0)
      throw RendezvousError(
          fmt::format("rank {}: cannot reach rank 0 at {} within {:g} s: {}", rank_, where_, timeout, last));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int one = 1;
  ::setsockopt(sock_[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::string hello;
  put_u32(hello, kMagic);
  put_u32(hello, uint32_t(rank_));
  put_u32(hello, uint32_t(size_));
  if (const std::string e = transfer_all(sock_[0], hello.data(), hello.size(), true, timeout); !e.empty())
    throw RendezvousError(fmt::format("rank {}: introducing itself to rank 0 at {}: {}", rank_, where_, e));
  barrier();
}

void TcpControlChannel::send_to(int peer, const std::string& bytes) {
  std::string frame;
  put_u32(frame, uint32_t(bytes.size()));
  frame += bytes;
  const int fd = sock_[size_t(rank_ == 0 ? peer : 0)];
  if (const std::string e = transfer_all(fd, frame.data(), frame.size(), true, -1); !e.empty())
    throw RendezvousError(fmt::format("rank {}: sending to rank {} (rendezvous {}): {}", rank_, peer, where_, e));
}

std::string TcpControlChannel::receive_from(int peer) {
  const int fd = sock_[size_t(rank_ == 0 ? peer : 0)];
  char header[4];
  std::string e = transfer_all(fd, header, 4, false, -1);
  std::string bytes;
  if (e.empty()) {
    bytes.resize(get_u32(header));
    e = transfer_all(fd, bytes.data(), bytes.size(), false, -1);
  }
  if (!e.empty())
    throw RendezvousError(fmt::format("rank {}: waiting for rank {} (rendezvous {}): {}", rank_, peer, where_, e));
  return bytes;
}

std::vector<std::string> TcpControlChannel::gather_to_root(const std::string& bytes) {
  if (rank_ != 0) {
    send_to(0, bytes);
    return {};
  }
  std::vector<std::string> all{bytes};
  for (int r = 1; r < size_; ++r)
    all.push_back(receive_from(r));
  return all;
}

std::string TcpControlChannel::broadcast_from_root(const std::string& bytes) {
  if (rank_ != 0) return receive_from(0);
  for (int r = 1; r < size_; ++r)
    send_to(r, bytes);
  return bytes;
}

bool TcpControlChannel::all_ok(bool ok) {
  std::string verdict(1, ok ? '1' : '0');
  if (rank_ == 0)
    for (const std::string& b : gather_to_root(verdict))
      if (b != "1") verdict = "0";
  if (rank_ != 0) gather_to_root(verdict);
  return broadcast_from_root(verdict) == "1";
}

double TcpControlChannel::max_over_ranks(double value) {
  std::string mine(sizeof(double), '\0');
  std::memcpy(mine.data(), &value, sizeof(double));
  double result = value;
  for (const std::string& b : gather_to_root(mine)) {
    double v = 0;
    if (b.size() != sizeof(double)) throw RendezvousError(fmt::format("rank 0: a malformed value at {}", where_));
    std::memcpy(&v, b.data(), sizeof(double));
    result = std::max(result, v);
  }
  std::string out(sizeof(double), '\0');
  std::memcpy(out.data(), &result, sizeof(double));
  out = broadcast_from_root(out);
  std::memcpy(&result, out.data(), sizeof(double));
  return result;
}

void TcpControlChannel::barrier() {
  all_ok(true);
}

}  // namespace wallfacer::runtime
