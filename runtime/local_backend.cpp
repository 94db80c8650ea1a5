#include <wallfacer/runtime/local_backend.hpp>

#include <fmt/format.h>
#include <sys/prctl.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::runtime {
namespace {

constexpr int kHugePageRankLimit = 16;

enum class CollKind { AllGather, AllToAll, ReduceScatter, AllReduce };
const char* coll_name(CollKind k) {
  static const char* names[] = {"all-gather", "all-to-all", "reduce-scatter", "all-reduce"};
  return names[int(k)];
}

struct Message {  // a posted send or receive waiting for its partner
  void* data;
  size_t bytes;
  RequestId id;
};

struct MemberArgs {
  bool posted = false;
  const void* send = nullptr;
  void* recv = nullptr;
  Counts send_counts, recv_counts;  // all-gather: send_counts = {send_count}
  RequestId id = -1;
};

struct CollectiveCall {
  CollKind kind = CollKind::AllGather;
  ElemType type = ElemType::F32;
  int arrived = 0;
  std::vector<MemberArgs> members;
};

enum class RankState { Running, Waiting, InExchange, Finished };

// State shared by the ranks of one process. Every field is guarded by `mutex`.
class LocalWorld {
 public:
  LocalWorld(int size, LocalOptions options)
      : size_(size),
        options_(options),
        wake_(size_t(size)),
        state_(size_t(size), RankState::Running),
        running_(size),
        waiting_on_(size_t(size)),
        slots_(size_t(size)) {}

  int size() const { return size_; }
  const LocalOptions& options() const { return options_; }

  void set_groups(int rank, const std::vector<CommGroup>& groups);
  RequestId send(int rank, int peer, int tag, const void* data, size_t bytes);
  RequestId recv(int rank, int peer, int tag, void* data, size_t bytes);
  RequestId post_collective(int rank, int group, CollKind kind, ElemType type, MemberArgs args);
  bool test(RequestId id);
  void wait_any(int rank, const std::vector<RequestId>& pending);
  // Every rank's `bytes`, to every rank, or to rank 0 only (`to_root`; the others get none, so a
  // gather of P results costs P copies, not P * P).
  std::vector<std::string> exchange(int rank, const std::string& bytes, bool to_root);
  void finish(int rank);
  void fail(int rank, std::exception_ptr error);
  // A rank unwinding from an error: no transfer may touch its buffers any more, so the world
  // stops matching (every rank's next call throws LocalAborted); fail() then records the error.
  void abandon() noexcept {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    wake_all_locked();
  }
  std::exception_ptr primary_error() const { return primary_error_; }

 private:
  RequestId new_request(int rank, std::string what);
  void complete(RequestId id);
  void set_state(int rank, RankState state);
  void wake_all_locked();
  // The exchanged slots for `rank`: a copy each, or (to_root) moved to rank 0, none elsewhere.
  std::vector<std::string> deliver_locked(int rank, bool to_root) {
    if (!to_root) return exchanged_;
    return rank == 0 ? std::move(exchanged_) : std::vector<std::string>{};
  }
  void execute(CollectiveCall& call, int group);
  void execute_reduction(CollectiveCall& call, int group);
  ScheduleError count_mismatch(const CollectiveCall& call, int group, size_t from, size_t to, int64_t sent,
                               int64_t expected) const;
  bool deadlocked_locked() const;
  ScheduleError abort_on_deadlock_locked();
  void throw_if_aborted_locked() const {
    if (aborted_) throw LocalAborted("aborted: another rank failed");
  }
  int member_index(int group, int rank) const;

  const int size_;
  const LocalOptions options_;
  std::mutex mutex_;
  // One wake-up per rank, so that a completed message wakes its owner only: waking every thread
  // on every completion made a thousand ranks spend their time re-checking instead of working.
  std::vector<std::condition_variable> wake_;
  std::vector<CommGroup> groups_;
  RequestId next_id_ = 0;
  std::unordered_map<RequestId, bool> done_;
  std::unordered_map<RequestId, int> owner_;
  std::unordered_map<RequestId, std::string> what_;  // for deadlock reports
  std::map<std::tuple<int, int, int>, std::deque<Message>> sends_, recvs_;
  std::map<std::pair<int, int64_t>, CollectiveCall> calls_;
  std::map<std::pair<int, int>, int64_t> call_seq_;  // (rank, group) -> next call number
  std::vector<RankState> state_;
  // Ranks in state Running: a waiting rank whose request completes is set Running when it is
  // woken, so 0 means nothing can happen any more, and only then is the deadlock scan run.
  int running_;
  std::vector<const std::vector<RequestId>*> waiting_on_;
  // Blocking exchange (the driver's control calls).
  std::vector<std::string> slots_, exchanged_;
  int exchange_arrived_ = 0;
  int64_t exchange_generation_ = 0;
  bool aborted_ = false;
  std::exception_ptr primary_error_;
};

void LocalWorld::set_groups(int rank, const std::vector<CommGroup>& groups) {
  std::lock_guard lock(mutex_);
  if (groups_.empty()) groups_ = groups;
  if (groups_ != groups) throw ScheduleError(fmt::format("rank {}: set_groups with different groups", rank));
}

int LocalWorld::member_index(int group, int rank) const {
  if (group < 0 || size_t(group) >= groups_.size())
    throw ScheduleError(fmt::format("rank {}: collective on unknown group {}", rank, group));
  const auto& ranks = groups_[size_t(group)].ranks;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == rank) return int(i);
  throw ScheduleError(
      fmt::format("rank {}: collective on group {} which it is not a member of", rank, groups_[size_t(group)].name));
}

RequestId LocalWorld::new_request(int rank, std::string what) {
  RequestId id = next_id_++;
  done_[id] = false;
  owner_[id] = rank;
  what_[id] = std::move(what);
  return id;
}

void LocalWorld::set_state(int rank, RankState state) {
  RankState& current = state_[size_t(rank)];
  running_ += (state == RankState::Running) - (current == RankState::Running);
  current = state;
}

void LocalWorld::complete(RequestId id) {
  done_[id] = true;
  const int rank = owner_.at(id);
  if (state_[size_t(rank)] != RankState::Waiting) return;
  const auto& pending = *waiting_on_[size_t(rank)];
  if (std::find(pending.begin(), pending.end(), id) == pending.end()) return;
  set_state(rank, RankState::Running);
  wake_[size_t(rank)].notify_one();
}

void LocalWorld::wake_all_locked() {
  for (auto& cv : wake_)
    cv.notify_one();
}

RequestId LocalWorld::send(int rank, int peer, int tag, const void* data, size_t bytes) {
  std::lock_guard lock(mutex_);
  throw_if_aborted_locked();
  RequestId id = new_request(rank, fmt::format("send to rank {} tag {} ({} bytes)", peer, tag, bytes));
  auto& waiting = recvs_[{rank, peer, tag}];
  if (waiting.empty()) {
    sends_[{rank, peer, tag}].push_back({const_cast<void*>(data), bytes, id});
    return id;
  }
  Message r = waiting.front();
  waiting.pop_front();
  if (r.bytes != bytes)
    throw ScheduleError(fmt::format("rank {} sends {} bytes to rank {} (tag {}) which expects {} bytes", rank, bytes,
                                    peer, tag, r.bytes));
  if (bytes) std::memcpy(r.data, data, bytes);
  complete(id);
  complete(r.id);
  return id;
}

RequestId LocalWorld::recv(int rank, int peer, int tag, void* data, size_t bytes) {
  std::lock_guard lock(mutex_);
  throw_if_aborted_locked();
  RequestId id = new_request(rank, fmt::format("receive from rank {} tag {} ({} bytes)", peer, tag, bytes));
  auto& waiting = sends_[{peer, rank, tag}];
  if (waiting.empty()) {
    recvs_[{peer, rank, tag}].push_back({data, bytes, id});
    return id;
  }
  Message s = waiting.front();
  waiting.pop_front();
  if (s.bytes != bytes)
    throw ScheduleError(fmt::format("rank {} expects {} bytes from rank {} (tag {}) which sends {} bytes", rank, bytes,
                                    peer, tag, s.bytes));
  if (bytes) std::memcpy(data, s.data, bytes);
  complete(id);
  complete(s.id);
  return id;
}

RequestId LocalWorld::post_collective(int rank, int group, CollKind kind, ElemType type, MemberArgs args) {
  std::lock_guard lock(mutex_);
  throw_if_aborted_locked();
  int me = member_index(group, rank);
  int64_t seq = call_seq_[{rank, group}]++;
  const auto& g = groups_[size_t(group)];
  auto [it, fresh] = calls_.try_emplace({group, seq});
  CollectiveCall& call = it->second;
  if (fresh) {
    call.kind = kind;
    call.type = type;
    call.members.resize(g.ranks.size());
  } else if (call.kind != kind || call.type != type) {
    throw ScheduleError(fmt::format("rank {}: call {} on group {} is a {} but another member posted a {}", rank, seq,
                                    g.name, coll_name(kind), coll_name(call.kind)));
  }
  args.posted = true;
  args.id = new_request(rank, fmt::format("{} on group {} (call {})", coll_name(kind), g.name, seq));
  RequestId id = args.id;
  call.members[size_t(me)] = std::move(args);
  if (++call.arrived == int(call.members.size())) {
    execute(call, group);
    for (const auto& m : call.members)
      complete(m.id);
    calls_.erase(it);
  }
  return id;
}

// Performs a collective once every member has posted, copying between the members' buffers.
void LocalWorld::execute(CollectiveCall& call, int group) {
  if (call.kind == CollKind::AllReduce || call.kind == CollKind::ReduceScatter) {
    execute_reduction(call, group);
    return;
  }
  const size_t es = elem_size(call.type);
  const auto& members = call.members;
  const size_t n = members.size();
  for (size_t j = 0; j < n; ++j) {
    const MemberArgs& dst = members[j];
    int64_t displ = 0;
    for (size_t i = 0; i < n; ++i) {
      const MemberArgs& src = members[i];
      int64_t count = call.kind == CollKind::AllGather ? src.send_counts[0] : src.send_counts[j];
      int64_t src_displ = 0;
      if (call.kind == CollKind::AllToAll)
        for (size_t k = 0; k < j; ++k)
          src_displ += src.send_counts[k];
      if (count != dst.recv_counts[i]) throw count_mismatch(call, group, i, j, count, dst.recv_counts[i]);
      if (count)
        std::memcpy(static_cast<char*>(dst.recv) + size_t(displ) * es,
                    static_cast<const char*>(src.send) + size_t(src_displ) * es, size_t(count) * es);
      displ += dst.recv_counts[i];
    }
  }
}

// Sums in member order (in double) before writing anything, so in-place all-reduce is safe and
// every member sees identical values.
void LocalWorld::execute_reduction(CollectiveCall& call, int group) {
  const auto& members = call.members;
  const size_t n = members.size();
  const bool all_reduce = call.kind == CollKind::AllReduce;
  auto value = [&](const void* base, int64_t e) {
    return call.type == ElemType::F32 ? double(static_cast<const float*>(base)[e])
                                      : static_cast<const double*>(base)[e];
  };
  auto store = [&](void* base, const std::vector<double>& sum) {
    for (size_t e = 0; e < sum.size(); ++e) {
      if (call.type == ElemType::F32)
        static_cast<float*>(base)[e] = float(sum[e]);
      else
        static_cast<double*>(base)[e] = sum[e];
    }
  };
  // recv_counts: {count} for all-reduce; the per-member block sizes for reduce-scatter.
  auto block_sum = [&](size_t j) {
    int64_t count = all_reduce ? members[j].recv_counts[0] : members[j].recv_counts[j];
    int64_t offset = 0;
    if (!all_reduce)
      for (size_t k = 0; k < j; ++k)
        offset += members[j].recv_counts[k];
    std::vector<double> sum(size_t(count), 0.0);
    for (size_t i = 0; i < n; ++i) {
      int64_t src_count = all_reduce ? members[i].recv_counts[0] : members[i].recv_counts[j];
      if (src_count != count) throw count_mismatch(call, group, i, j, src_count, count);
      for (int64_t e = 0; e < count; ++e)
        sum[size_t(e)] += value(members[i].send, offset + e);
    }
    return sum;
  };
  if (all_reduce) {
    const std::vector<double> sum = block_sum(0);
    for (const auto& m : members)
      store(m.recv, sum);
    return;
  }
  std::vector<std::vector<double>> sums(n);
  for (size_t j = 0; j < n; ++j)
    sums[j] = block_sum(j);
  for (size_t j = 0; j < n; ++j)
    store(members[j].recv, sums[j]);
}

ScheduleError LocalWorld::count_mismatch(const CollectiveCall& call, int group, size_t from, size_t to, int64_t sent,
                                         int64_t expected) const {
  return ScheduleError(fmt::format("{} on group {}: member {} sends {} elements to member {} which expects {}",
                                   coll_name(call.kind), groups_[size_t(group)].name, from, sent, to, expected));
}

bool LocalWorld::test(RequestId id) {
  std::lock_guard lock(mutex_);
  throw_if_aborted_locked();
  auto it = done_.find(id);
  if (it == done_.end()) throw std::logic_error(fmt::format("test of unknown request {}", id));
  if (!it->second) return false;
  done_.erase(it);
  owner_.erase(id);
  what_.erase(id);
  return true;
}

bool LocalWorld::deadlocked_locked() const {
  bool someone_blocked = false;
  for (int r = 0; r < size_; ++r) {
    switch (state_[size_t(r)]) {
      case RankState::Running:
        return false;
      case RankState::Finished:
        break;
      case RankState::InExchange:
        someone_blocked = true;
        break;
      case RankState::Waiting:
        for (RequestId id : *waiting_on_[size_t(r)])
          if (done_.at(id)) return false;
        someone_blocked = true;
        break;
    }
  }
  return someone_blocked;
}

ScheduleError LocalWorld::abort_on_deadlock_locked() {
  std::string report = "deadlock: every rank is blocked and nothing can complete;";
  for (int r = 0; r < size_; ++r) {
    report += fmt::format("\n  rank {}: ", r);
    switch (state_[size_t(r)]) {
      case RankState::Finished:
        report += "finished its program";
        break;
      case RankState::InExchange:
        report += "in a driver control call (barrier/gather)";
        break;
      case RankState::Waiting:
        report += "waits on";
        for (RequestId id : *waiting_on_[size_t(r)])
          report += " [" + what_.at(id) + "]";
        break;
      case RankState::Running:
        break;
    }
  }
  aborted_ = true;
  for (int r = 0; r < size_; ++r)
    if (state_[size_t(r)] != RankState::Finished) set_state(r, RankState::Running);
  wake_all_locked();
  return ScheduleError(report);
}

void LocalWorld::wait_any(int rank, const std::vector<RequestId>& pending) {
  std::unique_lock lock(mutex_);
  auto ready = [&] {
    if (aborted_) return true;
    for (RequestId id : pending)
      if (done_.at(id)) return true;
    return false;
  };
  if (ready()) {
    throw_if_aborted_locked();
    return;
  }
  set_state(rank, RankState::Waiting);
  waiting_on_[size_t(rank)] = &pending;
  if (running_ == 0 && deadlocked_locked()) throw abort_on_deadlock_locked();
  while (!ready())
    wake_[size_t(rank)].wait(lock);
  if (state_[size_t(rank)] != RankState::Finished) set_state(rank, RankState::Running);
  waiting_on_[size_t(rank)] = nullptr;
  throw_if_aborted_locked();
}

std::vector<std::string> LocalWorld::exchange(int rank, const std::string& bytes, bool to_root) {
  std::unique_lock lock(mutex_);
  throw_if_aborted_locked();
  slots_[size_t(rank)] = bytes;
  int64_t generation = exchange_generation_;
  if (++exchange_arrived_ == size_) {
    exchanged_ = std::move(slots_);
    slots_.assign(size_t(size_), std::string());
    exchange_arrived_ = 0;
    ++exchange_generation_;
    // The others may wake late; they must not look blocked to a deadlock check meanwhile.
    for (int r = 0; r < size_; ++r)
      if (state_[size_t(r)] == RankState::InExchange) {
        set_state(r, RankState::Running);
        wake_[size_t(r)].notify_one();
      }
    return deliver_locked(rank, to_root);
  }
  set_state(rank, RankState::InExchange);
  if (running_ == 0 && deadlocked_locked()) throw abort_on_deadlock_locked();
  while (exchange_generation_ == generation && !aborted_)
    wake_[size_t(rank)].wait(lock);
  if (state_[size_t(rank)] != RankState::Finished) set_state(rank, RankState::Running);
  throw_if_aborted_locked();
  return deliver_locked(rank, to_root);
}

void LocalWorld::finish(int rank) {
  std::lock_guard lock(mutex_);
  set_state(rank, RankState::Finished);
  // This rank can no longer help: when the others are all blocked, nothing will wake them.
  if (running_ == 0 && deadlocked_locked() && !primary_error_)
    primary_error_ = std::make_exception_ptr(abort_on_deadlock_locked());
}

void LocalWorld::fail(int rank, std::exception_ptr error) {
  std::lock_guard lock(mutex_);
  set_state(rank, RankState::Finished);
  bool secondary = false;
  try {
    std::rethrow_exception(error);
  } catch (const LocalAborted&) {
    secondary = true;
  } catch (...) {
  }
  if (!secondary && !primary_error_) primary_error_ = error;
  aborted_ = true;
  wake_all_locked();
}

class LocalBackend final : public CpuBackend {
 public:
  LocalBackend(LocalWorld& world, int rank) : world_(world), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  std::string name() const override { return fmt::format("local ({} threads)", world_.size()); }
  void set_groups(const std::vector<CommGroup>& groups) override { world_.set_groups(rank_, groups); }

  RequestId isend(int peer, int tag, const void* data, size_t bytes) override {
    return world_.send(rank_, peer, tag, data, bytes);
  }
  RequestId irecv(int peer, int tag, void* data, size_t bytes) override {
    return world_.recv(rank_, peer, tag, data, bytes);
  }
  RequestId iallgatherv(int group, const void* send, int64_t send_count, void* recv, const Counts& recv_counts,
                        ElemType type) override {
    return world_.post_collective(rank_, group, CollKind::AllGather, type,
                                  {false, send, recv, {send_count}, recv_counts, -1});
  }
  RequestId ialltoallv(int group, const void* send, const Counts& send_counts, void* recv, const Counts& recv_counts,
                       ElemType type) override {
    return world_.post_collective(rank_, group, CollKind::AllToAll, type,
                                  {false, send, recv, send_counts, recv_counts, -1});
  }
  bool has_reduce_scatter() const override { return world_.options().reduce_scatter; }
  RequestId ireduce_scatter(int group, const void* send, void* recv, const Counts& recv_counts,
                            ElemType type) override {
    return world_.post_collective(rank_, group, CollKind::ReduceScatter, type,
                                  {false, send, recv, {}, recv_counts, -1});
  }
  RequestId iallreduce(int group, void* data, int64_t count, ElemType type) override {
    return world_.post_collective(rank_, group, CollKind::AllReduce, type, {false, data, data, {}, {count}, -1});
  }
  bool test(RequestId request) override { return world_.test(request); }
  void abandon() noexcept override { world_.abandon(); }
  void wait_any(const std::vector<RequestId>& pending) override { world_.wait_any(rank_, pending); }

  bool all_ok(bool ok) override {
    for (const auto& s : world_.exchange(rank_, ok ? "1" : "0", false))
      if (s != "1") return false;
    return true;
  }
  std::vector<std::string> gather_to_root(const std::string& bytes) override {
    return world_.exchange(rank_, bytes, true);
  }
  double max_over_ranks(double value) override {
    double best = value;
    for (const auto& s :
         world_.exchange(rank_, std::string(reinterpret_cast<const char*>(&value), sizeof value), false)) {
      double v;
      std::memcpy(&v, s.data(), sizeof v);
      best = std::max(best, v);
    }
    return best;
  }
  void barrier() override { world_.exchange(rank_, {}, true); }

 private:
  LocalWorld& world_;
  int rank_;
};

}  // namespace

void run_local_ranks(int ranks, const std::function<void(Backend&)>& body, const LocalOptions& options) {
  if (ranks < 1) throw std::invalid_argument("run_local_ranks: need at least one rank");
  // Each rank thread's allocator takes its own aligned segment, which the kernel backs with a
  // 2 MiB transparent huge page at the first touch: 1,024 ranks of a 1 MB workload held 5 GiB
  // that way. Beyond a few ranks the memory matters more than the TLB.
  if (ranks > kHugePageRankLimit) prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
  LocalWorld world(ranks, options);
  std::vector<std::thread> threads;
  threads.reserve(size_t(ranks));
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&world, &body, r] {
      try {
        LocalBackend backend(world, r);
        body(backend);
        world.finish(r);
      } catch (...) {
        world.fail(r, std::current_exception());
      }
    });
  }
  for (auto& t : threads)
    t.join();
  if (auto error = world.primary_error()) std::rethrow_exception(error);
}

}  // namespace wallfacer::runtime
