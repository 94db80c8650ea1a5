// Starting the ranks of a GPU run without MPI: a process launched by a cluster scheduler (srun)
// learns its rank, the rank count and its local rank from the scheduler's environment, and every
// rank meets rank 0 over TCP at a rendezvous address (MASTER_ADDR/MASTER_PORT, or the first host
// of the job step's node list). The resulting control channel carries NCCL's unique id from rank
// 0 and serves the driver's control calls (agreement, gathering results to rank 0) that MPI
// serves under mpirun (docs/cuda.md, "Starting without MPI"). Plain POSIX sockets, no CUDA: built
// and tested in every build.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace wallfacer::runtime {

// A rendezvous or control-channel failure: a peer that never came, closed its connection, or
// sent something else. The message names this rank, the peer and the address.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads an environment variable; nullptr when unset (std::getenv, or a map in tests).
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup process_environment();

struct LaunchEnvironment {
  int rank = 0, size = 1, local_rank = 0;
  std::string address;  // where rank 0 listens
  int port = 0;
  std::string origin;  // which variables gave the address, for messages
};

// Whether the scheduler started several tasks of this command: SLURM_PROCID and SLURM_NTASKS
// set, with more than one task.
bool scheduler_launch(const EnvLookup& env);

// The launch as the scheduler describes it: rank SLURM_PROCID of SLURM_NTASKS (SLURM_NPROCS),
// local rank SLURM_LOCALID (0 when unset); the address MASTER_ADDR, else the first host of
// SLURM_STEP_NODELIST, else of SLURM_JOB_NODELIST; the port MASTER_PORT, else
// default_rendezvous_port. Throws InputError naming the variable that is missing or malformed.
LaunchEnvironment launch_environment(const EnvLookup& env);

// The first host of a Slurm host list: "gpu[03-05,9],login1" -> "gpu03", "rack[1-2]-n[4-5]" ->
// "rack1-n4". Throws InputError for an empty or unbalanced list.
std::string first_host(const std::string& nodelist);

// A port every task of one job step derives alike, so concurrent steps rarely collide:
// 20000 + (16 * SLURM_JOB_ID + SLURM_STEP_ID) mod 20000; 29500 without a job id.
int default_rendezvous_port(const EnvLookup& env);

// The host-side calls every rank makes in the same order (the control half of Backend).
class ControlChannel {
 public:
  virtual ~ControlChannel() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual bool all_ok(bool ok) = 0;  // logical AND over the ranks
  // Rank 0 receives every rank's bytes in rank order; other ranks an empty list.
  virtual std::vector<std::string> gather_to_root(const std::string& bytes) = 0;
  virtual double max_over_ranks(double value) = 0;
  virtual void barrier() = 0;
  // Rank 0's bytes on every rank (the argument is ignored elsewhere).
  virtual std::string broadcast_from_root(const std::string& bytes) = 0;
};

struct RendezvousOptions {
  // How long rank 0 waits for every other rank to connect, and the others keep trying to reach
  // it. The control calls afterwards wait as long as it takes, but fail at once when a peer's
  // connection closes (its process ended).
  double connect_timeout_seconds = 300;
};

// A star over TCP: rank 0 listens on every interface at the port, each other rank connects to
// the address and introduces itself (rank and size, checked). Messages are length-prefixed.
class TcpControlChannel final : public ControlChannel {
 public:
  TcpControlChannel(const LaunchEnvironment& launch, const RendezvousOptions& options = {});
  ~TcpControlChannel() override;
  TcpControlChannel(const TcpControlChannel&) = delete;
  TcpControlChannel& operator=(const TcpControlChannel&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool all_ok(bool ok) override;
  std::vector<std::string> gather_to_root(const std::string& bytes) override;
  double max_over_ranks(double value) override;
  void barrier() override;
  std::string broadcast_from_root(const std::string& bytes) override;

 private:
  void accept_ranks(int listener, double timeout);
  void connect_to_root(double timeout);
  void send_to(int peer, const std::string& bytes);
  std::string receive_from(int peer);

  int rank_, size_;
  std::string where_;      // "host:port"
  std::vector<int> sock_;  // rank 0: the socket of rank r at [r]; others: [0], rank 0's
};

}  // namespace wallfacer::runtime
