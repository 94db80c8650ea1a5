// The one place that talks to SimGrid. Everything else in simulator/ describes hosts, links and
// routes in plain structs and drives activities through the small API below, so the SimGrid API
// differences between 3.32 and 4.x (zone and actor creation, route declaration) stay in
// simgrid_adapter.cpp behind SIMGRID_VERSION.
//
// SimGrid 3.32 keeps global state (clock, models, configuration) that cannot be reset within a
// process, so an Engine may be created once per process: simulate() runs each simulation in a
// child process (isolated_run.hpp) and creates exactly one SimEngine there.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace wallfacer::sim {

struct EngineConfig {
  std::string network_model = "CM02";  // CM02, LV08, SMPI or IB
  bool tcp_effects = false;            // keep SimGrid's cross-traffic and TCP-gamma window cap
  bool verbose = false;                // let SimGrid log at info level (stderr)
  int actor_stack_KiB = 32;            // why these two defaults: SimOptions (simulator.hpp)
  bool stack_guard = false;
  int threads = 1;  // threads running actors between scheduling rounds (SimGrid's parallel contexts)
};

// Network models simulate() accepts.
const std::vector<std::string>& supported_network_models();

struct HostSpec {
  std::string name;
  std::vector<double> speeds;  // FLOP/s per power state; state 0 is the nominal speed
};

struct LinkSpec {
  std::string name;
  double bandwidth_Bps = 0;  // per direction when split_duplex
  double latency_s = 0;
  bool split_duplex = true;  // full duplex: each direction is its own resource
};

// One link of a route and the direction it is crossed in (ignored for shared links).
struct LinkUse {
  int link = -1;
  bool forward = true;
};

// Where an activity of an actor ended.
struct Completion {
  uint64_t tag = 0;         // the caller's tag given when starting the activity
  double start = 0;         // simulated seconds: when it started transferring / computing
  double finish = 0;        // simulated seconds (always set; start only with keep_times)
  void* payload = nullptr;  // receives: the sender's payload pointer
};

// The activities one actor has in flight. Only usable inside that actor's body.
class ActivitySet {
 public:
  ActivitySet();
  ~ActivitySet();
  ActivitySet(const ActivitySet&) = delete;
  ActivitySet& operator=(const ActivitySet&) = delete;

  void exec(int host, double flops, uint64_t tag);
  // Posts a send on a channel; it pairs with the oldest pending receive there (FIFO).
  void send(int channel, double bytes, void* payload, uint64_t tag);
  void recv(int channel, uint64_t tag);
  // Finishes after `seconds` of simulated time, using no resource.
  void timer(double seconds, uint64_t tag);
  // Which timers the actor must be woken for when they expire. The others are handed out at the
  // next wake-up, with their own finish times and before anything that finished later: for a
  // timer whose completion lets the actor start nothing, that is the same simulation with one
  // context switch and one kernel timer fewer.
  using WakePolicy = bool (*)(const void* context, uint64_t tag);
  void set_wake_policy(WakePolicy policy, const void* context);
  // Blocks the calling actor until one activity finishes and removes it from the set. Completions
  // come in the order of their finish times.
  Completion wait_any();
  // The engine's clock when the last wait_any() returned (for a completion handed out late, later
  // than its finish time).
  double woken_at() const;
  // Whether completions carry start and finish times (off by default: reading them costs time
  // and only traces need them).
  void keep_times(bool on);
  bool empty() const;
  size_t size() const;

 private:
  Completion take(size_t index);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class SimEngine {
 public:
  explicit SimEngine(const EngineConfig& config);
  ~SimEngine();
  SimEngine(const SimEngine&) = delete;
  SimEngine& operator=(const SimEngine&) = delete;

  // Platform description; call seal() once everything is declared, before spawn().
  int add_host(const HostSpec& host);
  int add_link(const LinkSpec& link);
  // One-way route between two hosts (call again with the reverse order for the way back). An
  // empty link list is a loopback that costs nothing.
  void add_route(int src_host, int dst_host, const std::vector<LinkUse>& links);
  void seal();
  // Mailbox on which sends and receives pair in FIFO order.
  int add_channel(const std::string& name);

  void spawn(const std::string& name, int host, std::function<void()> body);
  // Runs until every actor returned or nothing can progress; returns false on a deadlock
  // (some actor still waits for an activity that can never finish).
  bool run();
  // Calls `observer` with the simulated time whenever the engine's clock advances (from the
  // engine, between actor steps).
  void on_clock_advance(std::function<void(double now_s)> observer);

  static double now();  // simulated seconds
  static void set_power_state(int host, int state);
  // Route the engine resolves between two hosts: link names and summed latency (for tests).
  std::vector<std::string> resolved_route(int src_host, int dst_host, double* latency_s) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wallfacer::sim
