// The local transport: P ranks as threads of one process on one GPU. Each rank has its own
// compute and communication streams (CudaDeviceBackend). A transfer matches when both sides (or,
// for a collective, every member) have posted it; the rank that completes the match enqueues the
// device copies (and sums) on its own communication stream after waiting on every side's ready
// event, and records one done event that every side's compute stream waits on. Copies never
// block a stream on a peer, so the order of posts does not matter here (unlike NCCL).
#include <fmt/format.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include <wallfacer/core/errors.hpp>
#include "cuda_device_backend.hpp"
#include "device_kernels.hpp"

namespace wallfacer::runtime::cuda {
namespace {

class LocalCudaAborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct P2pPost {
  int rank = -1;
  RequestId id = -1;
  void* data = nullptr;
  size_t bytes = 0;
  EventPtr ready;
};

enum class CollKind { AllGather, AllToAll, ReduceScatter, AllReduce };
const char* to_string(CollKind kind) {
  switch (kind) {
    case CollKind::AllGather:
      return "all-gather";
    case CollKind::AllToAll:
      return "all-to-all";
    case CollKind::ReduceScatter:
      return "reduce-scatter";
    default:
      return "all-reduce";
  }
}

struct CollPost {
  int rank = -1;
  RequestId id = -1;
  CollKind kind = CollKind::AllGather;
  const void* send = nullptr;
  void* recv = nullptr;
  Counts send_counts, recv_counts;
  int64_t count = 0;
  ElemType type = ElemType::F32;
  EventPtr ready;
};

class LocalCudaBackend;

// What the ranks share: mailboxes, collective rendezvous, completions and the control
// rendezvous, under one mutex. Deadlock: every live rank waits and nothing can complete.
struct World {
  explicit World(int ranks) : size(ranks), live(ranks), waiting(size_t(ranks), 0), done(size_t(ranks)) {}
  const int size;
  std::mutex mutex;
  std::condition_variable changed;
  int live, blocked = 0;
  std::vector<char> waiting;
  std::string aborted;  // non-empty: the reason every rank unwinds
  std::vector<CommGroup> groups;
  std::map<std::tuple<int, int, int>, std::deque<P2pPost>> sends, recvs;            // (src, dst, tag)
  std::map<std::pair<int, int>, std::vector<std::optional<CollPost>>> collectives;  // (group, occurrence)
  std::vector<std::map<RequestId, EventPtr>> done;                                  // per rank
  std::vector<std::string> waits_on = std::vector<std::string>(size_t(size));
  // Control rendezvous: values deposited by each rank in round `generation`.
  std::vector<std::string> slots = std::vector<std::string>(size_t(size));
  int arrived = 0;
  int64_t generation = 0;
  std::vector<std::string> last_round;

  void wake(int rank) {
    if (waiting[size_t(rank)]) {
      waiting[size_t(rank)] = 0;
      --blocked;
    }
  }
  void wake_all() {
    for (int r = 0; r < size; ++r)
      wake(r);
    changed.notify_all();
  }
  // Blocks `rank` until `ready()` or an abort; reports a deadlock when every live rank would wait.
  template <typename Ready>
  void block(std::unique_lock<std::mutex>& lock, int rank, Ready&& ready) {
    while (!ready()) {
      if (!aborted.empty()) throw LocalCudaAborted(aborted);
      waiting[size_t(rank)] = 1;
      ++blocked;
      if (blocked == live) {
        std::string report;
        for (int r = 0; r < size; ++r)
          if (waiting[size_t(r)]) report += fmt::format("\n  rank {}: waits on {}", r, waits_on[size_t(r)]);
        aborted = "another rank reported a deadlock";
        wake_all();
        throw ScheduleError(fmt::format("deadlock: every rank waits and nothing can complete:{}", report));
      }
      changed.wait(lock, [&] { return !waiting[size_t(rank)] || !aborted.empty(); });
    }
  }
};

class LocalCudaBackend final : public CudaDeviceBackend {
 public:
  LocalCudaBackend(World& world, int rank, int device) : CudaDeviceBackend(rank, world.size, device), world_(world) {}

  std::string name() const override { return fmt::format("cuda-local ({} ranks on GPU {})", size_, device_); }

  void set_groups(const std::vector<CommGroup>& groups) override {
    {
      std::lock_guard lock(world_.mutex);
      world_.groups = groups;
    }
    barrier();
  }

  RequestId isend(int peer, int tag, const void* data, size_t bytes) override {
    return post_p2p(true, peer, tag, const_cast<void*>(data), bytes);
  }
  RequestId irecv(int peer, int tag, void* data, size_t bytes) override {
    return post_p2p(false, peer, tag, data, bytes);
  }

  RequestId iallgatherv(int group, const void* send, int64_t send_count, void* recv, const Counts& recv_counts,
                        ElemType type) override {
    CollPost post{rank_, 0, CollKind::AllGather, send, recv, {send_count}, recv_counts, send_count, type, {}};
    return post_collective(group, std::move(post));
  }
  RequestId ialltoallv(int group, const void* send, const Counts& send_counts, void* recv, const Counts& recv_counts,
                       ElemType type) override {
    CollPost post{rank_, 0, CollKind::AllToAll, send, recv, send_counts, recv_counts, 0, type, {}};
    return post_collective(group, std::move(post));
  }
  bool has_reduce_scatter() const override { return true; }
  RequestId ireduce_scatter(int group, const void* send, void* recv, const Counts& recv_counts,
                            ElemType type) override {
    CollPost post{rank_, 0, CollKind::ReduceScatter, send, recv, recv_counts, recv_counts, 0, type, {}};
    return post_collective(group, std::move(post));
  }
  RequestId iallreduce(int group, void* data, int64_t count, ElemType type) override {
    CollPost post{rank_, 0, CollKind::AllReduce, data, data, {}, {}, count, type, {}};
    return post_collective(group, std::move(post));
  }

  bool test(RequestId request) override {
    std::lock_guard lock(world_.mutex);
    return take_done(request);
  }

  void wait_any(const std::vector<RequestId>& pending) override {
    std::unique_lock lock(world_.mutex);
    world_.waits_on[size_t(rank_)] = describe_pending(pending);
    auto& mine = world_.done[size_t(rank_)];
    world_.block(lock, rank_, [&] {
      for (RequestId id : pending)
        if (mine.count(id)) return true;
      return false;
    });
  }

  bool all_ok(bool ok) override {
    bool all = true;
    for (const std::string& v : exchange(ok ? "1" : "0"))
      all = all && v == "1";
    return all;
  }
  std::vector<std::string> gather_to_root(const std::string& bytes) override {
    auto all = exchange(bytes);
    if (rank_ != 0) return {};
    return all;
  }
  double max_over_ranks(double value) override {
    double best = value;
    for (const std::string& v : exchange(fmt::format("{:a}", value)))
      best = std::max(best, std::strtod(v.c_str(), nullptr));
    return best;
  }
  void barrier() override { exchange(""); }

  void finished() {
    std::lock_guard lock(world_.mutex);
    --world_.live;
    world_.wake_all();
  }

 private:
  RequestId post_p2p(bool send, int peer, int tag, void* data, size_t bytes);
  RequestId post_collective(int group, CollPost post);
  void run_collective(const CommGroup& group, std::vector<std::optional<CollPost>>& posts);
  bool take_done(RequestId request) {
    auto& mine = world_.done[size_t(rank_)];
    auto it = mine.find(request);
    if (it == mine.end()) return false;
    compute_waits(it->second);
    mine.erase(it);
    return true;
  }
  std::string describe_pending(const std::vector<RequestId>& pending) const {
    std::string text;
    for (RequestId id : pending) {
      auto it = descriptions_.find(id);
      text += (text.empty() ? "" : ", ") + (it != descriptions_.end() ? it->second : fmt::format("request {}", id));
    }
    return "[" + text + "]";
  }
  // Every rank deposits a value and receives everybody's, in rank order.
  std::vector<std::string> exchange(const std::string& value) {
    std::unique_lock lock(world_.mutex);
    world_.waits_on[size_t(rank_)] = "a control call (barrier, gather or reduction)";
    const int64_t my_generation = world_.generation;
    world_.slots[size_t(rank_)] = value;
    if (++world_.arrived == world_.live) {
      world_.last_round = world_.slots;
      world_.arrived = 0;
      ++world_.generation;
      world_.wake_all();
      return world_.last_round;
    }
    world_.block(lock, rank_, [&] { return world_.generation != my_generation; });
    return world_.last_round;
  }

  World& world_;
  RequestId next_id_ = 1;
  std::map<int, int> occurrence_;  // collectives posted per group
  std::map<RequestId, std::string> descriptions_;
};

RequestId LocalCudaBackend::post_p2p(bool send, int peer, int tag, void* data, size_t bytes) {
  if (peer < 0 || peer >= size_) throw ScheduleError(fmt::format("rank {}: peer {} out of range", rank_, peer));
  P2pPost post{rank_, next_id_++, data, bytes, record_compute()};
  descriptions_[post.id] =
      fmt::format("{} rank {} tag {} ({} bytes)", send ? "send to" : "receive from", peer, tag, bytes);
  std::lock_guard lock(world_.mutex);
  const auto key = send ? std::tuple(rank_, peer, tag) : std::tuple(peer, rank_, tag);
  auto& others = send ? world_.recvs[key] : world_.sends[key];
  if (others.empty()) {
    (send ? world_.sends[key] : world_.recvs[key]).push_back(post);
    return post.id;
  }
  P2pPost other = others.front();
  others.pop_front();
  const P2pPost& s = send ? post : other;
  const P2pPost& r = send ? other : post;
  if (s.bytes != r.bytes)
    throw ScheduleError(fmt::format("rank {} sends {} bytes to rank {} (tag {}), which expects {}", s.rank, s.bytes,
                                    r.rank, tag, r.bytes));
  WF_CUDA_CHECK(cudaStreamWaitEvent(comm_stream(), other.ready->get(), 0));
  WF_CUDA_CHECK(cudaStreamWaitEvent(comm_stream(), post.ready->get(), 0));
  comm_interval_begin();
  if (s.bytes > 0) WF_CUDA_CHECK(cudaMemcpyAsync(r.data, s.data, s.bytes, cudaMemcpyDeviceToDevice, comm_stream()));
  comm_interval_end();
  auto done = std::make_shared<Event>();
  WF_CUDA_CHECK(cudaEventRecord(done->get(), comm_stream()));
  world_.done[size_t(s.rank)][s.id] = done;
  world_.done[size_t(r.rank)][r.id] = done;
  world_.wake(other.rank);
  world_.changed.notify_all();
  return post.id;
}

RequestId LocalCudaBackend::post_collective(int group, CollPost post) {
  post.id = next_id_++;
  post.ready = record_compute();
  const int k = occurrence_[group]++;
  descriptions_[post.id] = fmt::format("{} #{} on group {}", to_string(post.kind), k, group);
  std::lock_guard lock(world_.mutex);
  if (group < 0 || size_t(group) >= world_.groups.size())
    throw ScheduleError(fmt::format("rank {}: collective on unknown group {}", rank_, group));
  const CommGroup& g = world_.groups[size_t(group)];
  auto it = std::find(g.ranks.begin(), g.ranks.end(), rank_);
  if (it == g.ranks.end()) throw ScheduleError(fmt::format("rank {} is not a member of group '{}'", rank_, g.name));
  auto& posts = world_.collectives[{group, k}];
  posts.resize(g.ranks.size());
  const RequestId id = post.id;
  posts[size_t(it - g.ranks.begin())] = std::move(post);
  if (std::all_of(posts.begin(), posts.end(), [](const auto& p) { return p.has_value(); })) {
    run_collective(g, posts);
    world_.collectives.erase({group, k});
    world_.changed.notify_all();
  }
  return id;
}

// Runs on the last member to post, on its communication stream, after every member's data is ready.
void LocalCudaBackend::run_collective(const CommGroup& group, std::vector<std::optional<CollPost>>& posts) {
  const size_t n = posts.size();
  const CollPost& first = *posts[0];
  const size_t es = elem_size(first.type);
  for (const auto& p : posts) {
    if (p->kind != first.kind || p->type != first.type)
      throw ScheduleError(fmt::format("group '{}': members post different collectives ({} and {})", group.name,
                                      to_string(first.kind), to_string(p->kind)));
    WF_CUDA_CHECK(cudaStreamWaitEvent(comm_stream(), p->ready->get(), 0));
  }
  cudaStream_t s = comm_stream();
  auto copy = [&](void* dst, const void* src, int64_t elements) {
    if (elements > 0) WF_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(elements) * es, cudaMemcpyDeviceToDevice, s));
  };
  auto add = [&](void* dst, const void* src, int64_t elements) {
    if (first.type == ElemType::F32)
      launch_accumulate<float>(static_cast<float*>(dst), static_cast<const float*>(src), size_t(elements), s);
    else
      launch_accumulate<double>(static_cast<double*>(dst), static_cast<const double*>(src), size_t(elements), s);
  };
  auto offset = [](const Counts& counts, size_t upto) {
    return std::accumulate(counts.begin(), counts.begin() + long(upto), int64_t(0));
  };
  auto at = [&](const void* base, int64_t elements) { return static_cast<const char*>(base) + size_t(elements) * es; };
  comm_interval_begin();
  for (size_t j = 0; j < n; ++j) {
    CollPost& dst = *posts[j];
    switch (first.kind) {
      case CollKind::AllGather:
        for (size_t i = 0; i < n; ++i) {
          if (dst.recv_counts.size() != n || dst.recv_counts[i] != posts[i]->count)
            throw ScheduleError(fmt::format("group '{}': all-gather counts disagree", group.name));
          copy(const_cast<char*>(at(dst.recv, offset(dst.recv_counts, i))), posts[i]->send, posts[i]->count);
        }
        break;
      case CollKind::AllToAll:
        for (size_t i = 0; i < n; ++i) {
          const CollPost& src = *posts[i];
          if (src.send_counts[j] != dst.recv_counts[i])
            throw ScheduleError(fmt::format("group '{}': member {} sends {} elements to member {}, which expects {}",
                                            group.name, i, src.send_counts[j], j, dst.recv_counts[i]));
          copy(const_cast<char*>(at(dst.recv, offset(dst.recv_counts, i))), at(src.send, offset(src.send_counts, j)),
               src.send_counts[j]);
        }
        break;
      case CollKind::ReduceScatter:
        // Member order, starting from member 0's block: the same sum whoever posts last.
        for (size_t i = 0; i < n; ++i) {
          const CollPost& src = *posts[i];
          const void* block = at(src.send, offset(src.recv_counts, j));
          if (i == 0)
            copy(dst.recv, block, dst.recv_counts[j]);
          else
            add(dst.recv, block, dst.recv_counts[j]);
        }
        break;
      case CollKind::AllReduce:
        break;
    }
  }
  if (first.kind == CollKind::AllReduce) {
    void* sum = nullptr;
    WF_CUDA_CHECK(cudaMallocAsync(&sum, std::max<size_t>(size_t(first.count) * es, 1), s));
    copy(sum, posts[0]->send, first.count);
    for (size_t i = 1; i < n; ++i)
      add(sum, posts[i]->send, first.count);
    for (size_t j = 0; j < n; ++j)
      copy(posts[j]->recv, sum, first.count);
    WF_CUDA_CHECK(cudaFreeAsync(sum, s));
  }
  comm_interval_end();
  auto done = std::make_shared<Event>();
  WF_CUDA_CHECK(cudaEventRecord(done->get(), s));
  for (const auto& p : posts) {
    world_.done[size_t(p->rank)][p->id] = done;
    world_.wake(p->rank);
  }
}

}  // namespace
}  // namespace wallfacer::runtime::cuda

namespace wallfacer::runtime {

void run_cuda_local_ranks(int ranks, const std::function<void(Backend&)>& body, const CudaLocalOptions& options) {
  const CudaDeviceInfo info = cuda_device_info(options.device);
  if (!info.available) throw CudaError("--backend cuda: no usable CUDA device: " + info.description);
  cuda::World world(ranks);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        cuda::LocalCudaBackend backend(world, r, options.device);
        try {
          body(backend);
        } catch (...) {
          errors[size_t(r)] = std::current_exception();
          std::lock_guard lock(world.mutex);
          if (world.aborted.empty()) world.aborted = fmt::format("rank {} failed", r);
          world.wake_all();
        }
        backend.finished();
      } catch (...) {
        if (!errors[size_t(r)]) errors[size_t(r)] = std::current_exception();
        std::lock_guard lock(world.mutex);
        if (world.aborted.empty()) world.aborted = fmt::format("rank {} failed", r);
        world.wake_all();
      }
    });
  for (auto& t : threads)
    t.join();
  // The first real failure; the others only unwound because of it.
  for (auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const cuda::LocalCudaAborted&) {
      continue;
    } catch (...) {
      throw;
    }
  }
}

LayerRunResult run_layer_cuda_local(const Plan& plan, const Schedule& schedule, const LayerInputs& inputs,
                                    const LayerRunOptions& options, const CudaLocalOptions& local) {
  LayerRunResult result;
  run_cuda_local_ranks(
      plan.num_ranks(),
      [&](Backend& backend) {
        LayerRunResult r = run_layer(backend, plan, schedule, inputs, options);
        if (backend.rank() == 0) result = std::move(r);
      },
      local);
  return result;
}

}  // namespace wallfacer::runtime
