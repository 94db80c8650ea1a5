// The Chrome trace: valid JSON with one process per rank, the four stream threads, one slice
// per op and a flow arrow from every send to its receive; byte-identical across runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "simulator/sim_test_util.hpp"

namespace wallfacer {
namespace {

using test::compute_op;
using test::read_file;
using test::recv_op;
using test::send_op;
using test::temp_path;

// Every rank sends to its successor, receives from its predecessor, and computes, for 3 steps.
struct RingTraceCase {
  int ranks = 4, steps = 3;
  Topology topology = Topology::parse(test::star_topology_yaml(4, 100, 1), "star.yaml");
  Plan plan = test::placement_plan(topology, 4);
  Schedule schedule = build();
  Schedule build() {
    Schedule s = test::empty_schedule(ranks);
    for (int r = 0; r < ranks; ++r)
      for (int t = 0; t < steps; ++t) {
        RankProgram& p = s.ranks[size_t(r)];
        int32_t recv = p.add(recv_op((r + ranks - 1) % ranks, t, 1 << 20, t));
        p.add(send_op((r + 1) % ranks, t, 1 << 20, t));
        p.add(compute_op(s, 1e10, t), {recv});
      }
    return s;
  }
  std::string simulate_to(const std::string& name, std::vector<int> ranks = {}) {
    SimOptions options;
    options.trace_path = temp_path(name);
    options.trace_ranks = std::move(ranks);
    simulate_schedule(plan, topology, schedule, options);
    std::string text = read_file(options.trace_path);
    std::filesystem::remove(options.trace_path);
    return text;
  }
};

TEST(SimulatorTrace, TwoRunsWriteByteIdenticalFiles) {
  RingTraceCase c;
  std::string first = c.simulate_to("a.json");
  std::string second = c.simulate_to("b.json");
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first, second);
}

TEST(SimulatorTrace, HasRankProcessesStreamThreadsSlicesAndFlows) {
  RingTraceCase c;
  nlohmann::json trace = nlohmann::json::parse(c.simulate_to("c.json"));
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<int, std::string> process_names;
  std::map<int, std::set<std::string>> threads;
  std::map<std::string, int> slices_by_cat;
  std::map<int64_t, std::pair<int, int>> flow_ends;  // id -> (sender pid, receiver pid)
  std::map<int64_t, int> flow_starts, flow_finishes;
  for (const auto& e : trace["traceEvents"]) {
    std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "process_name") process_names[e.at("pid")] = e.at("args").at("name");
    if (ph == "M" && e.at("name") == "thread_name") threads[e.at("pid")].insert(e.at("args").at("name"));
    if (ph == "X") {
      ++slices_by_cat[e.at("cat")];
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      std::string name = e.at("name");
      EXPECT_NE(name.find("step"), std::string::npos) << name;
    }
    if (ph == "s") {
      ++flow_starts[e.at("id")];
      flow_ends[e.at("id")].first = e.at("pid");
    }
    if (ph == "f") {
      ++flow_finishes[e.at("id")];
      EXPECT_EQ(e.at("bp"), "e");
      flow_ends[e.at("id")].second = e.at("pid");
    }
  }
  ASSERT_EQ(process_names.size(), 5u);  // the ranks and the link counters
  EXPECT_EQ(process_names[2], "rank 2 (n0/gpu2)");
  EXPECT_EQ(process_names[4], "links");
  threads.erase(4);
  for (const auto& [pid, names] : threads)
    EXPECT_EQ(names, (std::set<std::string>{"compute", "send", "recv", "collective", "sync"})) << pid;
  EXPECT_EQ(slices_by_cat["compute"], c.ranks * c.steps);
  EXPECT_EQ(slices_by_cat["p2p"], 2 * c.ranks * c.steps);  // a send slice and a receive slice each
  ASSERT_EQ(flow_starts.size(), size_t(c.ranks * c.steps));
  for (const auto& [id, ends] : flow_ends) {
    EXPECT_EQ(flow_starts[id], 1);
    EXPECT_EQ(flow_finishes[id], 1);
    EXPECT_EQ(ends.second, (ends.first + 1) % c.ranks) << "flow " << id;  // to the ring successor
  }
}

TEST(SimulatorTrace, SliceTimesMatchTheSimulation) {
  RingTraceCase c;
  nlohmann::json trace = nlohmann::json::parse(c.simulate_to("d.json"));
  double last_end_us = 0;
  for (const auto& e : trace["traceEvents"])
    if (e.at("ph") == "X") last_end_us = std::max(last_end_us, e.at("ts").get<double>() + e.at("dur").get<double>());
  SimResult result = simulate_schedule(c.plan, c.topology, c.schedule);
  EXPECT_NEAR(last_end_us, result.step_ms * 1e3, 2e-3);  // microseconds printed to the nanosecond
  EXPECT_NEAR(trace["otherData"]["step_us"].get<double>(), result.step_ms * 1e3, 1e-3);
}

// Nanoseconds of a trace time printed as microseconds with three decimals.
int64_t trace_nanos(const nlohmann::json& value) {
  return std::llround(value.get<double>() * 1000);
}

TEST(SimulatorTrace, SlicesOfOneThreadNeverOverlap) {
  RingTraceCase c;
  nlohmann::json trace = nlohmann::json::parse(c.simulate_to("g.json"));
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> spans;
  for (const auto& e : trace["traceEvents"])
    if (e.at("ph") == "X") {
      const int64_t start = trace_nanos(e.at("ts"));
      spans[{e.at("pid").get<int>(), e.at("tid").get<int>()}].push_back({start, start + trace_nanos(e.at("dur"))});
    }
  ASSERT_FALSE(spans.empty());
  for (auto& [track, list] : spans) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i)
      EXPECT_LE(list[i - 1].second, list[i].first) << "pid " << track.first << " tid " << track.second;
  }
}

// Each rank sends 1 MiB three times: bytes in flight climb by a multiple of 1 MiB, never above
// every rank's send at once, and end at zero. The star's links are NVLink: 4 links of 100 GB/s
// each way, 800 GB/s in all, and each send can use only its sender's link out (100 GB/s), so
// the four at once reach at most 50 %.
TEST(SimulatorTrace, CountersOfBytesInFlightAndLinkUtilisation) {
  RingTraceCase c;
  nlohmann::json trace = nlohmann::json::parse(c.simulate_to("h.json"));
  std::vector<double> in_flight;
  std::set<std::string> counters;
  double busiest = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.at("ph") != "C") continue;
    EXPECT_EQ(e.at("pid"), c.ranks);
    counters.insert(e.at("name").get<std::string>());
    if (e.at("name") == "bytes in flight") in_flight.push_back(e.at("args").at("bytes").get<double>());
    if (e.at("name") != "bytes in flight") {
      EXPECT_GE(e.at("args").at("percent").get<double>(), 0);
      busiest = std::max(busiest, e.at("args").at("percent").get<double>());
    }
  }
  ASSERT_FALSE(in_flight.empty());
  EXPECT_EQ(in_flight.back(), 0);
  EXPECT_LE(*std::max_element(in_flight.begin(), in_flight.end()), double(c.ranks) * (1 << 20));
  EXPECT_GE(*std::max_element(in_flight.begin(), in_flight.end()), double(1 << 20));
  for (double bytes : in_flight)
    EXPECT_EQ(std::fmod(bytes, double(1 << 20)), 0) << bytes;
  EXPECT_EQ(counters, (std::set<std::string>{"bytes in flight", "nvlink utilisation"}));
  EXPECT_GT(busiest, 0);
  EXPECT_LE(busiest, 50 + 1e-3);
}

TEST(SimulatorTrace, ChosenRanksOnlyWithArrowsBetweenThem) {
  RingTraceCase c;
  // Ranks 1 and 2 (listed twice and out of order): the ring edge 1 -> 2 keeps its arrows, the
  // edges into 1 and out of 2 lead to ranks not shown and have none.
  nlohmann::json trace = nlohmann::json::parse(c.simulate_to("e.json", {2, 1, 2}));
  std::set<int> pids;
  std::map<int64_t, std::pair<int, int>> flows;  // id -> (starts, finishes)
  int p2p_slices = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.at("pid").get<int>() != c.ranks) pids.insert(e.at("pid").get<int>());  // c.ranks: the counters
    if (e.at("ph") == "X" && e.at("cat") == "p2p") ++p2p_slices;
    if (e.at("ph") == "s") {
      ++flows[e.at("id")].first;
      EXPECT_EQ(e.at("pid"), 1);
    }
    if (e.at("ph") == "f") {
      ++flows[e.at("id")].second;
      EXPECT_EQ(e.at("pid"), 2);
    }
  }
  EXPECT_EQ(pids, (std::set<int>{1, 2}));
  EXPECT_EQ(trace["otherData"]["traced_ranks"], 2);
  EXPECT_EQ(p2p_slices, 2 * 2 * c.steps);  // every send and receive of both ranks
  ASSERT_EQ(flows.size(), size_t(c.steps));
  for (const auto& [id, ends] : flows)
    EXPECT_EQ(ends, std::make_pair(1, 1)) << "flow " << id;
  SimOptions options;
  options.trace_path = temp_path("f.json");
  options.trace_ranks = {4};
  EXPECT_THROW(simulate_schedule(c.plan, c.topology, c.schedule, options), InputError);
}

TEST(SimulatorTrace, UnwritablePathIsAnInputError) {
  RingTraceCase c;
  SimOptions options;
  options.trace_path = "/nonexistent-dir/trace.json";
  EXPECT_THROW(simulate_schedule(c.plan, c.topology, c.schedule, options), InputError);
}

}  // namespace
}  // namespace wallfacer
