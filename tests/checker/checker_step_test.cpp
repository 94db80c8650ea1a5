// The schedule checker on whole-step schedules (docs/step.md, docs/checker.md "Whole steps"):
// every strategy's step passes under every checkpointing mode and ZeRO stage, and breakages of
// one layer, of a Gemm or of the gradient synchronisation are caught with messages that name
// them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include <wallfacer/check/checker.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

Workload step_workload(Checkpointing mode, int zero_stage, int layers = 3) {
  Workload w = testing::small_workload(64, 8, 2, true, 2, 4);
  w.layers = layers;
  w.ffn = 48;
  w.vocab = 50;
  w.checkpointing = mode;
  w.zero_stage = zero_stage;
  w.grad_bucket_MiB = 1;
  return w;
}

std::string joined(const CheckReport& report) {
  std::string all;
  for (const auto& e : report.errors)
    all += e + "\n";
  return all;
}

class StepChecks : public ::testing::TestWithParam<std::tuple<StrategyKind, Checkpointing, int>> {};

TEST_P(StepChecks, EveryFeasibleSplitPasses) {
  const auto [kind, mode, zero] = GetParam();
  const Workload w = step_workload(mode, zero);
  int tried = 0;
  for (const StrategyParams& params : enumerate_params(kind, w, 8)) {
    if (!check_feasible(kind, params, w, 8).ok) continue;
    ++tried;
    const Plan plan = testing::hand_plan(kind, params, w);
    for (int layers : {2, 3}) {
      SCOPED_TRACE(fmt::format("S {} D {}, {} layers", params.sequence_parallel, params.data_parallel, layers));
      const Schedule schedule = StepBuilder(plan).build({}, layers);
      const CheckReport report = check_schedule(plan, schedule);
      ASSERT_TRUE(report.ok) << joined(report);
      EXPECT_EQ(report.layers, layers);
      EXPECT_GT(report.gemms, 0);
      EXPECT_GT(report.pointwise, 0);
      EXPECT_GT(report.forward_blocks, 0);
      EXPECT_GT(report.backward_blocks, 0);
      // Full checkpointing recomputes every forward block once; the other modes none.
      EXPECT_EQ(report.recomputed_blocks, mode == Checkpointing::Full ? report.forward_blocks : 0);
    }
  }
  EXPECT_GT(tried, 0);
}

std::string name_of(const ::testing::TestParamInfo<StepChecks::ParamType>& info) {
  std::string name = to_string(std::get<0>(info.param));
  for (char& c : name)
    if (c == '-') c = '_';
  return name + "_" + to_string(std::get<1>(info.param)) + "_zero" + std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Step, StepChecks,
                         ::testing::Combine(::testing::ValuesIn(all_strategies()),
                                            ::testing::Values(Checkpointing::None, Checkpointing::Selective,
                                                              Checkpointing::Full),
                                            ::testing::Values(0, 2, 3)),
                         name_of);

// ---- breakages ---------------------------------------------------------------------------------

// The report fails and one of its errors contains every fragment.
void expect_caught(const CheckReport& report, std::initializer_list<std::string> fragments) {
  ASSERT_FALSE(report.ok) << "the checker accepted a broken schedule";
  bool found = std::any_of(report.errors.begin(), report.errors.end(), [&](const std::string& e) {
    return std::all_of(fragments.begin(), fragments.end(),
                       [&](const std::string& f) { return e.find(f) != std::string::npos; });
  });
  EXPECT_TRUE(found) << "no error mentions all of the expected words; errors:\n" << joined(report);
}

bool any_error_has(const CheckReport& report, const std::string& fragment) {
  return std::any_of(report.errors.begin(), report.errors.end(),
                     [&](const std::string& e) { return e.find(fragment) != std::string::npos; });
}

std::vector<int32_t> deps_of(const RankProgram& p, int32_t i) {
  return {p.deps_begin(p.ops[size_t(i)]), p.deps_end(p.ops[size_t(i)])};
}

// Rebuilds a program op by op: `edit(old index, op, deps)` returns false to drop the op; ops
// that depended on a dropped op wait for its dependencies instead. Returns old -> new indices.
template <typename Edit>
std::vector<int32_t> rebuild(RankProgram& p, Edit&& edit) {
  const RankProgram old = p;
  p.ops.clear();
  p.deps.clear();
  std::vector<int32_t> at(old.ops.size(), -1);
  std::vector<std::vector<int32_t>> resolved(old.ops.size());
  for (int32_t i = 0; i < int32_t(old.ops.size()); ++i) {
    std::vector<int32_t> deps;
    for (int32_t d : deps_of(old, i))
      if (at[size_t(d)] >= 0) {
        deps.push_back(at[size_t(d)]);
      } else {
        deps.insert(deps.end(), resolved[size_t(d)].begin(), resolved[size_t(d)].end());
      }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    Op op = old.ops[size_t(i)];
    if (!edit(i, op, deps)) {
      resolved[size_t(i)] = deps;
      continue;
    }
    at[size_t(i)] = p.add(op, deps);
  }
  return at;
}

void erase_op(RankProgram& p, int32_t victim) {
  rebuild(p, [&](int32_t i, Op&, std::vector<int32_t>&) { return i != victim; });
}

bool in_layer(const RankProgram& p, const Op& op, int layer) {
  return op.buf[0] >= 0 && p.buffers[size_t(op.buf[0])].name.ends_with(fmt::format(".L{}", layer));
}

// The first op of `p` at or after `from` that `pick` accepts.
template <typename Pick>
int32_t find_op(const RankProgram& p, Pick&& pick, int32_t from = 0) {
  for (int32_t i = from; i < int32_t(p.ops.size()); ++i)
    if (pick(p.ops[size_t(i)])) return i;
  ADD_FAILURE() << "no such op on rank " << p.rank;
  return -1;
}

bool is_flat(const RankProgram& p, const Op& op) {
  return is_collective(op.kind) && is_flat_collective(p.collectives[size_t(op.coll)]);
}

// A two-layer step of a zigzag ring of 4 ranks in each of two data-parallel replicas: the
// gradients synchronise over world.
struct StepCase {
  Plan plan;
  Schedule sched;
  explicit StepCase(Checkpointing mode = Checkpointing::Selective, int zero = 0,
                    StrategyKind kind = StrategyKind::Zigzag) {
    plan = testing::hand_plan(kind, testing::seq_params(4, 2), step_workload(mode, zero));
    sched = StepBuilder(plan).build({}, 2);
  }
  RankProgram& rank(int r) { return sched.ranks[size_t(r)]; }
  CheckReport check() const { return check_schedule(plan, sched); }
};

TEST(CheckerStep, CorrectStepPassesWithStepCounts) {
  const StepCase c;
  const CheckReport report = c.check();
  ASSERT_TRUE(report.ok) << joined(report);
  EXPECT_EQ(report.layers, 2);
  int64_t gemms = 0, pointwise = 0, attn_fwd = 0;
  for (const RankProgram& p : c.sched.ranks)
    for (const Op& op : p.ops) {
      gemms += op.kind == OpKind::Gemm;
      pointwise += op.kind == OpKind::Pointwise;
      attn_fwd += op.kind == OpKind::AttnFwd;
    }
  EXPECT_EQ(report.gemms, gemms);
  EXPECT_EQ(report.pointwise, pointwise);
  EXPECT_EQ(report.forward_blocks, attn_fwd);
  EXPECT_EQ(report.recomputed_blocks, 0);
  EXPECT_GT(report.flat_collectives, 0);
  EXPECT_LT(report.flat_collectives, report.collectives + 1);
}

TEST(CheckerStep, BlockMissingInOneLayer) {
  StepCase c;
  RankProgram& p = c.rank(1);
  erase_op(p, find_op(p, [&](const Op& op) { return op.kind == OpKind::AttnFwd && in_layer(p, op, 1); }));
  const CheckReport report = c.check();
  expect_caught(report, {"missing block (forward, layer 1)", "computed 0 times, needed once"});
  EXPECT_FALSE(any_error_has(report, "layer 0)")) << joined(report);
}

TEST(CheckerStep, BlockOfOneLayerComputedTwice) {
  StepCase c;
  RankProgram& p = c.rank(2);
  const int32_t i = find_op(p, [&](const Op& op) { return op.kind == OpKind::AttnBwd && in_layer(p, op, 0); });
  Op again = p.ops[size_t(i)];
  p.add(again, {int32_t(p.ops.size()) - 1});
  expect_caught(c.check(), {"block computed more than once (backward, layer 0)", "computed 2 times", "rank 2 op"});
}

TEST(CheckerStep, GemmWithWrongFlops) {
  StepCase c;
  RankProgram& p = c.rank(3);
  const int32_t i = find_op(p, [](const Op& op) { return op.kind == OpKind::Gemm && op.label == StepOp::MlpUp; });
  Op copy = p.ops[size_t(i)];
  copy.flops *= 2;
  const std::vector<int32_t> at = rebuild(p, [](int32_t, Op&, std::vector<int32_t>&) { return true; });
  p.add(copy, {at[size_t(i)]});
  expect_caught(c.check(), {fmt::format("rank 3 op {} (Gemm mlp_up fwd)", p.ops.size() - 1), "differ from 2 m n k"});
}

TEST(CheckerStep, GemmOrPointwiseNamingABuffer) {
  StepCase c;
  RankProgram& p = c.rank(0);
  p.ops[size_t(find_op(p, [](const Op& op) { return op.kind == OpKind::Pointwise; }))].buf[0] = 0;
  expect_caught(c.check(), {"(Pointwise embedding", "whole-step compute touches no attention buffer"});
}

TEST(CheckerStep, MemberSkipsAFlatCollective) {
  StepCase c;
  RankProgram& p = c.rank(3);
  erase_op(p, find_op(p, [&](const Op& op) { return is_flat(p, op); }));
  expect_caught(c.check(), {"group world: rank 0 calls", "rank 3 calls"});
}

TEST(CheckerStep, FlatCollectivesInAnotherOrderOnOneRank) {
  StepCase c;
  RankProgram& p = c.rank(5);
  // Two gradient synchronisations of different sizes on the same group: swap what they do.
  const int32_t a = find_op(p, [&](const Op& op) { return is_flat(p, op); });
  const CollectiveSpec& first = p.collectives[size_t(p.ops[size_t(a)].coll)];
  const int32_t b = find_op(
      p,
      [&](const Op& op) {
        return is_flat(p, op) && p.collectives[size_t(op.coll)].group == first.group &&
               !(p.collectives[size_t(op.coll)] == first);
      },
      a + 1);
  std::swap(p.ops[size_t(a)].coll, p.ops[size_t(b)].coll);
  std::swap(p.ops[size_t(a)].bytes, p.ops[size_t(b)].bytes);
  expect_caught(c.check(), {"group world: call", "differs between members", fmt::format("rank 5 op {}", a)});
}

TEST(CheckerStep, FlatCollectiveBytes) {
  StepCase c;
  RankProgram& p = c.rank(4);
  const int32_t i = find_op(p, [&](const Op& op) { return is_flat(p, op); });
  p.ops[size_t(i)].bytes += 4;
  expect_caught(c.check(), {fmt::format("rank 4 op {} (AllReduce grad_sync on world)", i), "elements of WeightGrad",
                            "over 8 members are"});
}

// With bf16 gradient communication the checker expects the gradients' bytes in bf16: the step
// passes, and a synchronisation priced in fp32 is caught.
TEST(CheckerStep, GradientBytesInTheGradCommDtype) {
  Workload w = step_workload(Checkpointing::Selective, 2);
  w.grad_comm_dtype = DType::BF16;
  const Plan plan = testing::hand_plan(StrategyKind::Zigzag, testing::seq_params(4, 2), w);
  Schedule sched = StepBuilder(plan).build({}, 2);
  const CheckReport report = check_schedule(plan, sched);
  ASSERT_TRUE(report.ok) << joined(report);
  RankProgram& p = sched.ranks[2];
  const int32_t i = find_op(p, [&](const Op& op) { return op.label == StepOp::GradSync; });
  const CollectiveSpec& spec = p.collectives[size_t(p.ops[size_t(i)].coll)];
  EXPECT_EQ(p.ops[size_t(i)].bytes, 7 * spec.elements * 2 / 8);
  p.ops[size_t(i)].bytes = 7 * spec.elements * 4 / 8;
  expect_caught(check_schedule(plan, sched), {fmt::format("rank 2 op {}", i), "elements of WeightGrad"});
}

// fp8 casts prove like any step; one in a workload without fp8 GEMMs is caught.
TEST(CheckerStep, Fp8CastsOnlyWithFp8Gemms) {
  Workload w = step_workload(Checkpointing::Full, 1);
  w.fp8_linear = true;
  Plan plan = testing::hand_plan(StrategyKind::Zigzag, testing::seq_params(4, 2), w);
  const Schedule sched = StepBuilder(plan).build({}, 2);
  const CheckReport report = check_schedule(plan, sched);
  ASSERT_TRUE(report.ok) << joined(report);
  plan.workload.fp8_linear = false;
  const int32_t i = find_op(sched.ranks[0], [](const Op& op) { return op.label == StepOp::Fp8Cast; });
  expect_caught(check_schedule(plan, sched),
                {fmt::format("rank 0 op {} (Pointwise fp8_cast)", i), "without fp8_linear"});
}

TEST(CheckerStep, FlatReduceScatterListingTokens) {
  StepCase c(Checkpointing::Selective, 2);
  for (RankProgram& p : c.sched.ranks) {
    const int32_t i = find_op(p, [&](const Op& op) { return op.kind == OpKind::ReduceScatter && is_flat(p, op); });
    CollectiveSpec& spec = p.collectives[size_t(p.ops[size_t(i)].coll)];
    spec.in_tokens = spec.out_tokens = std::vector<int32_t>(8, 0);
  }
  expect_caught(c.check(), {"rank 0 op", "(ReduceScatter): a flat ReduceScatter of WeightGrad lists tokens"});
}

// A layer-0 backward op may wait for anything earlier, layer 1's forward included; it may not
// wait for a later op.
TEST(CheckerStep, DependenciesAcrossLayers) {
  StepCase c;
  RankProgram& p = c.rank(0);
  const int32_t target = find_op(p, [&](const Op& op) { return op.kind == OpKind::AttnFwd && in_layer(p, op, 1); });
  const int32_t op = find_op(p, [&](const Op& o) { return o.kind == OpKind::AttnBwd && in_layer(p, o, 0); });
  ASSERT_LT(target, op);
  rebuild(p, [&](int32_t i, Op&, std::vector<int32_t>& deps) {
    if (i == op) deps.push_back(target);  // no op is dropped: old and new indices agree
    return true;
  });
  EXPECT_TRUE(c.check().ok) << joined(c.check());
  ASSERT_GT(p.ops[size_t(op)].dep_count, 0);
  p.deps[p.ops[size_t(op)].dep_begin] = op + 1;
  expect_caught(c.check(),
                {fmt::format("rank 0 op {} (AttnBwd): depends on op {}, which is not an earlier op", op, op + 1)});
}

// Under full checkpointing each layer's backward recomputes its forward attention into the same
// buffers: a second, separate coverage per layer, complete when the layer recomputes at all.
TEST(CheckerStep, RecomputedBlocksAreASeparateCoverage) {
  const StepCase full(Checkpointing::Full);
  const CheckReport report = full.check();
  ASSERT_TRUE(report.ok) << joined(report);
  EXPECT_EQ(report.recomputed_blocks, report.forward_blocks);

  StepCase dropped(Checkpointing::Full);
  RankProgram& p = dropped.rank(6);
  erase_op(p, find_op(p, [&](const Op& op) {
             return op.kind == OpKind::AttnFwd && (op.flags & kOpRecompute) && in_layer(p, op, 0);
           }));
  const CheckReport missing = dropped.check();
  expect_caught(missing, {"missing block (forward recomputation, layer 0)", "computed 0 times"});
  EXPECT_FALSE(any_error_has(missing, "(forward, layer 0)")) << joined(missing);

  // A recomputed block that lost its flag counts for the layer's forward a second time.
  StepCase unflagged(Checkpointing::Full);
  RankProgram& q = unflagged.rank(6);
  const int32_t i = find_op(
      q, [&](const Op& op) { return op.kind == OpKind::AttnFwd && (op.flags & kOpRecompute) && in_layer(q, op, 1); });
  q.ops[size_t(i)].flags = 0;
  const CheckReport twice = unflagged.check();
  expect_caught(twice, {"block computed more than once (forward, layer 1)", fmt::format("rank 6 op {}", i)});
  expect_caught(twice, {fmt::format("rank 6 op {} (AttnFwd", i), "phase is backward"});
  expect_caught(twice, {"missing block (forward recomputation, layer 1)"});
}

TEST(CheckerStep, BindingsCoverEachLayer) {
  StepCase c;
  RankProgram& p = c.rank(1);
  auto it = std::find_if(p.inputs.begin(), p.inputs.end(), [&](const Binding& b) {
    return b.field == Field::Q && p.buffers[size_t(b.buf)].name.ends_with(".L1");
  });
  ASSERT_NE(it, p.inputs.end());
  p.inputs.erase(it);
  const CheckReport report = c.check();
  expect_caught(report, {"input Q (layer 1)", "bound 0 times, needed once"});
  EXPECT_FALSE(any_error_has(report, "input Q (layer 0)")) << joined(report);
}

// Every layer repeats the ring's tags: the k-th send matches the k-th receive of the same
// (source, destination, tag); a receive too many is reported with both counts.
TEST(CheckerStep, RepeatedTagsMatchInOrder) {
  StepCase c;
  RankProgram& p = c.rank(2);
  const int32_t i = find_op(p, [](const Op& op) { return op.kind == OpKind::Recv; });
  const Op extra = p.ops[size_t(i)];
  p.add(extra, {int32_t(p.ops.size()) - 1});
  expect_caught(c.check(), {fmt::format("rank 2 op {} (Recv from {} tag {}", p.ops.size() - 1, extra.peer, extra.tag),
                            "no matching send", "sends 2 messages", "which receives 3"});
}

// The brief's scale: every strategy's whole step on 16 ranks of Llama 3 8B at 128K tokens, four
// layers, in well under a second each on an idle core.
TEST(CheckerStep, SixteenRankLlamaStepChecksQuickly) {
  Workload w = load_workload("llama-3-8b");
  w.checkpointing = Checkpointing::Full;
  for (StrategyKind kind : all_strategies()) {
    const std::vector<StrategyParams> all = enumerate_params(kind, w, 16);
    auto it = std::find_if(all.begin(), all.end(),
                           [&](const StrategyParams& s) { return check_feasible(kind, s, w, 16).ok; });
    if (it == all.end()) continue;
    SCOPED_TRACE(to_string(kind));
    const Plan plan = testing::hand_plan(kind, *it, w);
    const Schedule schedule = StepBuilder(plan).build({}, 4);
    const auto start = std::chrono::steady_clock::now();
    const CheckReport report = check_schedule(plan, schedule);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(report.ok) << joined(report);
    EXPECT_EQ(report.layers, 4);
    EXPECT_LT(seconds, 10.0) << report.ops << " ops";
    std::printf("%-10s %7lld ops %6lld blocks: %.3f s\n", to_string(kind), (long long)report.ops,
                (long long)(report.forward_blocks + report.backward_blocks + report.recomputed_blocks), seconds);
  }
}

}  // namespace
}  // namespace wallfacer
