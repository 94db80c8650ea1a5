#include <wallfacer/runtime/mpi/mpi_backend.hpp>

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/cpu_backend.hpp>
#include "heartbeat.hpp"
#include "mpi_check.hpp"
#include "peer_watch.hpp"
#include "termination_note.hpp"

namespace wallfacer::runtime {
namespace detail {

void mpi_fail(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  int rank = -1, initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw MpiError(
      fmt::format("{}:{}: rank {}: {} failed: {}", file, line, rank, call, std::string(text, size_t(length))));
}

}  // namespace detail

namespace {

MPI_Datatype mpi_type(ElemType type) {
  return type == ElemType::F32 ? MPI_FLOAT : MPI_DOUBLE;
}

int as_int(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX)
    throw MpiError(fmt::format("{} of {} elements exceeds what one MPI call can move ({})", what, value, INT_MAX));
  return int(value);
}

// A posted operation. The count arrays of v-collectives must outlive the call, so they live here.
struct Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  bool done = false;
  int64_t expect_bytes = -1;  // receives: the size the schedule promised
  std::string what;
  std::vector<int> peers;  // world ranks it waits on: the peer, or the group's members
  std::vector<int> counts, displs, send_counts, send_displs;
};

std::vector<int> prefix_sums(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  int64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = as_int(at, "a collective buffer");
    at += counts[i];
  }
  return displs;
}

class MpiBackend final : public CpuBackend {
 public:
  explicit MpiBackend(const MpiBackendOptions& options) : options_(options) {
    WF_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    WF_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    WF_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int length = 0;
    WF_MPI_CHECK(MPI_Get_library_version(version, &length));
    library_ = std::string(version, size_t(length));
    library_ = library_.substr(0, library_.find_first_of(",\n"));
    int* tag_ub = nullptr;
    int found = 0;
    WF_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found));
    tag_limit_ = found && tag_ub ? *tag_ub : 32767;
    exchange_processes();
    detail::install_termination_note(rank_);
    heartbeat_ = std::make_unique<detail::Heartbeat>(MPI_COMM_WORLD, options_.heartbeat_seconds);
  }
  ~MpiBackend() override {
    // The normal end waits for every rank and leaves no beat in flight. While an exception
    // unwinds, the runner is about to abort the job: no collective may start here.
    if (std::uncaught_exceptions() == 0) {
      try {
        heartbeat_->finish();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank_, e.what());
      }
    }
    for (MPI_Comm& comm : comms_)
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);  // no throwing from a destructor
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return fmt::format("mpi ({} processes, {})", size_, library_); }

  void set_groups(const std::vector<CommGroup>& groups) override {
    for (MPI_Comm& comm : comms_)
      if (comm != MPI_COMM_NULL) WF_MPI_CHECK(MPI_Comm_free(&comm));
    comms_.assign(groups.size(), MPI_COMM_NULL);
    for (size_t g = 0; g < groups.size(); ++g) {
      int key = -1;
      for (size_t i = 0; i < groups[g].ranks.size(); ++i)
        if (groups[g].ranks[i] == rank_) key = int(i);
      // Members keep their group order as their rank in the new communicator.
      WF_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, key >= 0 ? 0 : MPI_UNDEFINED, key, &comms_[g]));
    }
    group_names_.clear();
    group_ranks_.clear();
    for (const auto& g : groups) {
      group_names_.push_back(g.name);
      group_ranks_.push_back(g.ranks);
    }
  }

  RequestId isend(int peer, int tag, const void* data, size_t bytes) override {
    check_tag(tag);
    Pending& p = add(fmt::format("send to rank {} tag {} ({} bytes)", peer, tag, bytes));
    p.peers = {peer};
    WF_MPI_CHECK(MPI_Isend(data, as_int(int64_t(bytes), "a message"), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &p.request));
    return last_id_;
  }
  RequestId irecv(int peer, int tag, void* data, size_t bytes) override {
    check_tag(tag);
    Pending& p = add(fmt::format("receive from rank {} tag {} ({} bytes)", peer, tag, bytes));
    p.peers = {peer};
    p.expect_bytes = int64_t(bytes);
    WF_MPI_CHECK(MPI_Irecv(data, as_int(int64_t(bytes), "a message"), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &p.request));
    return last_id_;
  }

  RequestId iallgatherv(int group, const void* send, int64_t send_count, void* recv, const Counts& recv_counts,
                        ElemType type) override {
    Pending& p = add(fmt::format("all-gather on group {}", group_name(group)));
    p.peers = members(group);
    p.counts = to_ints(recv_counts);
    p.displs = prefix_sums(p.counts);
    WF_MPI_CHECK(MPI_Iallgatherv(send, as_int(send_count, "an all-gather block"), mpi_type(type), recv, p.counts.data(),
                                 p.displs.data(), mpi_type(type), comm(group), &p.request));
    return last_id_;
  }
  RequestId ialltoallv(int group, const void* send, const Counts& send_counts, void* recv, const Counts& recv_counts,
                       ElemType type) override {
    Pending& p = add(fmt::format("all-to-all on group {}", group_name(group)));
    p.peers = members(group);
    p.send_counts = to_ints(send_counts);
    p.send_displs = prefix_sums(p.send_counts);
    p.counts = to_ints(recv_counts);
    p.displs = prefix_sums(p.counts);
    WF_MPI_CHECK(MPI_Ialltoallv(send, p.send_counts.data(), p.send_displs.data(), mpi_type(type), recv, p.counts.data(),
                                p.displs.data(), mpi_type(type), comm(group), &p.request));
    return last_id_;
  }
  bool has_reduce_scatter() const override { return true; }
  RequestId ireduce_scatter(int group, const void* send, void* recv, const Counts& recv_counts,
                            ElemType type) override {
    Pending& p = add(fmt::format("reduce-scatter on group {}", group_name(group)));
    p.peers = members(group);
    p.counts = to_ints(recv_counts);
    WF_MPI_CHECK(MPI_Ireduce_scatter(send, recv, p.counts.data(), mpi_type(type), MPI_SUM, comm(group), &p.request));
    return last_id_;
  }
  RequestId iallreduce(int group, void* data, int64_t count, ElemType type) override {
    Pending& p = add(fmt::format("all-reduce on group {}", group_name(group)));
    p.peers = members(group);
    WF_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, as_int(count, "an all-reduce"), mpi_type(type), MPI_SUM,
                                comm(group), &p.request));
    return last_id_;
  }

  bool test(RequestId id) override {
    heartbeat_->beat();
    Pending& p = find(id);
    if (!p.done) poll(p);
    if (!p.done) return false;
    pending_.erase(id);
    return true;
  }

  void wait_any(const std::vector<RequestId>& ids) override {
    auto done = [&] {
      for (RequestId id : ids) {
        Pending& p = find(id);
        if (!p.done) poll(p);
        if (p.done) return true;
      }
      return false;
    };
    auto describe = [&] {
      std::string list;
      for (RequestId id : ids)
        list += " [" + find(id).what + "]";
      return list;
    };
    auto peers = [&] {
      std::vector<int> all;
      for (RequestId id : ids)
        for (int r : find(id).peers)
          all.push_back(r);
      return all;
    };
    wait_until(done, peers, describe);
  }

  void progress() override {
    heartbeat_->beat();
    for (auto& [id, p] : pending_)
      if (!p.done) poll(p);
  }

  bool all_ok(bool ok) override {
    int mine = ok ? 1 : 0, all = 0;
    MPI_Request request;
    WF_MPI_CHECK(MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD, &request));
    wait_blocking(request, "the check result all-reduce");
    return all != 0;
  }
  std::vector<std::string> gather_to_root(const std::string& bytes) override {
    int mine = as_int(int64_t(bytes.size()), "a gathered result");
    std::vector<int> sizes(rank_ == 0 ? size_t(size_) : 0);
    MPI_Request request;
    WF_MPI_CHECK(MPI_Igather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &request));
    wait_blocking(request, "the gather of result sizes");
    std::vector<int> displs = rank_ == 0 ? prefix_sums(sizes) : std::vector<int>{};
    std::string all(rank_ == 0 ? size_t(displs.back()) + size_t(sizes.back()) : 0, '\0');
    WF_MPI_CHECK(MPI_Igatherv(bytes.data(), mine, MPI_BYTE, all.data(), sizes.data(), displs.data(), MPI_BYTE, 0,
                              MPI_COMM_WORLD, &request));
    wait_blocking(request, "the gather of results");
    std::vector<std::string> out;
    for (size_t r = 0; r < sizes.size(); ++r)
      out.push_back(all.substr(size_t(displs[r]), size_t(sizes[r])));
    return out;
  }
  double max_over_ranks(double value) override {
    double best = 0;
    MPI_Request request;
    WF_MPI_CHECK(MPI_Iallreduce(&value, &best, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &request));
    wait_blocking(request, "a maximum over ranks");
    return best;
  }
  void barrier() override {
    MPI_Request request;
    WF_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &request));
    wait_blocking(request, "a barrier");
  }

 private:
  Pending& add(std::string what) {
    inject_fault();  // before the new operation is in pending_, which a slow rank's progress polls
    Pending& p = pending_[++last_id_];
    p.what = std::move(what);
    return p;
  }
  Pending& find(RequestId id) {
    auto it = pending_.find(id);
    if (it == pending_.end()) throw std::logic_error(fmt::format("unknown MPI request {}", id));
    return it->second;
  }
  // Tests one request; on completion checks that a receive got the size the schedule promised.
  void poll(Pending& p) {
    int flag = 0;
    MPI_Status status;
    WF_MPI_CHECK(MPI_Test(&p.request, &flag, &status));
    if (!flag) return;
    p.done = true;
    if (p.expect_bytes >= 0) {
      int got = 0;
      WF_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &got));
      if (got != p.expect_bytes) throw ScheduleError(fmt::format("rank {}: {} got {} bytes", rank_, p.what, got));
    }
  }
  // Polls `done` with a backoff until it holds; throws MpiError naming what it waits on when the
  // stall limit passes or a rank it waits on is found lost.
  void wait_until(const std::function<bool()>& done, const std::function<std::vector<int>()>& peers,
                  const std::function<std::string()>& describe) {
    if (done()) return;
    // Said if the launcher ends this rank while it waits (another rank died).
    detail::note_waiting(describe());
    struct NoteEnd {
      ~NoteEnd() { detail::note_not_waiting(); }
    } note_end;
    const auto start = std::chrono::steady_clock::now();
    double next_peer_check = options_.peer_check_seconds;
    // Silence is judged a few times per timeout; each check takes in the beats that arrived.
    const double heartbeat_check = heartbeat_->timeout_seconds() / 20;
    double next_heartbeat_check = heartbeat_check;
    auto pause = std::chrono::microseconds(10);
    while (!done()) {
      heartbeat_->beat();
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (options_.stall_seconds > 0 && waited > options_.stall_seconds)
        throw MpiError(
            fmt::format("no communication completed for {:.0f} s (stall limit); waiting on{}", waited, describe()));
      if (options_.peer_check_seconds > 0 && waited > next_peer_check) {
        next_peer_check = waited + options_.peer_check_seconds;
        if (const std::string lost = watch_.lost(peers()); !lost.empty())
          throw MpiError(fmt::format("lost {} after waiting {:.0f} s on{}", lost, waited, describe()));
      }
      if (heartbeat_->enabled() && waited > next_heartbeat_check) {
        next_heartbeat_check = waited + heartbeat_check;
        if (const std::string lost = heartbeat_->silent(peers()); !lost.empty())
          throw MpiError(fmt::format("lost {} (stopped, hung, or its host unreachable) after waiting {:.1f} s on{}",
                                     lost, waited, describe()));
      }
      // Back off, so that ranks sharing a core (oversubscribed runs) leave it to the busy ones.
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  void wait_blocking(MPI_Request& request, const char* what) {
    auto done = [&] {
      int flag = 0;
      WF_MPI_CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
      return flag != 0;
    };
    auto everyone = [&] {
      std::vector<int> all(static_cast<size_t>(size_));
      for (int r = 0; r < size_; ++r)
        all[size_t(r)] = r;
      return all;
    };
    wait_until(done, everyone, [&] { return fmt::format(" [{}]", what); });
  }
  std::vector<int> members(int group) const {
    return group >= 0 && size_t(group) < group_ranks_.size() ? group_ranks_[size_t(group)] : std::vector<int>{};
  }
  // Every rank's host and process id, for PeerWatch.
  void exchange_processes() {
    constexpr int kHostBytes = 256;
    std::vector<char> host(kHostBytes, '\0');
    gethostname(host.data(), kHostBytes - 1);
    std::vector<char> hosts(size_t(kHostBytes) * size_t(size_));
    WF_MPI_CHECK(MPI_Allgather(host.data(), kHostBytes, MPI_CHAR, hosts.data(), kHostBytes, MPI_CHAR, MPI_COMM_WORLD));
    int pid = int(getpid());
    std::vector<int> pids(static_cast<size_t>(size_));
    WF_MPI_CHECK(MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD));
    std::vector<detail::PeerProcess> peers(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r)
      peers[size_t(r)] = {std::string(hosts.data() + size_t(r) * kHostBytes), pids[size_t(r)]};
    watch_ = detail::PeerWatch(rank_, std::move(peers));
  }
  void inject_fault() {
    // Counted in posted operations, which the schedule fixes, not in waits, which depend on timing.
    if (options_.fault.empty() || rank_ != options_.fault_rank || ++posted_ != options_.fault_after_posts) return;
    // A slow rank, for the tests that no false alarm is raised: sleeping, but neither stopped
    // nor gone, for longer than several peer checks.
    // It sleeps in slices with a progress call between them, as a long compute op does.
    if (options_.fault == "sleep") {
      for (int slice = 0; slice < 80; ++slice) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        progress();
      }
      return;
    }
    ::raise(options_.fault == "kill" ? SIGKILL : SIGSTOP);
  }
  MPI_Comm comm(int group) const {
    if (group < 0 || size_t(group) >= comms_.size() || comms_[size_t(group)] == MPI_COMM_NULL)
      throw ScheduleError(fmt::format("rank {}: collective on group {} which it is not a member of", rank_, group));
    return comms_[size_t(group)];
  }
  std::string group_name(int group) const {
    return group >= 0 && size_t(group) < group_names_.size() ? group_names_[size_t(group)] : std::to_string(group);
  }
  void check_tag(int tag) const {
    if (tag < 0 || tag > tag_limit_)
      throw ScheduleError(fmt::format("rank {}: tag {} outside MPI's range 0..{}", rank_, tag, tag_limit_));
  }
  static std::vector<int> to_ints(const Counts& counts) {
    std::vector<int> out;
    for (int64_t c : counts)
      out.push_back(as_int(c, "a collective block"));
    return out;
  }

  MpiBackendOptions options_;
  int rank_ = 0, size_ = 1, tag_limit_ = 32767;
  std::string library_;
  std::vector<MPI_Comm> comms_;
  std::vector<std::string> group_names_;
  std::vector<std::vector<int>> group_ranks_;
  detail::PeerWatch watch_;
  std::unique_ptr<detail::Heartbeat> heartbeat_;
  int posted_ = 0;
  std::unordered_map<RequestId, Pending> pending_;
  RequestId last_id_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(const MpiBackendOptions& options) {
  return std::make_unique<MpiBackend>(options);
}

}  // namespace wallfacer::runtime
