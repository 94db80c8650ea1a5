// Proves a full schedule correct before anyone runs it: every (query, key) pair the mask needs is
// computed exactly once per head and nothing else, every send has one matching receive of equal
// size, collectives are called in the same order by all members, execution under blocking
// semantics (schedule.hpp) cannot deadlock, buffers are never overwritten while still read, and
// outputs cover every token of O, dQ, dK and dV exactly once. A whole-step schedule (step.hpp)
// is proved layer by layer: each unrolled layer covers its pairs and its tokens once.
#pragma once

#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer {

struct CheckReport {
  bool ok = true;
  std::vector<std::string> errors;                  // first few problems, each naming rank, op and what is wrong
  int64_t ops = 0, sends = 0, collectives = 0;      // collectives: one per group call, not per member
  int64_t forward_blocks = 0, backward_blocks = 0;  // attention blocks, recomputed ones not included
  // Whole-step schedules (docs/step.md); zero for an attention schedule except `layers`.
  int64_t recomputed_blocks = 0;  // forward blocks the backward repeats (kOpRecompute)
  int64_t gemms = 0, pointwise = 0;
  int64_t flat_collectives = 0;  // group calls over flat vectors (AllReduce included), part of `collectives`
  int layers = 1;                // unrolled layers (buffers named "<name>.L<n>"); an attention schedule is one
};

// Checks a schedule that holds every rank of `plan`.
CheckReport check_schedule(const Plan& plan, const Schedule& schedule);
// Builds and checks; throws ScheduleError with the report's errors when it fails.
void check_or_throw(const Plan& plan, const Schedule& schedule);

}  // namespace wallfacer
