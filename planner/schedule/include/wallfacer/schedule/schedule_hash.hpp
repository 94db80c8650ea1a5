// A fingerprint of what a schedule does: two plans whose programs move the same data between the
// same GPUs and compute the same blocks in the same order hash alike, whatever the strategy that
// built them is called (a USP split with one Ulysses group and the plain ring, say). Labels that
// change nothing when the schedule runs are left out: buffer names, message tags, round numbers,
// group and flow-set indices (a collective is hashed by its members' GPUs instead).
#pragma once

#include <cstdint>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer {

// A 64-bit FNV-1a-style hash, one step per field, over the programs `schedule` holds (in the order
// it holds them), with each rank's GPU from `plan`. Compared within one run, never stored.
uint64_t schedule_hash(const Plan& plan, const Schedule& schedule);

}  // namespace wallfacer
