// The device plan of a training step (step_device_plan.hpp): the step programs of every rank as
// the trainer builds them, the trainer's scalar all-reduces written in, and make_device_plan.
#include <wallfacer/train/step_device_plan.hpp>

#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/train/trainer.hpp>

namespace wallfacer::train {

namespace {

int32_t optimizer_op(const RankProgram& program) {
  for (size_t i = 0; i < program.ops.size(); ++i)
    if (program.ops[i].kind == OpKind::Pointwise && program.ops[i].label == StepOp::Optimizer) return int32_t(i);
  throw ScheduleError(fmt::format("rank {}: the step program has no Optimizer op", program.rank));
}

// The stream of `group`'s collectives in `program` (every collective of a group runs on one).
Stream stream_of_group(const RankProgram& program, int group) {
  for (const Op& op : program.ops)
    if (is_collective(op.kind) && op.coll >= 0 && program.collectives[size_t(op.coll)].group == group) return op.stream;
  return Stream::Collective;
}

// The all-reduce of the step's scalars over `group`, as the trainer posts it (double values).
Op scalar_all_reduce(RankProgram& out, int group, Stream stream) {
  CollectiveSpec spec;
  spec.kind = OpKind::AllReduce;
  spec.group = group;
  spec.fields = fieldset::kWeightGrad;
  spec.elements = kStepScalars;
  out.collectives.push_back(spec);
  Op op;
  op.kind = OpKind::AllReduce;
  op.stream = stream;
  op.phase = Phase::Backward;
  op.coll = int32_t(out.collectives.size()) - 1;
  op.fields = fieldset::kWeightGrad;
  op.bytes = kStepScalars * int64_t(sizeof(double));
  return op;
}

}  // namespace

RankProgram with_scalar_all_reduces(const RankProgram& program, const std::vector<int>& groups) {
  const int32_t optimizer = optimizer_op(program);
  RankProgram out = program;
  out.ops.clear();
  out.deps.clear();
  std::vector<int32_t> moved(program.ops.size(), -1);  // by op of `program`: its index in `out`
  std::vector<int32_t> deps;
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    deps.clear();
    for (const int32_t* d = program.deps_begin(op); d != program.deps_end(op); ++d)
      deps.push_back(moved.at(size_t(*d)));
    if (int32_t(i) == optimizer) {
      // Each all-reduce waits for what the optimizer waits for (every gradient) and the one before.
      std::vector<int32_t> before = deps;
      for (int group : groups) {
        const int32_t reduce = out.add(scalar_all_reduce(out, group, stream_of_group(program, group)), before);
        before = {reduce};
        deps.push_back(reduce);
      }
    }
    moved[i] = out.add(op, deps);
  }
  return out;
}

StepDevicePlan step_device_plan(const Plan& plan) {
  StepDevicePlan out;
  for (int r = 0; r < plan.num_ranks(); ++r) {
    RankStep step = rank_step_program(plan, r);
    if (r == 0) {
      out.schedule.dims = step.schedule.dims;
      out.schedule.flow_sets = step.schedule.flow_sets;
    }
    out.schedule.ranks.push_back(with_scalar_all_reduces(step.program(), gradient_groups(plan, r)));
  }
  out.device = runtime::make_device_plan(out.schedule, plan);
  return out;
}

}  // namespace wallfacer::train
