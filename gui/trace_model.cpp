#include <wallfacer/gui/trace_model.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/input_limits.hpp>

namespace wallfacer::gui {
namespace {

using Json = nlohmann::json;

int line_of_offset(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + int(std::count(text.begin(), text.begin() + std::ptrdiff_t(offset), '\n'));
}

std::string details_of(const Json& args) {
  std::string text;
  if (!args.is_object()) return text;
  for (const auto& [key, value] : args.items())
    text += key + ": " + (value.is_string() ? value.get<std::string>() : value.dump()) + "\n";
  if (!text.empty()) text.pop_back();
  return text;
}

struct Reader {
  const std::string& source;
  TraceModel& model;
  std::map<int64_t, int> track_of_pid;

  [[noreturn]] void fail(size_t event, const std::string& what) const {
    throw InputError(source, 0, fmt::format("traceEvents[{}]: {}", event, what));
  }

  void read_names(const Json& events) {
    for (size_t i = 0; i < events.size(); ++i) {
      const Json& e = events[i];
      if (!e.is_object()) fail(i, "expected an object");
      if (e.value("ph", "") != "M" || e.value("name", "") != "process_name") continue;
      const std::string name = e.contains("args") ? e["args"].value("name", "") : "";
      if (name.rfind("rank ", 0) != 0 || !e.contains("pid") || !e["pid"].is_number_integer()) continue;
      int rank = 0;
      try {
        rank = std::stoi(name.substr(5));
      } catch (const std::exception&) {
        fail(i, fmt::format("process name '{}' does not start with 'rank N'", name));
      }
      track_of_pid[e["pid"].get<int64_t>()] = int(model.ranks.size());
      model.ranks.push_back({rank, name});
    }
    if (model.ranks.empty())
      throw InputError(source, 0, "no 'rank N' processes: not a trace written by wallfacer simulate --trace");
  }

  double number(const Json& e, const char* key, size_t i) const {
    if (!e.contains(key) || !e[key].is_number()) fail(i, fmt::format("'{}' is missing or not a number", key));
    const double v = e[key].get<double>();
    if (!(v >= 0) || v > 1e15) fail(i, fmt::format("'{}' is {}, expected a time from 0 to 1e15 us", key, v));
    return v;
  }

  void read_slices(const Json& events) {
    for (size_t i = 0; i < events.size(); ++i) {
      const Json& e = events[i];
      if (e.value("ph", "") != "X") continue;
      if (!e.contains("pid") || !e["pid"].is_number_integer()) fail(i, "'pid' is missing or not an integer");
      auto it = track_of_pid.find(e["pid"].get<int64_t>());
      if (it == track_of_pid.end()) continue;
      const int tid = e.value("tid", 0);
      if (tid < 1 || tid > kNumStreams) fail(i, fmt::format("'tid' is {}, expected 1 to {}", tid, kNumStreams));
      TraceSlice s;
      s.track = it->second;
      s.stream = Stream(tid - 1);
      s.start_us = number(e, "ts", i);
      s.duration_us = number(e, "dur", i);
      s.name = e.value("name", "");
      if (e.contains("args")) s.details = details_of(e["args"]);
      model.end_us = std::max(model.end_us, s.end_us());
      model.slices.push_back(std::move(s));
    }
  }

  // The slice of (track, stream) under time ts: the latest to start at or before it.
  int slice_at(const std::vector<std::vector<int>>& by_lane, int track, int stream, double ts) const {
    const auto& lane = by_lane[size_t(track * kNumStreams + stream)];
    auto it = std::upper_bound(lane.begin(), lane.end(), ts + 1e-6,
                               [&](double t, int s) { return t < model.slices[size_t(s)].start_us; });
    return it == lane.begin() ? -1 : *(it - 1);
  }

  void read_flows(const Json& events) {
    std::vector<std::vector<int>> by_lane(model.ranks.size() * kNumStreams);
    for (size_t i = 0; i < model.slices.size(); ++i)
      by_lane[size_t(model.slices[i].track * kNumStreams + int(model.slices[i].stream))].push_back(int(i));
    for (auto& lane : by_lane)
      std::stable_sort(lane.begin(), lane.end(), [&](int a, int b) {
        return model.slices[size_t(a)].start_us < model.slices[size_t(b)].start_us;
      });
    std::map<int64_t, int> sends;
    std::vector<std::pair<int64_t, int>> receives;
    for (size_t i = 0; i < events.size(); ++i) {
      const Json& e = events[i];
      const std::string ph = e.value("ph", "");
      if ((ph != "s" && ph != "f") || !e.contains("id") || !e["id"].is_number_integer()) continue;
      auto it = track_of_pid.find(e.value("pid", int64_t(-1)));
      if (it == track_of_pid.end()) continue;
      const int tid = e.value("tid", 0);
      if (tid < 1 || tid > kNumStreams) continue;
      const int slice = slice_at(by_lane, it->second, tid - 1, number(e, "ts", i));
      if (slice < 0) continue;
      if (ph == "s")
        sends[e["id"].get<int64_t>()] = slice;
      else
        receives.emplace_back(e["id"].get<int64_t>(), slice);
    }
    for (const auto& [id, slice] : receives)
      if (auto it = sends.find(id); it != sends.end()) model.slices[size_t(slice)].flow_from = it->second;
  }
};

}  // namespace

const char* to_string(Stream stream) {
  switch (stream) {
    case Stream::Compute:
      return "compute";
    case Stream::Send:
      return "send";
    case Stream::Recv:
      return "recv";
    case Stream::Collective:
      return "collective";
    case Stream::Sync:
      return "sync";
  }
  return "?";
}

TraceModel parse_trace(const std::string& text, const std::string& source) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw InputError(source, line_of_offset(text, e.byte > 0 ? e.byte - 1 : 0),
                     fmt::format("invalid JSON: {}", e.what()));
  }
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw InputError(source, 0, "expected a JSON object with a 'traceEvents' array (Chrome trace format)");
  TraceModel model;
  model.source = source;
  if (doc.contains("otherData") && doc["otherData"].is_object()) {
    model.strategy = doc["otherData"].value("strategy", "");
    model.topology = doc["otherData"].value("topology", "");
  }
  Reader reader{source, model, {}};
  const Json& events = doc["traceEvents"];
  reader.read_names(events);
  reader.read_slices(events);
  reader.read_flows(events);
  model.critical_path = critical_path(model);
  return model;
}

TraceModel read_trace_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw InputError(path, 0, "cannot open the file");
  // Traces run larger than the other inputs (a 4,096-rank replay writes ~150 MB): four times the
  // input limit.
  const int64_t limit = 4 * limits::max_input_bytes(), size = int64_t(in.tellg());
  if (size > limit)
    throw InputError(
        path, 0,
        fmt::format("the trace is {} MiB, more than the {} MiB a trace may be (4 x WALLFACER_MAX_INPUT_MIB; "
                    "or trace fewer ranks with simulate --trace-ranks)",
                    size >> 20, limit >> 20));
  in.seekg(0);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_trace(text.str(), path);
}

std::vector<int> critical_path(const TraceModel& model) {
  const auto& slices = model.slices;
  if (slices.empty()) return {};
  std::vector<std::vector<int>> by_track(model.ranks.size());
  for (size_t i = 0; i < slices.size(); ++i)
    by_track[size_t(slices[i].track)].push_back(int(i));
  for (auto& track : by_track)
    std::stable_sort(track.begin(), track.end(),
                     [&](int a, int b) { return slices[size_t(a)].end_us() < slices[size_t(b)].end_us(); });
  std::unordered_set<int> on_path;
  // The op on `track` that ends last at or before `time`, not yet on the path.
  auto latest_before = [&](int track, double time) {
    const auto& ops = by_track[size_t(track)];
    auto it = std::upper_bound(ops.begin(), ops.end(), time + 1e-6,
                               [&](double t, int s) { return t < slices[size_t(s)].end_us(); });
    while (it != ops.begin()) {
      --it;
      if (!on_path.count(*it)) return *it;
    }
    return -1;
  };
  int current = 0;
  for (size_t i = 1; i < slices.size(); ++i)
    if (slices[i].end_us() > slices[size_t(current)].end_us()) current = int(i);
  std::vector<int> path;
  while (current >= 0 && path.size() < slices.size()) {
    path.push_back(current);
    on_path.insert(current);
    const TraceSlice& s = slices[size_t(current)];
    const int same = latest_before(s.track, s.start_us);
    int next = same;
    if (s.flow_from >= 0 && !on_path.count(s.flow_from)) {
      const TraceSlice& send = slices[size_t(s.flow_from)];
      const int remote = latest_before(send.track, send.start_us);
      // The transfer started when its later end was posted: follow the sender when it was later.
      if (remote >= 0 && (same < 0 || slices[size_t(remote)].end_us() > slices[size_t(same)].end_us()))
        next = s.flow_from;
    }
    current = next;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace wallfacer::gui
