// The memory estimate `wallfacer run` checks before allocating: its parts against figures
// computed by hand from the workload, its growth with the rank count, and the refusal; the GPU
// estimate of `run --backend cuda` against the host estimate's rank buffers, and its refusal.
#include <gtest/gtest.h>

#include <string>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/memory_estimate.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

struct Built {
  Plan plan;
  Schedule schedule;
};

Built ring_plan(int ranks, int64_t seq) {
  const Topology topology = Topology::load("dgx-h100", (ranks + 7) / 8);
  Workload w = load_workload("llama-3-8b", {});
  w.seq = seq;
  w.heads = 4;
  w.kv_heads = 4;
  w.head_dim = 16;
  w.hidden = 64;
  StrategyParams params;
  params.sequence_parallel = ranks;
  Built b;
  b.plan = make_plan(StrategyKind::Ring, params, w, topology, ranks);
  b.schedule = build_schedule(b.plan);
  return b;
}

TEST(MemoryEstimate, InputsAndOutputsAreTheWorkloadsTensorsInFp64) {
  const Built b = ring_plan(4, 256);
  const auto e = runtime::estimate_run_memory(b.plan, b.schedule, false, false, 0);
  // q, dO: 256 x 4 x 16; k, v the same (4 kv heads); 8 bytes each.
  EXPECT_EQ(e.inputs, 4 * 256 * 4 * 16 * 8);
  EXPECT_EQ(e.outputs, (4 * 256 * 4 * 16 + 256 * 4) * 8);  // o, dq, dk, dv and lse
  EXPECT_EQ(e.reference, 0);
  const auto checked = runtime::estimate_run_memory(b.plan, b.schedule, false, true, 0);
  EXPECT_EQ(checked.reference, e.outputs + 256 * 256 * 8);
  EXPECT_GT(checked.total, e.total);
  // fp64 buffers take twice the fp32 ones' bytes, less the op bookkeeping both share.
  const auto fp64 = runtime::estimate_run_memory(b.plan, b.schedule, true, false, 0);
  EXPECT_GT(fp64.all_ranks, e.all_ranks);
}

TEST(MemoryEstimate, RankBuffersShrinkAsRanksGrow) {
  // The same workload over 4 and 16 ranks: each rank holds a quarter as much sequence.
  const Built four = ring_plan(4, 4096), sixteen = ring_plan(16, 4096);
  const auto a = runtime::estimate_run_memory(four.plan, four.schedule, false, false, 0);
  const auto b = runtime::estimate_run_memory(sixteen.plan, sixteen.schedule, false, false, 0);
  EXPECT_LT(b.largest_rank, a.largest_rank);
  EXPECT_EQ(a.inputs, b.inputs);
  // Under MPI each process holds the inputs; two processes on a node need more than one.
  const auto one = runtime::estimate_run_memory(four.plan, four.schedule, false, false, 1);
  const auto two = runtime::estimate_run_memory(four.plan, four.schedule, false, false, 2);
  EXPECT_EQ(two.total - one.total, one.inputs + one.largest_rank + (int64_t{64} << 20));
}

TEST(MemoryEstimate, RefusalNamesTheEstimateAndTheAvailableMemory) {
  const Built b = ring_plan(4, 4096);
  const auto e = runtime::estimate_run_memory(b.plan, b.schedule, false, true, 0);
  EXPECT_NO_THROW(runtime::check_run_memory(e, e.total, "p.yaml"));
  EXPECT_NO_THROW(runtime::check_run_memory(e, -1, "p.yaml"));  // unknown: not refused
  try {
    runtime::check_run_memory(e, e.total - 1, "p.yaml");
    FAIL() << "not refused";
  } catch (const InputError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("p.yaml: error: running this plan needs about"), std::string::npos) << what;
    EXPECT_NE(what.find("fp64 reference"), std::string::npos) << what;
    EXPECT_NE(what.find("of memory is available here"), std::string::npos) << what;
  }
  EXPECT_GT(runtime::available_memory_bytes(), 0);
}

TEST(DeviceMemoryEstimate, BuffersAreTheHostEstimatesRankBuffers) {
  const Built b = ring_plan(4, 4096);
  const auto host = runtime::estimate_run_memory(b.plan, b.schedule, false, false, 0);
  int64_t ops = 0;
  for (const RankProgram& p : b.schedule.ranks)
    ops += int64_t(p.ops.size());
  // The host estimate adds 512 bytes of bookkeeping per op to the same buffers.
  const auto local = runtime::estimate_device_memory(b.plan, b.schedule, false, true);
  EXPECT_EQ(local.ranks_here, 4);
  EXPECT_EQ(local.buffers, host.all_ranks - 512 * ops);
  EXPECT_EQ(local.runtime, runtime::kDeviceRuntimeAllowanceBytes);
  EXPECT_EQ(local.total, local.buffers + local.messages + local.runtime);
  EXPECT_GT(local.messages, 0);
  EXPECT_LT(local.messages, 2 * local.buffers);
  // One process per GPU: the ring's ranks are alike, so each holds a quarter.
  const auto nccl = runtime::estimate_device_memory(b.plan, b.schedule, false, false);
  EXPECT_EQ(nccl.ranks_here, 1);
  EXPECT_EQ(4 * nccl.buffers, local.buffers);
  EXPECT_EQ(4 * nccl.messages, local.messages);
  // fp64 doubles every buffer.
  const auto fp64 = runtime::estimate_device_memory(b.plan, b.schedule, true, false);
  EXPECT_EQ(fp64.buffers, 2 * nccl.buffers);
}

TEST(DeviceMemoryEstimate, RefusalNamesTheEstimateAndTheGpusFreeMemory) {
  const Built b = ring_plan(4, 4096);
  const auto e = runtime::estimate_device_memory(b.plan, b.schedule, false, true);
  EXPECT_NO_THROW(runtime::check_device_memory(e, e.total, e.total, 0, "p.yaml"));
  EXPECT_NO_THROW(runtime::check_device_memory(e, -1, -1, 0, "p.yaml"));
  try {
    runtime::check_device_memory(e, e.total - 1, int64_t{80} << 30, 3, "p.yaml");
    FAIL() << "not refused";
  } catch (const InputError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("p.yaml: error: running this plan needs about"), std::string::npos) << what;
    EXPECT_NE(what.find("4 ranks on this GPU"), std::string::npos) << what;
    EXPECT_NE(what.find("GPU 3 has only"), std::string::npos) << what;
    EXPECT_NE(what.find("of 80.0 GiB; cudaMemGetInfo"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace wallfacer
