// SimGrid calls for the simulator, for 3.32 (the Debian 12 package) and the renamed 4.x API.
#include "simgrid_adapter.hpp"

// s4u.hpp first: version.h and log.h rely on the macros it defines.
#include <simgrid/s4u.hpp>

#include <simgrid/version.h>
#include <xbt/log.h>
#include <simgrid/Exception.hpp>

#include <algorithm>
#include <array>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <wallfacer/core/errors.hpp>

namespace sg4 = simgrid::s4u;

namespace wallfacer::sim {
namespace {

// The one engine of this process (SimGrid allows one per process, see the header).
struct EngineState {
  std::unique_ptr<sg4::Engine> engine;
  sg4::NetZone* zone = nullptr;
  std::vector<sg4::Host*> hosts;
  std::vector<sg4::Link*> links;  // SplitDuplexLink for split_duplex specs
  std::vector<bool> split;
  std::vector<sg4::Mailbox*> channels;
  bool deadlocked = false;
};
EngineState* g_state = nullptr;

void silence_simgrid_logs(bool verbose) {
  // SimGrid logs to stderr; keep it quiet unless asked so --json output stays clean. The
  // deadlock report is ours to make (SimEngine::run returns false), so its SimGrid banner goes.
  xbt_log_control_set(verbose ? "root.thresh:info" : "root.thresh:critical");
  xbt_log_control_set("ker_engine.app:file:/dev/null");
}

void configure(const EngineConfig& config) {
  sg4::Engine::set_config("network/model:" + config.network_model);
  if (!config.tcp_effects) {
    // With both off an uncontended transfer takes exactly latency + size / bandwidth.
    sg4::Engine::set_config("network/crosstraffic:0");
    sg4::Engine::set_config("network/TCP-gamma:0");
  }
#if defined(__SANITIZE_ADDRESS__)
  // Instrumented frames are several times larger: the small stacks of plain builds overflow.
  sg4::Engine::set_config("contexts/stack-size:" + std::to_string(std::max(config.actor_stack_KiB, 1024)));
#else
  sg4::Engine::set_config("contexts/stack-size:" + std::to_string(config.actor_stack_KiB));
#endif
  sg4::Engine::set_config(config.stack_guard ? "contexts/guard-size:1" : "contexts/guard-size:0");
}

sg4::NetZone* make_root_zone(sg4::Engine& engine) {
#if SIMGRID_VERSION >= 40000
  return engine.get_netzone_root()->add_netzone_full("wallfacer");
#else
  (void)engine;
  return sg4::create_full_zone("wallfacer");
#endif
}

sg4::LinkInRoute link_in_route(const LinkUse& use) {
  sg4::Link* link = g_state->links.at(size_t(use.link));
  if (!g_state->split[size_t(use.link)]) return sg4::LinkInRoute(link);
  return sg4::LinkInRoute(link, use.forward ? sg4::LinkInRoute::Direction::UP : sg4::LinkInRoute::Direction::DOWN);
}

}  // namespace

const std::vector<std::string>& supported_network_models() {
  // Not SimGrid's "Constant" model: it refuses links (aborting the simulation) and makes every
  // transfer take one fixed time whatever its size.
  static const std::vector<std::string> models = {"CM02", "LV08", "SMPI", "IB"};
  return models;
}

// ---- ActivitySet ------------------------------------------------------------------------------

// Laid out by use: an actor wakes with its set out of cache (thousands of other actors ran since),
// so what every wake-up reads shares the first two cache lines.
struct alignas(64) ActivitySet::Impl {
  struct Slot {
    uint64_t tag = 0;
    void** payload = nullptr;  // receive buffer: SimGrid writes the sender's pointer here
  };
  struct Timer {
    double deadline = 0, start = 0;
    uint64_t tag = 0;
    static bool later(const Timer& a, const Timer& b) {
      return a.deadline > b.deadline || (a.deadline == b.deadline && a.tag > b.tag);
    }
  };
  static constexpr int kInlineCells = 8;

  std::vector<sg4::ActivityPtr> activities;
  std::vector<Slot> slots;  // parallel to activities
  double woken_at = 0;
  uint32_t free_inline_cells = (1u << kInlineCells) - 1;
  bool keep_times = false;
  // A completion that came in while an unwoken timer had expired before it: handed out after it.
  bool holding = false;
  std::vector<Timer> timers;  // min-heap on deadline
  WakePolicy wake_policy = nullptr;
  const void* wake_context = nullptr;
  // Receive buffers must keep their address until the receive finishes. The first few live
  // here, next to the rest of the set; a rank with more receives in flight (a direct
  // all-to-all) gets more from the heap.
  std::array<void*, kInlineCells> inline_cells{};
  std::vector<std::unique_ptr<void*>> heap_cells;
  std::vector<void**> free_heap_cells;
  Completion held;

  void** acquire_cell() {
    if (free_inline_cells != 0) {
      int index = __builtin_ctz(free_inline_cells);
      free_inline_cells &= free_inline_cells - 1;
      return &inline_cells[size_t(index)];
    }
    if (free_heap_cells.empty()) {
      heap_cells.push_back(std::make_unique<void*>(nullptr));
      return heap_cells.back().get();
    }
    void** cell = free_heap_cells.back();
    free_heap_cells.pop_back();
    return cell;
  }
  void release_cell(void** cell) {
    if (cell >= inline_cells.data() && cell < inline_cells.data() + kInlineCells)
      free_inline_cells |= 1u << (cell - inline_cells.data());
    else
      free_heap_cells.push_back(cell);
  }

  bool wakes_for(const Timer& timer) const { return wake_policy == nullptr || wake_policy(wake_context, timer.tag); }
  // Earliest deadline of the timers the actor must be woken for (infinity when none).
  double wake_deadline() const {
    double earliest = std::numeric_limits<double>::infinity();
    for (const Timer& timer : timers)
      if (timer.deadline < earliest && wakes_for(timer)) earliest = timer.deadline;
    return earliest;
  }

  Completion pop_timer() {
    std::pop_heap(timers.begin(), timers.end(), Timer::later);
    Timer timer = timers.back();
    timers.pop_back();
    Completion done;
    done.tag = timer.tag;
    done.start = timer.start;
    done.finish = timer.deadline;
    return done;
  }
  // Index of the activity that finished first, or -1 when `timeout` (seconds, < 0: none) ran out.
  ptrdiff_t wait_for(double timeout);
};

ActivitySet::ActivitySet() : impl_(std::make_unique<Impl>()) {}
ActivitySet::~ActivitySet() = default;

void ActivitySet::exec(int host, double flops, uint64_t tag) {
  // SimGrid 3.32's Exec::init() connects a callback to a process-wide signal, which actors on
  // several threads (EngineConfig::threads) would do at once; the rest is the actor's own or a
  // SimGrid call, which its kernel serialises. The lock is not held across that call: the kernel
  // runs only once every thread has finished its actors.
  sg4::ExecPtr exec;
  {
    static std::mutex signal_mutex;
    std::lock_guard<std::mutex> lock(signal_mutex);
    exec = sg4::Exec::init();
  }
  exec->set_flops_amount(flops)->set_host(g_state->hosts.at(size_t(host)));
  exec->start();
  impl_->activities.push_back(std::move(exec));
  impl_->slots.push_back({tag, nullptr});
}

void ActivitySet::send(int channel, double bytes, void* payload, uint64_t tag) {
  sg4::Mailbox* mailbox = g_state->channels.at(size_t(channel));
  impl_->activities.push_back(mailbox->put_async(payload, uint64_t(bytes)));
  impl_->slots.push_back({tag, nullptr});
}

void ActivitySet::recv(int channel, uint64_t tag) {
  sg4::Mailbox* mailbox = g_state->channels.at(size_t(channel));
  void** cell = impl_->acquire_cell();
  impl_->activities.push_back(mailbox->get_async<void>(cell));
  impl_->slots.push_back({tag, cell});
}

void ActivitySet::timer(double seconds, uint64_t tag) {
  // Kept by the actor, not by SimGrid: wait_any() waits with a timeout up to the earliest one,
  // which costs a kernel timer instead of an activity in the CPU model.
  impl_->timers.push_back({sg4::Engine::get_clock() + seconds, sg4::Engine::get_clock(), tag});
  std::push_heap(impl_->timers.begin(), impl_->timers.end(), Impl::Timer::later);
}

ptrdiff_t ActivitySet::Impl::wait_for(double timeout) {
#if SIMGRID_VERSION >= 33500
  // 3.35 replaced the vector form by ActivitySet; a linear scan keeps the slot bookkeeping.
  sg4::ActivitySet pending;
  for (auto const& activity : activities)
    pending.push(activity);
  sg4::ActivityPtr done;
  try {
    done = timeout < 0 ? pending.wait_any() : pending.wait_any_for(timeout);
  } catch (const simgrid::TimeoutException&) {
    return -1;
  }
  if (!done) return -1;
  return std::find(activities.begin(), activities.end(), done) - activities.begin();
#else
  return sg4::Activity::wait_any_for(activities, timeout);
#endif
}

void ActivitySet::set_wake_policy(WakePolicy policy, const void* context) {
  impl_->wake_policy = policy;
  impl_->wake_context = context;
}

Completion ActivitySet::wait_any() {
  WF_ASSERT(!empty(), "wait_any on an empty activity set");
  Impl& set = *impl_;
  for (;;) {
    const double now = sg4::Engine::get_clock();
    set.woken_at = now;
    // Timers that expired while the actor waited for something else come first, in order.
    if (!set.timers.empty() && set.timers.front().deadline <= now &&
        (!set.holding || set.timers.front().deadline < set.held.finish))
      return set.pop_timer();
    if (set.holding) {
      set.holding = false;
      return set.held;
    }
    if (set.activities.empty()) {
      sg4::this_actor::sleep_until(set.timers.front().deadline);
      continue;
    }
    double wake_at = set.wake_deadline();
    ptrdiff_t index = set.wait_for(wake_at == std::numeric_limits<double>::infinity() ? -1 : wake_at - now);
    if (index < 0) continue;  // woken by a timer: handed out above
    set.woken_at = sg4::Engine::get_clock();
    Completion done = take(size_t(index));
    if (set.timers.empty() || set.timers.front().deadline >= done.finish) return done;
    set.held = done;
    set.holding = true;
  }
}

Completion ActivitySet::take(size_t index) {
  Impl& set = *impl_;
  const sg4::ActivityPtr& activity = set.activities[index];
  Completion done_info;
  done_info.tag = set.slots[index].tag;
  if (set.keep_times) {
    done_info.start = activity->get_start_time();
    done_info.finish = activity->get_finish_time();
  } else {
    done_info.finish = set.woken_at;  // the actor wakes when it finishes
  }
  if (void** cell = set.slots[index].payload) {
    done_info.payload = *cell;
    set.release_cell(cell);
  }
  // Swap-remove: order inside the set carries no meaning.
  std::swap(set.activities[index], set.activities.back());
  std::swap(set.slots[index], set.slots.back());
  set.activities.pop_back();
  set.slots.pop_back();
  return done_info;
}

void ActivitySet::keep_times(bool on) {
  impl_->keep_times = on;
}

double ActivitySet::woken_at() const {
  return impl_->woken_at;
}

bool ActivitySet::empty() const {
  return impl_->activities.empty() && impl_->timers.empty() && !impl_->holding;
}
size_t ActivitySet::size() const {
  return impl_->activities.size() + impl_->timers.size() + (impl_->holding ? 1 : 0);
}

// ---- SimEngine --------------------------------------------------------------------------------

struct SimEngine::Impl {
  EngineState state;
};

SimEngine::SimEngine(const EngineConfig& config) : impl_(std::make_unique<Impl>()) {
  WF_ASSERT(g_state == nullptr && !sg4::Engine::has_instance(),
            "SimGrid allows one engine per process; run simulations in child processes");
  const auto& models = supported_network_models();
  if (std::find(models.begin(), models.end(), config.network_model) == models.end())
    throw InputError("unknown network model '" + config.network_model + "'");
  g_state = &impl_->state;
  silence_simgrid_logs(config.verbose);
  // The context factory and its thread count are fixed when the engine starts, so they go on its
  // command line: the thread factory sets up its parallel mode only if it sees nthreads > 1 then
  // (set later, its actors wait on a semaphore it never made). SimGrid answers the actors' calls
  // in a fixed order whatever thread ran them, so a parallel run gives the same simulation as a
  // sequential one.
  std::string program = "wallfacer-simulate";
  std::vector<std::string> args;
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer cannot follow ucontext stack switches (Debian's SimGrid has no fiber
  // annotations) and reports them as errors: sanitized builds run every actor on a thread.
  args.push_back("--cfg=contexts/factory:thread");
#endif
  if (config.threads > 1) args.push_back("--cfg=contexts/nthreads:" + std::to_string(config.threads));
  std::vector<char*> argv{program.data()};
  for (std::string& arg : args)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  int argc = int(argv.size()) - 1;
  impl_->state.engine = std::make_unique<sg4::Engine>(&argc, argv.data());
  configure(config);
  sg4::Engine::on_deadlock_cb([] {
    if (g_state) g_state->deadlocked = true;
  });
  impl_->state.zone = make_root_zone(*impl_->state.engine);
}

SimEngine::~SimEngine() {
  // The engine tears down SimGrid's global state; callers normally _exit() before this.
  g_state = nullptr;
}

int SimEngine::add_host(const HostSpec& host) {
#if SIMGRID_VERSION >= 40000
  sg4::Host* created = impl_->state.zone->add_host(host.name, host.speeds);
#else
  sg4::Host* created = impl_->state.zone->create_host(host.name, host.speeds);
#endif
  impl_->state.hosts.push_back(created);
  return int(impl_->state.hosts.size()) - 1;
}

int SimEngine::add_link(const LinkSpec& spec) {
  sg4::Link* link = nullptr;
  sg4::NetZone* zone = impl_->state.zone;
#if SIMGRID_VERSION >= 40000
  if (spec.split_duplex)
    link = zone->add_split_duplex_link(spec.name, spec.bandwidth_Bps);
  else
    link = zone->add_link(spec.name, spec.bandwidth_Bps);
#else
  if (spec.split_duplex)
    link = zone->create_split_duplex_link(spec.name, spec.bandwidth_Bps);
  else
    link = zone->create_link(spec.name, spec.bandwidth_Bps);
#endif
  link->set_latency(spec.latency_s);
  if (!spec.split_duplex) link->set_sharing_policy(sg4::Link::SharingPolicy::SHARED);
  link->seal();
  impl_->state.links.push_back(link);
  impl_->state.split.push_back(spec.split_duplex);
  return int(impl_->state.links.size()) - 1;
}

void SimEngine::add_route(int src_host, int dst_host, const std::vector<LinkUse>& links) {
  std::vector<sg4::LinkInRoute> route;
  route.reserve(links.size());
  for (const LinkUse& use : links)
    route.push_back(link_in_route(use));
  sg4::Host* src = impl_->state.hosts.at(size_t(src_host));
  sg4::Host* dst = impl_->state.hosts.at(size_t(dst_host));
#if SIMGRID_VERSION >= 33500
  impl_->state.zone->add_route(src, dst, route, false);
#else
  impl_->state.zone->add_route(src->get_netpoint(), dst->get_netpoint(), nullptr, nullptr, route, false);
#endif
}

void SimEngine::seal() {
  impl_->state.zone->seal();
}

int SimEngine::add_channel(const std::string& name) {
  impl_->state.channels.push_back(sg4::Mailbox::by_name(name));
  return int(impl_->state.channels.size()) - 1;
}

void SimEngine::spawn(const std::string& name, int host, std::function<void()> body) {
  sg4::Host* where = impl_->state.hosts.at(size_t(host));
#if SIMGRID_VERSION >= 40100
  where->add_actor(name, std::move(body));
#elif SIMGRID_VERSION >= 40000
  impl_->state.engine->add_actor(name, where, std::move(body));
#else
  sg4::Actor::create(name, where, std::move(body));
#endif
}

bool SimEngine::run() {
  impl_->state.engine->run();
  return !impl_->state.deadlocked;
}

void SimEngine::on_clock_advance(std::function<void(double)> observer) {
  sg4::Engine::on_time_advance_cb([observer = std::move(observer)](double) { observer(sg4::Engine::get_clock()); });
}

double SimEngine::now() {
  return sg4::Engine::get_clock();
}

void SimEngine::set_power_state(int host, int state) {
  g_state->hosts.at(size_t(host))->set_pstate(static_cast<unsigned long>(state));
}

std::vector<std::string> SimEngine::resolved_route(int src_host, int dst_host, double* latency_s) const {
  std::vector<sg4::Link*> links;
  double latency = 0;
  impl_->state.hosts.at(size_t(src_host))->route_to(impl_->state.hosts.at(size_t(dst_host)), links, &latency);
  if (latency_s) *latency_s = latency;
  std::vector<std::string> names;
  for (const sg4::Link* link : links)
    names.push_back(link->get_name());
  return names;
}

}  // namespace wallfacer::sim
