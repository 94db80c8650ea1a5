// The schedule's execution rules as the simulator applies them: stream order and explicit
// dependencies, forward/backward split, the compute slowdown under communication, memory-bound
// ops, the errors for schedules that cannot run (deadlocks, mismatched messages, bad input), and
// the simulation's child process.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <string>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "isolated_run.hpp"
#include "simulator/sim_test_util.hpp"

namespace wallfacer {
namespace {

using test::compute_op;
using test::recv_op;
using test::send_op;

constexpr double kRel = 1e-9;
constexpr double kPeak = 100e12;  // test GPU

struct Star {
  Topology topology = Topology::parse(test::star_topology_yaml(2, 100, 1), "star.yaml");
  Plan plan = test::placement_plan(topology, 2);
  double hop(int64_t bytes) const { return 2e-6 + double(bytes) / 100e9; }
};

TEST(SimulatorSemantics, StreamsRunConcurrentlyAndDependenciesSerialise) {
  Star star;
  SimOptions options;
  options.calibration = test::flat_calibration(1.0);
  const double block = 1e-3;  // seconds of compute
  const int64_t bytes = 50 << 20;
  // Rank 0: compute A and send S side by side, then compute B after S (dependency).
  Schedule s = test::empty_schedule(2);
  RankProgram& r0 = s.ranks[0];
  r0.add(compute_op(s, block * kPeak, 0));
  int32_t sent = r0.add(send_op(1, 0, bytes, 0));
  r0.add(compute_op(s, block * kPeak, 1), {sent});
  s.ranks[1].add(recv_op(0, 0, bytes, 0));
  SimResult result = simulate_schedule(star.plan, star.topology, s, options);
  // B starts when both A (stream order) and S (dependency) are done.
  double expected = std::max(block, star.hop(bytes)) + block;
  EXPECT_NEAR(result.step_ms, expected * 1e3, expected * 1e3 * kRel);
  EXPECT_NEAR(result.ranks[0].compute_ms, 2 * block * 1e3, 1e-9);
  EXPECT_NEAR(result.ranks[1].idle_ms, (expected - star.hop(bytes)) * 1e3, 1e-9);
}

TEST(SimulatorSemantics, ForwardTimeIsWhenTheLastForwardOpFinishes) {
  Star star;
  SimOptions options;
  options.calibration = test::flat_calibration(1.0);
  Schedule s = test::empty_schedule(2);
  for (int r = 0; r < 2; ++r) {
    s.ranks[size_t(r)].add(compute_op(s, 2e-3 * kPeak * (r + 1), 0, Phase::Forward));
    s.ranks[size_t(r)].add(compute_op(s, 5e-3 * kPeak, 1, Phase::Backward));
  }
  SimResult result = simulate_schedule(star.plan, star.topology, s, options);
  EXPECT_NEAR(result.forward_ms, 4.0, 1e-9);  // rank 1's forward block
  EXPECT_NEAR(result.step_ms, 9.0, 1e-9);
  EXPECT_NEAR(result.backward_ms, 5.0, 1e-9);
}

TEST(SimulatorSemantics, ComputeSlowsDownWhileTheRankCommunicates) {
  Star star;
  const double keep = 0.6, block = 2e-3;
  const int64_t bytes = 100 << 20;
  const double transfer = star.hop(bytes);
  ASSERT_LT(transfer, block);
  Schedule s = test::empty_schedule(2);
  s.ranks[0].add(compute_op(s, block * kPeak, 0));
  s.ranks[0].add(send_op(1, 0, bytes, 0));
  s.ranks[1].add(recv_op(0, 0, bytes, 0));
  SimOptions options;
  options.calibration = test::flat_calibration(1.0, keep);
  SimResult slowed = simulate_schedule(star.plan, star.topology, s, options);  // the option is on by default
  options.comm_slowdown = false;
  SimResult plain = simulate_schedule(star.plan, star.topology, s, options);
  EXPECT_NEAR(plain.step_ms, block * 1e3, 1e-9);
  // During the transfer the block advances at `keep` speed, then at full speed.
  double expected = transfer + (block - keep * transfer);
  EXPECT_NEAR(slowed.step_ms, expected * 1e3, expected * 1e3 * kRel);
}

TEST(SimulatorSemantics, MemoryBoundOpsTakeBytesOverHbmBandwidth) {
  Star star;  // 1000 GB/s HBM
  Schedule s = test::empty_schedule(2);
  Op copy;
  copy.kind = OpKind::Copy;
  copy.stream = Stream::Compute;
  copy.bytes = 1 << 30;
  s.ranks[0].add(copy);
  Op prep = copy;
  prep.kind = OpKind::BwdPrep;
  prep.phase = Phase::Backward;
  s.ranks[1].add(prep);
  SimResult result = simulate_schedule(star.plan, star.topology, s);
  EXPECT_NEAR(result.ranks[0].compute_ms, 2.0 * (1 << 30) / 1e12 * 1e3, 1e-9);  // read + write
  EXPECT_NEAR(result.ranks[1].compute_ms, 1.0 * (1 << 30) / 1e12 * 1e3, 1e-9);
}

TEST(SimulatorSemantics, ReceivesWithoutSendsAreReportedAsADeadlock) {
  Star star;
  Schedule s = test::empty_schedule(2);
  s.ranks[0].add(recv_op(1, 0, 1024, 3));
  s.ranks[1].add(recv_op(0, 0, 1024, 3));
  try {
    simulate_schedule(star.plan, star.topology, s);
    FAIL() << "expected a deadlock";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0: recv stream at op 0 (Recv step 3 peer 1)"), std::string::npos)
        << e.what();
  }
}

TEST(SimulatorSemantics, DependencyOnALaterOpOfTheSameStreamDeadlocks) {
  Star star;
  Schedule s = test::empty_schedule(2);
  RankProgram& p = s.ranks[0];
  p.add(compute_op(s, 1e9, 0));
  p.add(compute_op(s, 1e9, 1));
  p.deps.push_back(1);  // op 0 waits for op 1, which waits for op 0 by stream order
  p.ops[0].dep_begin = 0;
  p.ops[0].dep_count = 1;
  EXPECT_THROW(simulate_schedule(star.plan, star.topology, s), ScheduleError);
}

TEST(SimulatorSemantics, MessagesPostedInDifferentOrdersAreAScheduleError) {
  Star star;
  Schedule s = test::empty_schedule(2);
  s.ranks[0].add(send_op(1, 1, 1024, 0));
  s.ranks[0].add(send_op(1, 2, 1024, 1));
  s.ranks[1].add(recv_op(0, 2, 1024, 1));
  s.ranks[1].add(recv_op(0, 1, 1024, 0));
  try {
    simulate_schedule(star.plan, star.topology, s);
    FAIL() << "expected a ScheduleError";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("different orders"), std::string::npos) << e.what();
  }
}

// An error thrown and caught inside a rank actor is the deepest its stack gets. A guard page
// turns an overflow into a crash, so passing here holds the default 32 KiB stacks to a 4x margin.
// The smallest stack allowed (4 KiB) overflows on some hosts and not on others (on hosts with
// AVX-512, not on an AMD EPYC host without it; the dynamic linker saves the vector registers on
// the stack when it first binds a function). There the error must come back either way, as the
// schedule's error or as the crash of the simulation's process naming its signal, never as a
// success.
// AddressSanitizer's builds give every actor at least 1 MiB whatever the option says (its red
// zones make frames several times larger; simgrid_adapter.cpp): no stack overflows there, and the
// test checks only that the error comes back as a ScheduleError.
TEST(SimulatorSemantics, AnErrorInsideAnActorFitsInAQuarterOfTheDefaultStack) {
  const int smallest_KiB = 4;
#if defined(__SANITIZE_ADDRESS__)
  const int fits_KiB = SimOptions{}.actor_stack_KiB;
  const std::vector<int> sizes_KiB = {fits_KiB};
#else
  const int fits_KiB = SimOptions{}.actor_stack_KiB / 4;
  const std::vector<int> sizes_KiB = {fits_KiB, smallest_KiB};
#endif
  Star star;
  Schedule s = test::empty_schedule(2);
  s.ranks[0].add(send_op(1, 1, 1024, 0));
  s.ranks[1].add(recv_op(0, 2, 1024, 0));
  SimOptions options;
  options.stack_guard = true;
  for (int KiB : sizes_KiB) {
    options.actor_stack_KiB = KiB;
    try {
      simulate_schedule(star.plan, star.topology, s, options);
      ADD_FAILURE() << KiB << " KiB: expected an error";
    } catch (const ScheduleError& e) {
      EXPECT_NE(std::string(e.what()).find("different orders"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      // Too small a stack hits the guard page: the simulation's process crashes and says so.
      EXPECT_EQ(KiB, smallest_KiB) << e.what();
      EXPECT_NE(std::string(e.what()).find("signal"), std::string::npos) << e.what();
    }
  }
}

TEST(SimulatorSemantics, BadOptionsAndPlacementsAreInputErrors) {
  Star star;
  SimOptions options;
  options.network_model = "NoSuchModel";
  EXPECT_THROW(simulate_schedule(star.plan, star.topology, test::empty_schedule(2), options), InputError);
  // SimGrid's Constant model refuses any link: it would abort the simulation process.
  options.network_model = "Constant";
  EXPECT_THROW(simulate_schedule(star.plan, star.topology, test::empty_schedule(2), options), InputError);
  options = SimOptions{};
  options.actor_stack_KiB = 2;
  EXPECT_THROW(simulate_schedule(star.plan, star.topology, test::empty_schedule(2), options), InputError);
  Plan far = test::placement_plan(star.topology, 2);
  far.ranks[1].gpu = 9;
  EXPECT_THROW(simulate_schedule(far, star.topology, test::empty_schedule(2)), InputError);
}

// A simulation process must not outlive the process that started it (an interrupted
// `wallfacer plan --simulate-top` would leave its simulations running): this test process adopts
// the orphan as a subreaper, kills the simulation's parent and expects the simulation to die of
// SIGKILL, not to finish its 20 s of work.
TEST(SimulatorSemantics, SimulationProcessDiesWithItsParent) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int pids[2];
  ASSERT_EQ(::pipe(pids), 0);
  const pid_t parent = ::fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    sim::run_in_child_process([&] {
      const pid_t self = ::getpid();
      if (::write(pids[1], &self, sizeof self) != ssize_t(sizeof self)) ::_exit(4);
      ::sleep(20);
      return std::string();
    });
    ::_exit(0);
  }
  pid_t simulation = -1;
  ASSERT_EQ(::read(pids[0], &simulation, sizeof simulation), ssize_t(sizeof simulation));
  ::kill(parent, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(parent, &status, 0), parent);
  ASSERT_EQ(::waitpid(simulation, &status, 0), simulation);  // adopted by this process
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  ::close(pids[0]);
  ::close(pids[1]);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(SimulatorSemantics, OtherNetworkModelsAreSelectable) {
  Star star;
  const int64_t bytes = 64 << 20;
  Schedule s = test::empty_schedule(2);
  s.ranks[0].add(send_op(1, 0, bytes, 0));
  s.ranks[1].add(recv_op(0, 0, bytes, 0));
  SimResult cm02 = simulate_schedule(star.plan, star.topology, s);
  SimOptions options;
  options.network_model = "LV08";
  SimResult lv08 = simulate_schedule(star.plan, star.topology, s, options);
  // LV08 scales latency up (x13.01) and bandwidth down (x0.97): strictly slower here.
  EXPECT_GT(lv08.step_ms, cm02.step_ms * 1.02);
  // SMPI's and IB's fitted factors also lower the bandwidth of a 64 MiB message (SMPI's 0.94
  // above 64 KiB; IB adds its own penalties on top).
  for (const char* model : {"SMPI", "IB"}) {
    options.network_model = model;
    EXPECT_GT(simulate_schedule(star.plan, star.topology, s, options).step_ms, cm02.step_ms * 1.02) << model;
  }
  EXPECT_NEAR(cm02.step_ms, star.hop(bytes) * 1e3, star.hop(bytes) * 1e3 * kRel);
}

TEST(SimulatorSemantics, RepeatedSimulationsInOneProcessAreIndependent) {
  Star star;
  const int64_t bytes = 8 << 20;
  Schedule s = test::empty_schedule(2);
  s.ranks[0].add(send_op(1, 0, bytes, 0));
  s.ranks[1].add(recv_op(0, 0, bytes, 0));
  SimResult first = simulate_schedule(star.plan, star.topology, s);
  SimResult second = simulate_schedule(star.plan, star.topology, s);
  EXPECT_EQ(first.step_ms, second.step_ms);  // the clock starts at 0 every time
  EXPECT_NEAR(first.step_ms, star.hop(bytes) * 1e3, star.hop(bytes) * 1e3 * kRel);
  EXPECT_EQ(first.ranks[1].comm_ms, second.ranks[1].comm_ms);
}

}  // namespace
}  // namespace wallfacer
