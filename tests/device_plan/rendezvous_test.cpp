// Starting a GPU run without MPI (rendezvous.hpp): the scheduler's variables read into a launch
// (host lists, overrides, every missing or malformed variable named), and the TCP control
// channel run by several ranks as threads on localhost, its results compared with what each
// call must give (AND, rank-ordered gather, maximum, rank 0's bytes), and its failures (a rank
// that never comes, a rank that leaves, a rank started with another size) named.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/rendezvous.hpp>

namespace wallfacer::testing {
namespace {

using runtime::LaunchEnvironment;
using runtime::RendezvousError;
using runtime::TcpControlChannel;

runtime::EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// A port nothing listens on right now (the kernel's choice for a socket bound to port 0).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

LaunchEnvironment local_launch(int rank, int size, int port) {
  LaunchEnvironment l;
  l.rank = rank;
  l.size = size;
  l.address = "127.0.0.1";
  l.port = port;
  l.origin = "test";
  return l;
}

TEST(Rendezvous, FirstHostOfSlurmHostLists) {
  EXPECT_EQ(runtime::first_host("gpu[03-05,9],login1"), "gpu03");
  EXPECT_EQ(runtime::first_host("login1,gpu[1-2]"), "login1");
  EXPECT_EQ(runtime::first_host("rack[1-2]-n[004-005]"), "rack1-n004");
  EXPECT_EQ(runtime::first_host("node7"), "node7");
  EXPECT_THROW(runtime::first_host(""), InputError);
  EXPECT_THROW(runtime::first_host("gpu[1-2"), InputError);
  EXPECT_THROW(runtime::first_host("gpu[a-b]"), InputError);
}

TEST(Rendezvous, LaunchFromSlurmVariables) {
  const auto launch = runtime::launch_environment(env_of({{"SLURM_PROCID", "3"},
                                                          {"SLURM_NTASKS", "8"},
                                                          {"SLURM_LOCALID", "1"},
                                                          {"SLURM_STEP_NODELIST", "gpu[12-13]"},
                                                          {"SLURM_JOB_NODELIST", "other"},
                                                          {"SLURM_JOB_ID", "4242"},
                                                          {"SLURM_STEP_ID", "2"}}));
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.size, 8);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.address, "gpu12");
  EXPECT_EQ(launch.port, 20000 + (16 * 4242 + 2) % 20000);
  EXPECT_NE(launch.origin.find("SLURM_STEP_NODELIST"), std::string::npos);
}

TEST(Rendezvous, MasterVariablesOverrideTheNodeList) {
  const auto launch = runtime::launch_environment(env_of({{"SLURM_PROCID", "0"},
                                                          {"SLURM_NPROCS", "2"},
                                                          {"SLURM_JOB_NODELIST", "gpu1"},
                                                          {"MASTER_ADDR", "10.0.0.5"},
                                                          {"MASTER_PORT", "31000"}}));
  EXPECT_EQ(launch.size, 2);
  EXPECT_EQ(launch.local_rank, 0);
  EXPECT_EQ(launch.address, "10.0.0.5");
  EXPECT_EQ(launch.port, 31000);
  EXPECT_EQ(runtime::default_rendezvous_port(env_of({})), 29500);
}

void expect_input_error(const std::map<std::string, std::string>& vars, const std::string& needle) {
  try {
    runtime::launch_environment(env_of(vars));
    ADD_FAILURE() << "accepted, expected an error naming " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Rendezvous, MissingOrMalformedVariablesAreNamed) {
  expect_input_error({{"SLURM_NTASKS", "2"}, {"MASTER_ADDR", "h"}}, "SLURM_PROCID");
  expect_input_error({{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "2"}, {"MASTER_ADDR", "h"}}, "SLURM_PROCID='x1'");
  expect_input_error({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}, {"MASTER_ADDR", "h"}}, "below the task count");
  expect_input_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, "MASTER_ADDR");
  expect_input_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
                     "MASTER_PORT=70000");
  EXPECT_FALSE(runtime::scheduler_launch(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}})));
  EXPECT_TRUE(runtime::scheduler_launch(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}})));
  EXPECT_FALSE(runtime::scheduler_launch(env_of({{"SLURM_NTASKS", "4"}})));
}

TEST(Rendezvous, ControlCallsOverLocalhost) {
  constexpr int kRanks = 4;
  const int port = free_port();
  std::vector<std::string> failures(kRanks);
  std::vector<std::vector<std::string>> gathered(kRanks);
  std::vector<double> maxima(kRanks);
  std::vector<int> all_true(kRanks), one_false(kRanks);
  std::vector<std::string> id(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      try {
        TcpControlChannel channel(local_launch(r, kRanks, port), {30});
        all_true[size_t(r)] = channel.all_ok(true);
        one_false[size_t(r)] = channel.all_ok(r != 2);
        gathered[size_t(r)] = channel.gather_to_root(std::string(size_t(r) + 1, char('a' + r)));
        maxima[size_t(r)] = channel.max_over_ranks(r == 1 ? 7.25 : -double(r));
        // 128 bytes with zeros in them, as NCCL's unique id.
        std::string bytes(128, '\0');
        for (size_t i = 0; i < bytes.size(); i += 3)
          bytes[i] = char(r == 0 ? i : 255);
        id[size_t(r)] = channel.broadcast_from_root(bytes);
        channel.barrier();
      } catch (const std::exception& e) {
        failures[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads)
    t.join();
  std::string root_id(128, '\0');
  for (size_t i = 0; i < root_id.size(); i += 3)
    root_id[i] = char(i);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(failures[size_t(r)], "") << "rank " << r;
    EXPECT_TRUE(all_true[size_t(r)]);
    EXPECT_FALSE(one_false[size_t(r)]);
    EXPECT_EQ(maxima[size_t(r)], 7.25);
    EXPECT_EQ(id[size_t(r)], root_id);
  }
  ASSERT_EQ(gathered[0].size(), size_t(kRanks));
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(gathered[0][size_t(r)], std::string(size_t(r) + 1, char('a' + r)));
  for (int r = 1; r < kRanks; ++r)
    EXPECT_TRUE(gathered[size_t(r)].empty());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RendezvousError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Rendezvous, ARankThatCannotReachRankZeroSaysWhere) {
  const int port = free_port();
  const std::string e = error_of([&] { TcpControlChannel channel(local_launch(1, 2, port), {0.3}); });
  EXPECT_NE(e.find("rank 1: cannot reach rank 0 at 127.0.0.1:" + std::to_string(port)), std::string::npos) << e;
}

TEST(Rendezvous, RankZeroNamesTheRanksThatNeverCame) {
  const int port = free_port();
  const std::string e = error_of([&] { TcpControlChannel channel(local_launch(0, 3, port), {0.3}); });
  EXPECT_NE(e.find("rank 0: ranks 1, 2 did not connect"), std::string::npos) << e;
}

TEST(Rendezvous, ARankThatLeavesIsNamed) {
  const int port = free_port();
  std::string root_error;
  std::thread root([&] {
    root_error = error_of([&] {
      TcpControlChannel channel(local_launch(0, 2, port), {30});
      channel.gather_to_root("x");
    });
  });
  { TcpControlChannel leaving(local_launch(1, 2, port), {30}); }  // connects, then its process "ends"
  root.join();
  EXPECT_NE(root_error.find("rank 0: waiting for rank 1"), std::string::npos) << root_error;
  EXPECT_NE(root_error.find("closed"), std::string::npos) << root_error;
}

TEST(Rendezvous, RanksStartedWithAnotherSizeAreRefused) {
  const int port = free_port();
  std::string root_error, other_error;
  std::thread root([&] { root_error = error_of([&] { TcpControlChannel channel(local_launch(0, 2, port), {30}); }); });
  other_error = error_of([&] { TcpControlChannel channel(local_launch(1, 3, port), {30}); });
  root.join();
  EXPECT_NE(root_error.find("rank 1 was started with 3 ranks, rank 0 with 2"), std::string::npos) << root_error;
  EXPECT_NE(other_error.find("rank 1"), std::string::npos) << other_error;
}

}  // namespace
}  // namespace wallfacer::testing
