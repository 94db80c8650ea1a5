// The schedule checker against hand-built schedules: a correct two-rank ring passes, and each
// kind of breakage is caught with a message that names it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <wallfacer/check/checker.hpp>
#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

const FieldMask kKV = field_mask({Field::K, Field::V});
const FieldMask kOLse = field_mask({Field::O, Field::Lse});

// Two ranks, 8 tokens, 1 head of dimension 2: rank r holds tokens [4r, 4r + 4).
struct Tiny {
  Plan plan;
  Schedule sched;

  explicit Tiny(bool causal, int ranks = 2) {
    plan.workload.heads = plan.workload.kv_heads = 1;
    plan.workload.head_dim = 2;
    plan.workload.seq = 4 * ranks;
    plan.workload.causal = causal;
    for (int r = 0; r < ranks; ++r)
      plan.ranks.push_back(RankSlot{r, r, 0, r, ""});
    plan.groups.push_back(CommGroup{"pair", GroupKind::Sequence, {0, 1}});
    sched.dims = ScheduleDims{4 * ranks, 1, 1, 1, 2, 2, causal};
    sched.ranks.resize(size_t(ranks));
    for (int r = 0; r < ranks; ++r) {
      RankProgram& p = sched.ranks[size_t(r)];
      p.rank = r;
      p.buffers = {{"q", field_mask({Field::Q, Field::O, Field::Lse}), {0, 1}, 4, false},
                   {"kv", kKV, {0, 1}, 4, false},
                   {"kv.rx", kKV, {0, 1}, 4, false},
                   {"acc", kOLse, {0, 1}, 4, true}};
      p.inputs = {{0, Field::Q, own(r), {0, 1}}, {1, Field::K, own(r), {0, 1}}, {1, Field::V, own(r), {0, 1}}};
      p.outputs = {{0, Field::O, own(r), {0, 1}}, {0, Field::Lse, own(r), {0, 1}}};
    }
  }
  int32_t own(int r) { return sched.tokens.intern({{4 * r, 4 * r + 4}}); }
  RankProgram& rank(int r) { return sched.ranks[size_t(r)]; }

  int32_t p2p(int r, OpKind kind, int buf, int peer, int tag, std::initializer_list<int32_t> deps = {}) {
    Op op;
    op.kind = kind;
    op.stream = kind == OpKind::Send ? Stream::Send : Stream::Recv;
    op.peer = peer;
    op.tag = tag;
    op.buf[0] = buf;
    op.tok[0] = own(kind == OpKind::Send ? r : peer);
    op.fields = kKV;
    op.bytes = 4 * 2 * 2 * 2;  // tokens x (K, V) x head_dim x bf16
    return rank(r).add(op, deps);
  }
  int32_t attn(int r, int q_tokens, int kv_buf, int k_tokens, Mask mask, std::initializer_list<int32_t> deps = {}) {
    Op op;
    op.kind = OpKind::AttnFwd;
    op.mask = mask;
    op.buf[0] = 0;
    op.buf[1] = kv_buf;
    op.buf[2] = 3;
    op.tok[0] = q_tokens;
    op.tok[1] = k_tokens;
    op.heads = {0, 1};
    int64_t live = 0;  // brute force over the 4 x 4 block
    for (int64_t q = 0; q < 8; ++q)
      for (int64_t k = 0; k < 8; ++k) {
        auto in = [&](int32_t id, int64_t t) {
          for (const TokenRange& x : sched.tokens.get(id))
            if (t >= x.begin && t < x.end) return true;
          return false;
        };
        if (in(q_tokens, q) && in(k_tokens, k) && (mask == Mask::None || k <= q)) ++live;
      }
    op.flops = 4.0 * double(live) * 2;
    return rank(r).add(op, deps);
  }
  int32_t finish(int r, std::initializer_list<int32_t> deps) {
    Op op;
    op.kind = OpKind::Copy;
    op.buf[0] = 3;
    op.buf[1] = 0;
    op.tok[0] = own(r);
    op.fields = kOLse;
    return rank(r).add(op, deps);
  }

  // The correct full-mask ring: send own K,V, receive the peer's, two blocks, cast the output.
  void ring() {
    for (int r = 0; r < 2; ++r) {
      p2p(r, OpKind::Send, 1, 1 - r, 0);
      int32_t rx = p2p(r, OpKind::Recv, 2, 1 - r, 0);
      attn(r, own(r), 1, own(r), Mask::None);
      int32_t last = attn(r, own(r), 2, own(1 - r), Mask::None, {rx});
      finish(r, {last});
    }
  }
  // The correct causal version: rank 1 needs rank 0's keys, rank 0 needs nothing from rank 1.
  void causal_ring() {
    p2p(0, OpKind::Send, 1, 1, 0);
    int32_t rx = p2p(1, OpKind::Recv, 2, 0, 0);
    finish(0, {attn(0, own(0), 1, own(0), Mask::Causal)});
    attn(1, own(1), 1, own(1), Mask::Causal);
    finish(1, {attn(1, own(1), 2, own(0), Mask::None, {rx})});
  }
  CheckReport check() { return check_schedule(plan, sched); }
};

std::string joined(const CheckReport& report) {
  std::string all;
  for (const auto& e : report.errors)
    all += e + "\n";
  return all;
}

// The report fails and one of its errors contains every fragment.
void expect_caught(const CheckReport& report, std::initializer_list<std::string> fragments) {
  ASSERT_FALSE(report.ok) << "the checker accepted a broken schedule";
  bool found = std::any_of(report.errors.begin(), report.errors.end(), [&](const std::string& e) {
    return std::all_of(fragments.begin(), fragments.end(),
                       [&](const std::string& f) { return e.find(f) != std::string::npos; });
  });
  EXPECT_TRUE(found) << "no error mentions all of the expected words; errors:\n" << joined(report);
}

TEST(Checker, CorrectRingPasses) {
  Tiny t(false);
  t.ring();
  CheckReport report = t.check();
  EXPECT_TRUE(report.ok) << joined(report);
  EXPECT_EQ(report.forward_blocks, 4);
  EXPECT_EQ(report.sends, 2);
  EXPECT_EQ(report.ops, 10);
  EXPECT_NO_THROW(check_or_throw(t.plan, t.sched));
}

TEST(Checker, CorrectCausalRingPasses) {
  Tiny t(true);
  t.causal_ring();
  CheckReport report = t.check();
  EXPECT_TRUE(report.ok) << joined(report);
}

TEST(Checker, MissingBlock) {
  Tiny t(false);
  t.ring();
  t.rank(0).ops.erase(t.rank(0).ops.begin() + 3);  // the block over the received keys
  t.rank(0).ops.back().dep_count = 0;              // (the cast depended on it)
  expect_caught(t.check(), {"missing block", "queries [0, 4) x keys [4, 8)", "0 times"});
}

TEST(Checker, DoublyComputedBlock) {
  Tiny t(false);
  t.ring();
  t.attn(1, t.own(1), 1, t.own(1), Mask::None);
  expect_caught(t.check(), {"more than once", "queries [4, 8) x keys [4, 8)", "rank 1 op 2", "rank 1 op 5"});
}

TEST(Checker, UnmaskedDeadBlock) {
  Tiny t(true);
  t.causal_ring();
  // Rank 0 also computes its queries against rank 1's (later) keys, without the mask.
  t.p2p(1, OpKind::Send, 1, 0, 1);
  int32_t rx = t.p2p(0, OpKind::Recv, 2, 1, 1);
  t.attn(0, t.own(0), 2, t.own(1), Mask::None, {rx});
  expect_caught(t.check(), {"rank 0 op 4", "pairs the causal mask excludes"});
  // With the mask the block computes nothing at all, which is also an error.
  t.rank(0).ops.back().mask = Mask::Causal;
  expect_caught(t.check(), {"rank 0 op 4", "no live"});
}

TEST(Checker, SendWithoutReceive) {
  Tiny t(false);
  t.ring();
  t.p2p(0, OpKind::Send, 1, 1, 7);
  expect_caught(t.check(), {"rank 0 op 5 (Send to 1 tag 7", "no matching receive"});
}

TEST(Checker, SizeMismatch) {
  Tiny t(false);
  t.ring();
  t.rank(1).ops[1].bytes = 64;  // rank 1's receive expects more than rank 0 sends
  expect_caught(t.check(), {"rank 0 op 0", "sends 32 bytes", "rank 1 op 1", "receives 64"});
}

TEST(Checker, PayloadDisagreesWithBytes) {
  Tiny t(false);
  t.ring();
  t.rank(0).ops[0].bytes = t.rank(1).ops[1].bytes = 30;
  expect_caught(t.check(), {"rank 0 op 0", "30 bytes, but the payload is 32"});
}

// Both ranks all-gather Q and then K,V into full-sequence buffers, rank 1 in the other order.
TEST(Checker, CollectivesInDifferentOrder) {
  Tiny t(false);
  for (int r = 0; r < 2; ++r) {
    RankProgram& p = t.rank(r);
    p.buffers.push_back({"q.all", field_bit(Field::Q), {0, 1}, 8, false});
    p.buffers.push_back({"kv.all", kKV, {0, 1}, 8, false});
    auto gather = [&](int in, int out, FieldMask fields) {
      CollectiveSpec spec;
      spec.kind = OpKind::AllGather;
      spec.group = 0;
      spec.fields = fields;
      spec.in_tokens = {t.own(0), t.own(1)};
      int32_t all = t.sched.tokens.intern({{0, 8}});
      spec.out_tokens = {all, all};
      spec.in_heads = spec.out_heads = {{0, 1}, {0, 1}};
      Op op;
      op.kind = OpKind::AllGather;
      op.stream = Stream::Collective;
      op.buf[0] = in;
      op.buf[1] = out;
      op.coll = int32_t(p.collectives.size());
      p.collectives.push_back(spec);
      return p.add(op);
    };
    if (r == 0) {
      gather(0, 4, field_bit(Field::Q));
      gather(1, 5, kKV);
    } else {
      gather(1, 5, kKV);
      gather(0, 4, field_bit(Field::Q));
    }
  }
  expect_caught(t.check(), {"group pair", "call 0 differs between members", "rank 0 op 0", "rank 1 op 0"});
}

// An all-gather whose output lists the members' tokens in the wrong order.
TEST(Checker, AllGatherOutputIsNotTheConcatenation) {
  Tiny t(false);
  t.ring();
  const int32_t swapped = t.sched.tokens.intern({{4, 8}, {0, 4}});
  for (int r = 0; r < 2; ++r) {
    RankProgram& p = t.rank(r);
    p.buffers.push_back({"kv.all", kKV, {0, 1}, 8, false});
    CollectiveSpec spec;
    spec.kind = OpKind::AllGather;
    spec.group = 0;
    spec.fields = kKV;
    spec.in_tokens = {t.own(0), t.own(1)};
    spec.out_tokens = {swapped, swapped};
    spec.in_heads = spec.out_heads = {{0, 1}, {0, 1}};
    Op op;
    op.kind = OpKind::AllGather;
    op.stream = Stream::Collective;
    op.buf[0] = 1;
    op.buf[1] = 4;
    op.coll = 0;
    p.collectives.push_back(spec);
    p.add(op);
  }
  expect_caught(t.check(), {"rank 0 op 5 (AllGather on pair", "not the concatenation of the inputs"});
}

TEST(Checker, DeadlockTwoRanksReceivingFirst) {
  Tiny t(false);
  for (int r = 0; r < 2; ++r) {
    int32_t rx = t.p2p(r, OpKind::Recv, 2, 1 - r, 0);
    t.p2p(r, OpKind::Send, 1, 1 - r, 0, {rx});  // sends only after its own receive completed
    t.attn(r, t.own(r), 1, t.own(r), Mask::None);
    int32_t last = t.attn(r, t.own(r), 2, t.own(1 - r), Mask::None, {rx});
    t.finish(r, {last});
  }
  CheckReport report = t.check();
  expect_caught(report, {"deadlock", "rank 0 op 0 (Recv from 1 tag 0", "waits forever", "rank 1 op 1"});
  expect_caught(report, {"deadlock", "rank 1 op 0 (Recv from 0 tag 0"});
}

TEST(Checker, BufferOverwrittenBeforeRead) {
  Tiny t(false);
  t.ring();
  // A second message lands in kv.rx while rank 0's block over it may still be running.
  t.p2p(1, OpKind::Send, 1, 0, 1);
  t.p2p(0, OpKind::Recv, 2, 1, 1);
  expect_caught(t.check(),
                {"rank 0 op 5 (Recv from 1 tag 1", "overwrites kv.rx.K", "rank 0 op 3 (AttnFwd", "finished reading"});
}

TEST(Checker, ReadBeforeTheWriteCompletes) {
  Tiny t(false);
  for (int r = 0; r < 2; ++r) {
    t.p2p(r, OpKind::Send, 1, 1 - r, 0);
    t.p2p(r, OpKind::Recv, 2, 1 - r, 0);
    t.attn(r, t.own(r), 1, t.own(r), Mask::None);
    int32_t last = t.attn(r, t.own(r), 2, t.own(1 - r), Mask::None);  // no dependency on the receive
    t.finish(r, {last});
  }
  expect_caught(t.check(), {"rank 0 op 3 (AttnFwd", "reads kv.rx.K before", "rank 0 op 1 (Recv", "missing dependency"});
}

TEST(Checker, ReadOfTokensTheBufferDoesNotHold) {
  Tiny t(false);
  t.ring();
  t.rank(1).ops[3].tok[1] = t.own(1);  // kv.rx holds rank 0's tokens, not rank 1's
  expect_caught(t.check(), {"rank 1 op 3", "reads kv.rx.K|V tokens [4, 8)", "holds [0, 4)"});
}

// A receive of K alone with other rows drops V, which the block then reads.
TEST(Checker, ReadOfAFieldAnOverwriteDropped) {
  Tiny t(false);
  t.ring();
  t.rank(0).ops[1].fields = field_bit(Field::K);
  t.rank(0).ops[1].tok[0] = t.sched.tokens.intern({{4, 6}});
  t.rank(0).ops[3].tok[1] = t.rank(0).ops[1].tok[0];
  t.rank(1).ops[0].fields = field_bit(Field::K);
  t.rank(1).ops[0].tok[0] = t.rank(0).ops[1].tok[0];
  t.rank(0).ops[1].bytes = t.rank(1).ops[0].bytes = 2 * 2 * 2;
  expect_caught(t.check(), {"rank 0 op 3 (AttnFwd", "reads kv.rx.V, which holds no data"});
}

TEST(Checker, MissingOutputCoverage) {
  Tiny t(false);
  t.ring();
  t.rank(1).outputs.erase(t.rank(1).outputs.begin());  // rank 1's O
  expect_caught(t.check(), {"output O", "tokens [4, 8)", "bound 0 times"});
}

TEST(Checker, AllReduceAlgorithmDisagreesWithThePlan) {
  // A small model's gradients over two nodes: the planner gives the world group a tree.
  const Topology topology = Topology::load("dgx-h100", 2);
  StrategyParams seq;
  seq.sequence_parallel = 16;
  Plan plan = make_plan(StrategyKind::Ring, seq, testing::small_workload(256, 4, 4, true), topology, 16);
  const int world = plan.find_group("world");
  ASSERT_GE(world, 0);
  ASSERT_EQ(plan.groups[size_t(world)].all_reduce, AllReduceAlgorithm::Tree);
  const Schedule schedule = build_schedule(plan);
  EXPECT_TRUE(check_schedule(plan, schedule).ok) << joined(check_schedule(plan, schedule));
  plan.groups[size_t(world)].all_reduce = AllReduceAlgorithm::Ring;
  expect_caught(check_schedule(plan, schedule), {"all-reduce runs as a tree", "gives group world a ring"});
}

TEST(Checker, ThrowsScheduleError) {
  Tiny t(false);
  t.ring();
  t.rank(0).outputs.push_back(t.rank(1).outputs.front());  // rank 0 also claims tokens it lacks
  EXPECT_THROW(check_or_throw(t.plan, t.sched), ScheduleError);
  try {
    check_or_throw(t.plan, t.sched);
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("bound 2 times"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wallfacer
