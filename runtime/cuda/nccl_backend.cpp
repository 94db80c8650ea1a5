// The NCCL transport: one process per GPU. The executor's posts are matched to the calls of this
// rank's device plan (by direction, peer, tag and occurrence; collectives by group and
// occurrence), and calls are issued strictly in plan order once all of a call's ops have been
// posted: point-to-point entries inside one ncclGroupStart/End on the world communicator,
// collectives on the group's split communicator, all on the rank's communication stream. A call
// is complete for the executor as soon as it is issued: the compute stream then waits on its
// done event, so the host runs ahead and the device keeps the order (docs/cuda.md). Each program
// the executor starts (every training step) runs the plan again from its first call.
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>

#include <wallfacer/core/errors.hpp>
#include "cuda_device_backend.hpp"

#define WF_NCCL_CHECK(call)                                                                                       \
  do {                                                                                                            \
    const ncclResult_t wf_status_ = (call);                                                                       \
    if (wf_status_ != ncclSuccess)                                                                                \
      ::wallfacer::runtime::cuda::throw_cuda(__FILE__, __LINE__, ::wallfacer::runtime::cuda::error_rank(), #call, \
                                             ncclGetErrorString(wf_status_));                                     \
  } while (0)

namespace wallfacer::runtime::cuda {
namespace {

ncclDataType_t nccl_type(ElemType type) {
  return type == ElemType::F32 ? ncclFloat32 : ncclFloat64;
}

// The control calls of a host backend (the MPI backend under mpirun) as a control channel.
class BackendControl final : public ControlChannel {
 public:
  explicit BackendControl(Backend& backend) : b_(backend) {}
  int rank() const override { return b_.rank(); }
  int size() const override { return b_.size(); }
  bool all_ok(bool ok) override { return b_.all_ok(ok); }
  std::vector<std::string> gather_to_root(const std::string& bytes) override { return b_.gather_to_root(bytes); }
  double max_over_ranks(double value) override { return b_.max_over_ranks(value); }
  void barrier() override { b_.barrier(); }
  // Through the max-reduction: three bytes per reduction, as an integer every double holds
  // exactly (other ranks offer -1). Only rank 0's size counts; the others learn it first.
  std::string broadcast_from_root(const std::string& bytes) override {
    const size_t size = size_t(b_.max_over_ranks(b_.rank() == 0 ? double(bytes.size()) : -1.0));
    std::string out(size, '\0');
    for (size_t i = 0; i < size; i += 3) {
      double value = -1;
      if (b_.rank() == 0) {
        value = 0;
        for (size_t b = 0; b < 3; ++b)
          value = value * 256 + (i + b < size ? double(uint8_t(bytes[i + b])) : 0.0);
      }
      auto v = uint32_t(b_.max_over_ranks(value));
      for (size_t b = 3; b-- > 0;) {
        if (i + b < size) out[i + b] = char(v & 0xff);
        v >>= 8;
      }
    }
    return out;
  }

 private:
  Backend& b_;
};

int local_rank_device(int devices) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0')
      return devices > 0 ? std::atoi(value) % devices : 0;
  return 0;
}

using CollectiveBody = std::function<void(ncclComm_t, cudaStream_t)>;

class NcclBackend final : public CudaDeviceBackend {
 public:
  NcclBackend(std::unique_ptr<ControlChannel> owned, ControlChannel& control, const RankDevicePlan& plan, int device,
              const ncclUniqueId& id)
      : CudaDeviceBackend(control.rank(), control.size(), device),
        owned_control_(std::move(owned)),
        control_(control),
        sequencer_(plan) {
    if (plan.rank != control.rank())
      throw ScheduleError(fmt::format("rank {} was given the device plan of rank {}", control.rank(), plan.rank));
    WF_NCCL_CHECK(ncclCommInitRank(&world_, size_, id, rank_));
    calls_.resize(plan.calls.size());
    for (size_t c = 0; c < calls_.size(); ++c)
      calls_[c].ptrs.assign(plan.calls[c].entries.size(), nullptr);
  }
  ~NcclBackend() override {
    synchronize_quietly();
    for (ncclComm_t comm : comms_)
      if (comm) ncclCommDestroy(comm);  // not checked: a destructor must not throw
    if (world_) ncclCommDestroy(world_);
  }

  std::string name() const override {
    int version = 0;
    ncclGetVersion(&version);
    return fmt::format("cuda-nccl ({} processes, GPU {}, NCCL {}.{}.{})", size_, device_, version / 10000,
                       version / 100 % 100, version % 100);
  }

  void set_groups(const std::vector<CommGroup>& groups) override {
    if (!comms_.empty()) return;
    comms_.assign(groups.size(), nullptr);
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto& ranks = groups[g].ranks;
      auto it = std::find(ranks.begin(), ranks.end(), rank_);
      const int color = it == ranks.end() ? NCCL_SPLIT_NOCOLOR : int(g);
      const int key = it == ranks.end() ? 0 : int(it - ranks.begin());
      WF_NCCL_CHECK(ncclCommSplit(world_, color, key, &comms_[g], nullptr));
    }
    groups_ = groups;
  }

  RequestId isend(int peer, int tag, const void* data, size_t bytes) override {
    return post_p2p(true, peer, tag, const_cast<void*>(data), bytes);
  }
  RequestId irecv(int peer, int tag, void* data, size_t bytes) override {
    return post_p2p(false, peer, tag, data, bytes);
  }

  RequestId iallgatherv(int group, const void* send, int64_t send_count, void* recv, const Counts& recv_counts,
                        ElemType type) override {
    const size_t es = elem_size(type);
    const bool equal = std::all_of(recv_counts.begin(), recv_counts.end(), [&](int64_t c) { return c == send_count; });
    return post_collective(group, [=, this](ncclComm_t comm, cudaStream_t s) {
      if (equal) {
        WF_NCCL_CHECK(ncclAllGather(send, recv, size_t(send_count), nccl_type(type), comm, s));
        return;
      }
      const int me = member(group);
      WF_NCCL_CHECK(ncclGroupStart());
      int64_t offset = 0;
      for (size_t j = 0; j < recv_counts.size(); ++j) {
        char* dst = static_cast<char*>(recv) + size_t(offset) * es;
        if (int(j) == me) {
          if (send_count > 0)
            WF_CUDA_CHECK(cudaMemcpyAsync(dst, send, size_t(send_count) * es, cudaMemcpyDeviceToDevice, s));
        } else {
          if (send_count > 0) WF_NCCL_CHECK(ncclSend(send, size_t(send_count) * es, ncclUint8, int(j), comm, s));
          if (recv_counts[j] > 0) WF_NCCL_CHECK(ncclRecv(dst, size_t(recv_counts[j]) * es, ncclUint8, int(j), comm, s));
        }
        offset += recv_counts[j];
      }
      WF_NCCL_CHECK(ncclGroupEnd());
    });
  }

  RequestId ialltoallv(int group, const void* send, const Counts& send_counts, void* recv, const Counts& recv_counts,
                       ElemType type) override {
    const size_t es = elem_size(type);
    return post_collective(group, [=, this](ncclComm_t comm, cudaStream_t s) {
      const int me = member(group);
      WF_NCCL_CHECK(ncclGroupStart());
      int64_t send_off = 0, recv_off = 0;
      for (size_t j = 0; j < send_counts.size(); ++j) {
        const char* src = static_cast<const char*>(send) + size_t(send_off) * es;
        char* dst = static_cast<char*>(recv) + size_t(recv_off) * es;
        if (int(j) == me) {
          if (send_counts[j] > 0)
            WF_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(send_counts[j]) * es, cudaMemcpyDeviceToDevice, s));
        } else {
          if (send_counts[j] > 0) WF_NCCL_CHECK(ncclSend(src, size_t(send_counts[j]) * es, ncclUint8, int(j), comm, s));
          if (recv_counts[j] > 0) WF_NCCL_CHECK(ncclRecv(dst, size_t(recv_counts[j]) * es, ncclUint8, int(j), comm, s));
        }
        send_off += send_counts[j];
        recv_off += recv_counts[j];
      }
      WF_NCCL_CHECK(ncclGroupEnd());
    });
  }

  bool has_reduce_scatter() const override { return true; }
  RequestId ireduce_scatter(int group, const void* send, void* recv, const Counts& recv_counts,
                            ElemType type) override {
    const size_t es = elem_size(type);
    const bool equal =
        std::all_of(recv_counts.begin(), recv_counts.end(), [&](int64_t c) { return c == recv_counts.front(); });
    return post_collective(group, [=, this](ncclComm_t comm, cudaStream_t s) {
      if (equal) {
        WF_NCCL_CHECK(ncclReduceScatter(send, recv, size_t(recv_counts.front()), nccl_type(type), ncclSum, comm, s));
        return;
      }
      // Unequal blocks: one reduce per member, rooted at the member the block belongs to.
      const int me = member(group);
      WF_NCCL_CHECK(ncclGroupStart());
      int64_t offset = 0;
      for (size_t j = 0; j < recv_counts.size(); ++j) {
        const char* block = static_cast<const char*>(send) + size_t(offset) * es;
        if (recv_counts[j] > 0)
          WF_NCCL_CHECK(ncclReduce(block, int(j) == me ? recv : const_cast<char*>(block), size_t(recv_counts[j]),
                                   nccl_type(type), ncclSum, int(j), comm, s));
        offset += recv_counts[j];
      }
      WF_NCCL_CHECK(ncclGroupEnd());
    });
  }

  RequestId iallreduce(int group, void* data, int64_t count, ElemType type) override {
    return post_collective(group, [=](ncclComm_t comm, cudaStream_t s) {
      WF_NCCL_CHECK(ncclAllReduce(data, data, size_t(count), nccl_type(type), ncclSum, comm, s));
    });
  }

  // The next run of the program (a training step after the last) issues the device plan's calls
  // again from the first. A call issued but never tested still orders the compute stream after it.
  void program_begins() override {
    sequencer_.restart();
    for (const auto& [request, c] : call_of_request_)
      if (calls_[size_t(c)].issued) compute_waits(calls_[size_t(c)].done);
    call_of_request_.clear();
    sizes_.clear();
    for (CallState& call : calls_) {
      std::fill(call.ptrs.begin(), call.ptrs.end(), nullptr);
      call.collective = nullptr;
      call.ready.reset();
      call.done.reset();
      call.issued = false;
    }
  }

  bool test(RequestId request) override {
    issue_ready_calls();
    auto it = call_of_request_.find(request);
    if (it == call_of_request_.end()) throw ScheduleError(fmt::format("rank {}: unknown request {}", rank_, request));
    CallState& call = calls_[size_t(it->second)];
    if (!call.issued) return false;
    compute_waits(call.done);
    call_of_request_.erase(it);
    return true;
  }

  // Every post completes when its call is issued; a wait with nothing issued means the executor
  // waits on a call whose other ops it has not posted, which the device plan rules out.
  void wait_any(const std::vector<RequestId>& pending) override {
    issue_ready_calls();
    for (RequestId id : pending) {
      auto it = call_of_request_.find(id);
      if (it != call_of_request_.end() && calls_[size_t(it->second)].issued) return;
    }
    const size_t next = sequencer_.next_call();
    const NcclCall& call = sequencer_.plan().calls.at(next);
    throw ScheduleError(
        fmt::format("rank {}: the executor waits, but call #{} of the device plan ({}, round {}) has "
                    "only {} of its ops posted",
                    rank_, next, to_string(call.kind), call.round, sequencer_.posted(int32_t(next))));
  }

  bool all_ok(bool ok) override { return control_.all_ok(ok); }
  std::vector<std::string> gather_to_root(const std::string& bytes) override { return control_.gather_to_root(bytes); }
  double max_over_ranks(double value) override { return control_.max_over_ranks(value); }
  void barrier() override {
    synchronize();
    control_.barrier();
  }

 private:
  struct CallState {
    std::vector<void*> ptrs;  // per entry
    CollectiveBody collective;
    EventPtr ready, done;
    bool issued = false;
  };

  int member(int group) const {
    const auto& ranks = groups_.at(size_t(group)).ranks;
    return int(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
  }

  RequestId post_p2p(bool send, int peer, int tag, void* data, size_t bytes) {
    const CallSequencer::Slot slot = sequencer_.post_p2p(send, peer, tag);
    calls_[size_t(slot.call)].ptrs[size_t(slot.entry)] = data;
    sizes_[{slot.call, slot.entry}] = bytes;
    return register_post(slot.call);
  }

  RequestId post_collective(int group, CollectiveBody body) {
    if (group < 0 || size_t(group) >= comms_.size() || comms_[size_t(group)] == nullptr)
      throw ScheduleError(
          fmt::format("rank {}: collective on group {}, which this rank is not a member of", rank_, group));
    const CallSequencer::Slot slot = sequencer_.post_collective(group);
    calls_[size_t(slot.call)].collective = std::move(body);
    return register_post(slot.call);
  }

  RequestId register_post(int32_t c) {
    // The compute stream is in order: the event of the last post covers every earlier packing.
    calls_[size_t(c)].ready = record_compute();
    const RequestId id = next_id_++;
    call_of_request_[id] = c;
    issue_ready_calls();
    return id;
  }

  void issue_ready_calls() {
    for (int32_t c : sequencer_.take_issuable())
      issue(c);
  }

  void issue(int32_t c) {
    const NcclCall& plan_call = sequencer_.plan().calls[size_t(c)];
    CallState& call = calls_[size_t(c)];
    cudaStream_t s = comm_stream();
    WF_CUDA_CHECK(cudaStreamWaitEvent(s, call.ready->get(), 0));
    comm_interval_begin();
    if (plan_call.kind == CallKind::P2pGroup) {
      WF_NCCL_CHECK(ncclGroupStart());
      for (size_t e = 0; e < plan_call.entries.size(); ++e) {
        const P2pEntry& entry = plan_call.entries[e];
        const size_t bytes = sizes_.at({c, int32_t(e)});
        if (bytes == 0) continue;
        if (entry.send)
          WF_NCCL_CHECK(ncclSend(call.ptrs[e], bytes, ncclUint8, entry.peer, world_, s));
        else
          WF_NCCL_CHECK(ncclRecv(call.ptrs[e], bytes, ncclUint8, entry.peer, world_, s));
      }
      WF_NCCL_CHECK(ncclGroupEnd());
    } else {
      call.collective(comms_[size_t(plan_call.group)], s);
      call.collective = nullptr;
    }
    comm_interval_end();
    call.done = std::make_shared<Event>();
    WF_CUDA_CHECK(cudaEventRecord(call.done->get(), s));
    call.issued = true;
  }

  void synchronize_quietly() {
    cudaStreamSynchronize(comm_stream());
    cudaStreamSynchronize(compute_stream());
  }

  std::unique_ptr<ControlChannel> owned_control_;
  ControlChannel& control_;
  CallSequencer sequencer_;
  ncclComm_t world_ = nullptr;
  std::vector<ncclComm_t> comms_;
  std::vector<CommGroup> groups_;
  std::vector<CallState> calls_;
  std::map<std::pair<int32_t, int32_t>, size_t> sizes_;
  std::map<RequestId, int32_t> call_of_request_;
  RequestId next_id_ = 1;
};

}  // namespace
}  // namespace wallfacer::runtime::cuda

namespace wallfacer::runtime {

namespace {

std::unique_ptr<Backend> make_nccl_backend_over(std::unique_ptr<ControlChannel> owned, ControlChannel& control,
                                                const RankDevicePlan& plan, int device) {
  cuda::error_rank() = control.rank();
  const CudaDeviceInfo probe = cuda_device_info(0);
  // Every rank agrees before any NCCL call: one rank without a GPU must not leave the others
  // waiting in ncclCommInitRank.
  if (!control.all_ok(probe.available))
    throw CudaError(fmt::format("rank {}: --backend cuda needs a GPU on every rank; here: {}", control.rank(),
                                probe.available ? "ok, but another rank has none" : probe.description));
  const int chosen = device >= 0 ? device : cuda::local_rank_device(probe.devices);
  WF_CUDA_CHECK(cudaSetDevice(chosen));
  ncclUniqueId id{};
  std::string bytes;
  if (control.rank() == 0) {
    WF_NCCL_CHECK(ncclGetUniqueId(&id));
    bytes.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  bytes = control.broadcast_from_root(bytes);
  if (bytes.size() != sizeof(id))
    throw CudaError(fmt::format("rank {}: received an NCCL unique id of {} bytes, expected {}", control.rank(),
                                bytes.size(), sizeof(id)));
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(&id));
  return std::make_unique<cuda::NcclBackend>(std::move(owned), control, plan, chosen, id);
}

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(Backend& control, const RankDevicePlan& plan, int device) {
  auto adapter = std::make_unique<cuda::BackendControl>(control);
  ControlChannel& channel = *adapter;
  return make_nccl_backend_over(std::move(adapter), channel, plan, device);
}

std::unique_ptr<Backend> make_nccl_backend(ControlChannel& control, const RankDevicePlan& plan, int device) {
  return make_nccl_backend_over(nullptr, control, plan, device);
}

int cuda_process_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  return cuda::local_rank_device(count);
}

CudaMemoryInfo cuda_memory_info(int device) {
  CudaMemoryInfo info;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) return info;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    info.free = int64_t(free_bytes);
    info.total = int64_t(total_bytes);
  }
  cudaSetDevice(previous);  // not checked: it was the current device a moment ago
  return info;
}

}  // namespace wallfacer::runtime
