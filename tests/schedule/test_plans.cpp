// Test plans and program helpers (see test_plans.hpp).
#include "schedule/test_plans.hpp"

#include <fmt/format.h>

#include "common/synthetic_workload.hpp"

namespace wallfacer::testing {

Workload small_workload(int64_t seq, int heads, int kv_heads, bool causal, int batch, int head_dim) {
  return test::synthetic_workload({seq, heads, kv_heads, head_dim, batch, causal, DType::BF16, 128});
}

StrategyParams seq_params(int S, int D) {
  StrategyParams p;
  p.sequence_parallel = S;
  p.data_parallel = D;
  return p;
}

Plan hand_plan(StrategyKind kind, const StrategyParams& params, const Workload& workload) {
  return test::topology_free_plan(kind, params, workload);
}

namespace {

bool same_ids(const std::vector<int32_t>& a, const TokenSetPool& pa, const std::vector<int32_t>& b,
              const TokenSetPool& pb) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (pa.get(a[i]) != pb.get(b[i])) return false;
  return true;
}

bool same_id(int32_t a, const TokenSetPool& pa, int32_t b, const TokenSetPool& pb) {
  if (a < 0 || b < 0) return a == b;
  return pa.get(a) == pb.get(b);
}

}  // namespace

bool same_program(const RankProgram& a, const TokenSetPool& pa, const RankProgram& b, const TokenSetPool& pb,
                  std::string* why) {
  auto fail = [&](std::string msg) {
    if (why) *why = std::move(msg);
    return false;
  };
  if (a.rank != b.rank || a.batch_begin != b.batch_begin || a.batch_end != b.batch_end) return fail("header");
  if (a.buffers.size() != b.buffers.size()) return fail("buffer count");
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const auto &x = a.buffers[i], &y = b.buffers[i];
    if (x.name != y.name || x.fields != y.fields || x.heads != y.heads || x.capacity_tokens != y.capacity_tokens ||
        x.fp32 != y.fp32)
      return fail(fmt::format("buffer {}", i));
  }
  if (a.ops.size() != b.ops.size()) return fail("op count");
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const Op &x = a.ops[i], &y = b.ops[i];
    const bool same =
        x.kind == y.kind && x.stream == y.stream && x.phase == y.phase && x.mask == y.mask && x.step == y.step &&
        x.peer == y.peer && x.tag == y.tag && x.coll == y.coll && x.flow_set == y.flow_set &&
        std::equal(x.buf, x.buf + 4, y.buf) && same_id(x.tok[0], pa, y.tok[0], pb) &&
        same_id(x.tok[1], pa, y.tok[1], pb) && x.heads == y.heads && x.fields == y.fields && x.bytes == y.bytes &&
        x.flops == y.flops &&
        std::vector<int32_t>(a.deps_begin(x), a.deps_end(x)) == std::vector<int32_t>(b.deps_begin(y), b.deps_end(y));
    if (!same) return fail(fmt::format("op {}", i));
  }
  if (a.collectives.size() != b.collectives.size()) return fail("collective count");
  for (size_t i = 0; i < a.collectives.size(); ++i) {
    const auto &x = a.collectives[i], &y = b.collectives[i];
    if (x.kind != y.kind || x.group != y.group || x.fields != y.fields || x.reduction != y.reduction ||
        x.in_heads != y.in_heads || x.out_heads != y.out_heads || x.elements != y.elements ||
        !same_ids(x.in_tokens, pa, y.in_tokens, pb) || !same_ids(x.out_tokens, pa, y.out_tokens, pb))
      return fail(fmt::format("collective {}", i));
  }
  auto same_bindings = [&](const std::vector<Binding>& x, const std::vector<Binding>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].buf != y[i].buf || x[i].field != y[i].field || x[i].heads != y[i].heads ||
          !same_id(x[i].tokens, pa, y[i].tokens, pb))
        return false;
    return true;
  };
  if (!same_bindings(a.inputs, b.inputs)) return fail("inputs");
  if (!same_bindings(a.outputs, b.outputs)) return fail("outputs");
  return true;
}

Totals totals(const RankProgram& program) {
  Totals t;
  for (const Op& op : program.ops) {
    const bool fwd = op.phase == Phase::Forward;
    if (op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd) (fwd ? t.fwd_flops : t.bwd_flops) += op.flops;
    if (op.kind == OpKind::Send) (fwd ? t.fwd_p2p : t.bwd_p2p) += op.bytes;
    if (is_collective(op.kind) && op.kind != OpKind::AllReduce) (fwd ? t.fwd_coll : t.bwd_coll) += op.bytes;
  }
  return t;
}

}  // namespace wallfacer::testing
