// Test plans and traffic sums (see team_plans.hpp).
#include "strategies_team/team_plans.hpp"

#include <wallfacer/check/checker.hpp>
#include "common/strategy_params.hpp"
#include "common/synthetic_workload.hpp"

namespace wallfacer::team_testing {

Workload workload(int64_t seq, int heads, int kv_heads, bool causal, int batch, int head_dim) {
  return test::synthetic_workload({seq, heads, kv_heads, head_dim, batch, causal, DType::BF16, 64});
}

StrategyParams params_of(int S, int D, int C, Placement placement) {
  return params_of(StrategyKind::WallFacer, S, D, C, placement);
}

StrategyParams params_of(StrategyKind kind, int S, int D, int C, Placement placement) {
  return test::typed_params(kind, {.S = S, .D = D, .C = C, .placement = placement});
}

Plan plan_of(StrategyKind kind, const StrategyParams& params, const Workload& workload) {
  return test::topology_free_plan(kind, params, workload);
}

Traffic traffic(const RankProgram& program) {
  Traffic t;
  for (const Op& op : program.ops) {
    const int ph = op.phase == Phase::Forward ? 0 : 1;
    switch (op.kind) {
      case OpKind::Send:
        t.p2p[ph] += op.bytes, ++t.sends[ph];
        break;
      case OpKind::AllGather:
        t.all_gather[ph] += op.bytes;
        break;
      case OpKind::ReduceScatter:
        t.reduce_scatter[ph] += op.bytes;
        break;
      case OpKind::AllToAll:
        t.all_to_all[ph] += op.bytes;
        break;
      case OpKind::AllReduce:
        t.all_reduce[ph] += op.bytes;
        break;
      case OpKind::AttnFwd:
      case OpKind::AttnBwd:
        t.flops[ph] += op.flops;
        break;
      default:
        break;
    }
  }
  return t;
}

double closed_form_flops(const Workload& w, Phase phase) {
  int64_t pairs = 0;
  for (int64_t q = 0; q < w.seq; ++q)
    pairs += w.causal ? q + 1 : w.seq;
  const double forward = 4.0 * w.batch * double(pairs) * w.heads * w.head_dim;
  return phase == Phase::Forward ? forward : 2.5 * forward;
}

std::string check_errors(const Plan& plan, Schedule* out) {
  Schedule schedule = ScheduleBuilder(plan).build();
  CheckReport report = check_schedule(plan, schedule);
  std::string all;
  for (const auto& e : report.errors)
    all += e + "\n";
  if (out) *out = std::move(schedule);
  return all;
}

}  // namespace wallfacer::team_testing
