// Chrome trace-event JSON (Perfetto, chrome://tracing) of a replay: one process per rank named
// "rank r (node/gpu)", one thread per stream (compute, send, recv, collective), a complete
// ("X") slice per op with its kind, step, bytes and FLOPs, and a flow arrow from every send to
// its receive. Slice starts and ends lie on one nanosecond grid, so slices of one thread never
// overlap. A last process, "links", holds counter tracks: bytes in flight and the utilisation of
// each link class (trace.cpp, write_counters). The output is byte-identical across runs: fixed
// number formatting and a stable event order (by rank, thread, start time, op).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/topology/topology.hpp>
#include "replay.hpp"

namespace wallfacer::sim {

struct TraceContext {
  const Plan& plan;
  const Topology& topology;
  const Schedule& schedule;
  const std::vector<RankOutcome>& outcomes;
  std::string network_model;
  double step_seconds = 0;
  std::vector<int> ranks;   // ranks to show, ascending; empty: all
  int layers_replayed = 0;  // a step plan's layers the replay ran (0: one attention layer)
};

// Thread ids of the streams inside a rank's process.
constexpr int kTraceTidCompute = 1, kTraceTidSend = 2, kTraceTidRecv = 3, kTraceTidCollective = 4, kTraceTidSync = 5;

void write_chrome_trace(std::ostream& out, const TraceContext& context);
// Writes to a file; throws InputError naming the path when it cannot be written.
void write_chrome_trace_file(const std::string& path, const TraceContext& context);

}  // namespace wallfacer::sim
