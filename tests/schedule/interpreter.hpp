// A test-only interpreter of schedules: runs every rank's program under the blocking semantics
// of schedule.hpp (four in-order streams, explicit dependencies, a Send completing with its
// matching Recv, a collective completing once all members started it) and tracks symbolically
// what every buffer row holds: which K,V tokens an O|Lse row has merged, which keys a dQ row has
// summed, which (query head, query) pairs a dK|dV row has summed. At the end it assembles the
// outputs and reports every pair that is missing, doubled, or read before it was final.
// Small workloads only (seq <= 64).
#pragma once

#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::testing {

enum class Order {
  CommunicationFirst,  // run transfers as early as possible (exposes missing write-after-read deps)
  ComputeFirst,        // run local ops as early as possible
};

struct RunResult {
  bool completed = false;           // every op ran
  std::vector<std::string> errors;  // data-flow, matching and deadlock problems (first few)
  int64_t ops_run = 0;
  std::string summary() const;
};

RunResult run_schedule(const Plan& plan, const Schedule& schedule, Order order);

}  // namespace wallfacer::testing
