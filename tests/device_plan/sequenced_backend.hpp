// The NCCL transport's host logic without NCCL, for tests: a backend that holds every post until
// the device plan releases its call (CallSequencer, in plan order) and only then hands it to an
// inner backend (the threads backend). A program that runs to its numbers on it posts every op
// of each call without waiting on a later one, and its posts map to the plan's calls.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <map>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/runtime/device_plan.hpp>

namespace wallfacer::testing {

using runtime::Backend;
using runtime::Counts;
using runtime::ElemType;
using runtime::RequestId;

class SequencedBackend final : public Backend {
 public:
  SequencedBackend(Backend& inner, runtime::RankDevicePlan plan)
      : in_(inner), sequencer_(std::move(plan)), posts_(sequencer_.plan().calls.size()) {}

  bool all_released() const { return sequencer_.next_call() == sequencer_.plan().calls.size(); }
  int programs() const { return programs_; }

  // Every program the executor starts runs the plan from its first call again, as the NCCL
  // transport does; requests of the last run are all retired by then.
  void program_begins() override {
    sequencer_.restart();
    for (auto& posts : posts_)
      posts.clear();
    ++programs_;
  }

  int rank() const override { return in_.rank(); }
  int size() const override { return in_.size(); }
  std::string name() const override { return "sequenced " + in_.name(); }
  void set_groups(const std::vector<CommGroup>& groups) override { in_.set_groups(groups); }
  void* allocate(size_t bytes) override { return in_.allocate(bytes); }
  void release(void* data) override { in_.release(data); }
  void upload(void* dst, const void* host, size_t bytes) override { in_.upload(dst, host, bytes); }
  void download(void* host, const void* src, size_t bytes) override { in_.download(host, src, bytes); }
  void copy_2d(void* dst, size_t dp, const void* src, size_t sp, size_t row, size_t rows) override {
    in_.copy_2d(dst, dp, src, sp, row, rows);
  }
  void fill(void* dst, ElemType type, size_t count, double value) override { in_.fill(dst, type, count, value); }
  void accumulate(void* dst, const void* src, size_t count, ElemType type) override {
    in_.accumulate(dst, src, count, type);
  }

  RequestId isend(int peer, int tag, const void* data, size_t bytes) override {
    return hold(sequencer_.post_p2p(true, peer, tag), [=, this] { return in_.isend(peer, tag, data, bytes); });
  }
  RequestId irecv(int peer, int tag, void* data, size_t bytes) override {
    return hold(sequencer_.post_p2p(false, peer, tag), [=, this] { return in_.irecv(peer, tag, data, bytes); });
  }
  RequestId iallgatherv(int g, const void* send, int64_t n, void* recv, const Counts& counts, ElemType t) override {
    return hold(sequencer_.post_collective(g), [=, this] { return in_.iallgatherv(g, send, n, recv, counts, t); });
  }
  RequestId ialltoallv(int g, const void* send, const Counts& sc, void* recv, const Counts& rc, ElemType t) override {
    return hold(sequencer_.post_collective(g), [=, this] { return in_.ialltoallv(g, send, sc, recv, rc, t); });
  }
  bool has_reduce_scatter() const override { return in_.has_reduce_scatter(); }
  RequestId ireduce_scatter(int g, const void* send, void* recv, const Counts& rc, ElemType t) override {
    return hold(sequencer_.post_collective(g), [=, this] { return in_.ireduce_scatter(g, send, recv, rc, t); });
  }
  RequestId iallreduce(int g, void* data, int64_t count, ElemType t) override {
    return hold(sequencer_.post_collective(g), [=, this] { return in_.iallreduce(g, data, count, t); });
  }

  bool test(RequestId id) override {
    Held& h = held_.at(id);
    if (h.inner < 0 || !in_.test(h.inner)) return false;
    held_.erase(id);
    return true;
  }
  void wait_any(const std::vector<RequestId>& pending) override {
    std::vector<RequestId> inner;
    for (RequestId id : pending)
      if (held_.at(id).inner >= 0) inner.push_back(held_.at(id).inner);
    if (inner.empty())
      throw ScheduleError(fmt::format("rank {}: waits with no call of the device plan released (next #{})", rank(),
                                      sequencer_.next_call()));
    in_.wait_any(inner);
  }

  void attention_forward(const kernels::QueryBlock<float>& q, const kernels::KeyBlock<float>& kv,
                         const kernels::AttnShape& s, float* o, float* lse, int64_t rs, int64_t ls) override {
    in_.attention_forward(q, kv, s, o, lse, rs, ls);
  }
  void attention_forward(const kernels::QueryBlock<double>& q, const kernels::KeyBlock<double>& kv,
                         const kernels::AttnShape& s, double* o, double* lse, int64_t rs, int64_t ls) override {
    in_.attention_forward(q, kv, s, o, lse, rs, ls);
  }
  void attention_backward(const kernels::QueryBlock<float>& q, const kernels::KeyBlock<float>& kv,
                          const kernels::BackwardInputs<float>& b, const kernels::AttnShape& s, float* dq, float* dk,
                          float* dv) override {
    in_.attention_backward(q, kv, b, s, dq, dk, dv);
  }
  void attention_backward(const kernels::QueryBlock<double>& q, const kernels::KeyBlock<double>& kv,
                          const kernels::BackwardInputs<double>& b, const kernels::AttnShape& s, double* dq, double* dk,
                          double* dv) override {
    in_.attention_backward(q, kv, b, s, dq, dk, dv);
  }
  void backward_prep(const float* o, const float* dO, int64_t rows, int h, int d, int64_t rs, float* D,
                     int64_t ls) override {
    in_.backward_prep(o, dO, rows, h, d, rs, D, ls);
  }
  void backward_prep(const double* o, const double* dO, int64_t rows, int h, int d, int64_t rs, double* D,
                     int64_t ls) override {
    in_.backward_prep(o, dO, rows, h, d, rs, D, ls);
  }
  void merge_partial(float* oa, float* la, const float* ob, const float* lb, int64_t rows, int h, int d, int64_t rs,
                     int64_t ls) override {
    in_.merge_partial(oa, la, ob, lb, rows, h, d, rs, ls);
  }
  void merge_partial(double* oa, double* la, const double* ob, const double* lb, int64_t rows, int h, int d, int64_t rs,
                     int64_t ls) override {
    in_.merge_partial(oa, la, ob, lb, rows, h, d, rs, ls);
  }
  bool all_ok(bool ok) override { return in_.all_ok(ok); }
  std::vector<std::string> gather_to_root(const std::string& bytes) override { return in_.gather_to_root(bytes); }
  double max_over_ranks(double value) override { return in_.max_over_ranks(value); }
  void barrier() override { in_.barrier(); }

 private:
  struct Held {
    std::function<RequestId()> post;
    RequestId inner = -1;
  };

  RequestId hold(runtime::CallSequencer::Slot slot, std::function<RequestId()> post) {
    const RequestId id = next_id_++;
    held_[id] = Held{std::move(post), -1};
    posts_[size_t(slot.call)].push_back(id);
    for (int32_t c : sequencer_.take_issuable()) {
      for (RequestId p : posts_[size_t(c)])
        held_.at(p).inner = held_.at(p).post();
    }
    return id;
  }

  Backend& in_;
  runtime::CallSequencer sequencer_;
  std::vector<std::vector<RequestId>> posts_;  // per call
  std::map<RequestId, Held> held_;
  RequestId next_id_ = 1;
  int programs_ = 0;
};

}  // namespace wallfacer::testing
