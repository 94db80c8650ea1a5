// The device plan of a training step: what the NCCL transport (one process per GPU) issues, call
// by call, each time the trainer runs a step. The NCCL transport issues a rank's communication
// from a plan made from the program the rank runs (wallfacer/runtime/device_plan.hpp); the
// trainer runs its whole-step program plus one communication the program does not hold: the
// all-reduce of the step's loss, accuracy and gradient norm over the gradient groups in turn,
// posted inside the Optimizer op. The plan is made from the step programs of every rank with
// those all-reduces written in, in front of each rank's Optimizer op, so the trainer's every post
// has its call (docs/cuda.md, "Training over NCCL").
#pragma once

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/device_plan.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::train {

struct StepDevicePlan {
  // Every rank's whole-step program as the trainer runs it, with the scalar all-reduces written in
  // (collective ops on the gradient groups, AllReduce of kStepScalars values).
  Schedule schedule;
  runtime::DevicePlan device;
};

// The values the trainer all-reduces once per step: loss, accuracy and the gradient shards'
// summed squares (the last only under ZeRO 1 and 2, the all-reduce is the same call).
inline constexpr int64_t kStepScalars = 3;

// `program` with one AllReduce per group of `groups` (in that order, each after the one before)
// in front of its Optimizer op, which then also waits for the last. Throws ScheduleError when the
// program has no Optimizer op.
RankProgram with_scalar_all_reduces(const RankProgram& program, const std::vector<int>& groups);

// Builds the programs of every rank of `plan` (a plan the trainer accepts: check_trainable) and
// their device plan. Throws what make_device_plan throws.
StepDevicePlan step_device_plan(const Plan& plan);

}  // namespace wallfacer::train
