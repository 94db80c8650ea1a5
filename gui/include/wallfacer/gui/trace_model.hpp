// A simulation trace (the simulator's Chrome trace-event JSON, docs/simulator.md "Trace") read
// back for the timeline: per rank its four streams' slices (compute, send, receive, collective),
// the flow arrows that pair sends with receives, and the step's critical path.
#pragma once

#include <string>
#include <vector>

namespace wallfacer::gui {

enum class Stream { Compute = 0, Send = 1, Recv = 2, Collective = 3, Sync = 4 };
constexpr int kNumStreams = 5;
const char* to_string(Stream stream);

struct TraceSlice {
  int track = 0;  // index into TraceModel::ranks
  Stream stream = Stream::Compute;
  double start_us = 0, duration_us = 0;
  std::string name;
  std::string details;  // the slice's args, one "key: value" per line
  int flow_from = -1;   // a receive's send slice (through the flow arrow), -1 when none
  double end_us() const { return start_us + duration_us; }
};

struct TraceTrack {
  int rank = 0;
  std::string name;  // "rank 3 (n0/gpu3)"
};

struct TraceModel {
  std::string source;
  std::vector<TraceTrack> ranks;
  std::vector<TraceSlice> slices;
  double end_us = 0;
  std::string strategy, topology;  // from otherData, when present
  // Slice indices from the step's first op to the op that ends it. Each op on it is the one the
  // next waited for: on the same rank the latest op to end before the next starts, or, for a
  // receive, the matching send when that ended later.
  std::vector<int> critical_path;
};

// Parses trace text; `source` names the file in errors. Throws InputError ("FILE:LINE: error:")
// for invalid JSON or a document that is not a wallfacer trace.
TraceModel parse_trace(const std::string& text, const std::string& source);
TraceModel read_trace_file(const std::string& path);
// The critical path by the rule above (parse_trace fills TraceModel::critical_path with it).
std::vector<int> critical_path(const TraceModel& model);

}  // namespace wallfacer::gui
