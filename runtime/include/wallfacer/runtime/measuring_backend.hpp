// A backend that runs nothing and measures memory: one rank's view of a world whose memory is
// addresses that nothing may touch, whose transfers and collectives complete at once and whose
// kernels do nothing. Driving the executor (or the trainer) through it walks their real control
// flow, which does not depend on the values in backend memory, and records what they hold there:
// the bytes live at the peak and at the end. What a real run will allocate is then known before
// it allocates anything (`wallfacer train` checks it against the memory it has). One thing does
// depend on the machine: how long a message block stays allocated while the rank goes on (here
// every transfer completes at once). A real run holds at most one transfer per communication
// stream in flight, so in_flight_bytes() (the largest send, receive and collective) bounds what
// it can hold beyond the peak measured here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <wallfacer/runtime/backend.hpp>

namespace wallfacer::runtime {

class MeasuringBackend final : public Backend {
 public:
  // `reduce_scatter`: as the backend measured for reports it (the executor's fallback without one
  // allocates more).
  MeasuringBackend(int rank, int size, bool reduce_scatter);

  int64_t peak_bytes() const { return peak_; }
  int64_t live_bytes() const { return live_; }
  // The most bytes one reduce-scatter or all-reduce sums (a device transport's scratch for it).
  int64_t largest_reduction_bytes() const { return largest_reduction_; }
  // The largest send, plus the largest receive, plus the largest collective's send and receive data.
  int64_t in_flight_bytes() const { return largest_send_ + largest_recv_ + largest_collective_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "measuring"; }
  void set_groups(const std::vector<CommGroup>&) override {}

  // Addresses in a range no mapping covers, 256-byte aligned: a host access faults.
  void* allocate(size_t bytes) override;
  void release(void* data) override;
  void upload(void*, const void*, size_t) override {}
  void download(void* host, const void* src, size_t bytes) override;  // zeros
  void copy_2d(void*, size_t, const void*, size_t, size_t, size_t) override {}
  void fill(void*, ElemType, size_t, double) override {}
  void accumulate(void*, const void*, size_t, ElemType) override {}

  RequestId isend(int, int, const void*, size_t bytes) override;
  RequestId irecv(int, int, void*, size_t bytes) override;
  RequestId iallgatherv(int, const void*, int64_t send_count, void*, const Counts& recv_counts, ElemType type) override;
  RequestId ialltoallv(int, const void*, const Counts& send_counts, void*, const Counts& recv_counts,
                       ElemType type) override;
  bool has_reduce_scatter() const override { return reduce_scatter_; }
  RequestId ireduce_scatter(int, const void*, void*, const Counts& recv_counts, ElemType type) override;
  RequestId iallreduce(int, void*, int64_t count, ElemType type) override;
  bool test(RequestId) override { return true; }
  void wait_any(const std::vector<RequestId>&) override {}

  void attention_forward(const kernels::QueryBlock<float>&, const kernels::KeyBlock<float>&, const kernels::AttnShape&,
                         float*, float*, int64_t, int64_t) override {}
  void attention_forward(const kernels::QueryBlock<double>&, const kernels::KeyBlock<double>&,
                         const kernels::AttnShape&, double*, double*, int64_t, int64_t) override {}
  void attention_backward(const kernels::QueryBlock<float>&, const kernels::KeyBlock<float>&,
                          const kernels::BackwardInputs<float>&, const kernels::AttnShape&, float*, float*,
                          float*) override {}
  void attention_backward(const kernels::QueryBlock<double>&, const kernels::KeyBlock<double>&,
                          const kernels::BackwardInputs<double>&, const kernels::AttnShape&, double*, double*,
                          double*) override {}
  void backward_prep(const float*, const float*, int64_t, int, int, int64_t, float*, int64_t) override {}
  void backward_prep(const double*, const double*, int64_t, int, int, int64_t, double*, int64_t) override {}
  void merge_partial(float*, float*, const float*, const float*, int64_t, int, int, int64_t, int64_t) override {}
  void merge_partial(double*, double*, const double*, const double*, int64_t, int, int, int64_t, int64_t) override {}

  bool all_ok(bool ok) override { return ok; }
  std::vector<std::string> gather_to_root(const std::string& bytes) override;
  double max_over_ranks(double value) override { return value; }
  void barrier() override {}

 private:
  const int rank_, size_;
  const bool reduce_scatter_;
  std::map<uintptr_t, size_t> live_blocks_;
  uintptr_t next_address_;
  RequestId collective(int64_t elements, ElemType type);

  int64_t live_ = 0, peak_ = 0, largest_reduction_ = 0;
  int64_t largest_send_ = 0, largest_recv_ = 0, largest_collective_ = 0;
  RequestId next_ = 1;
};

}  // namespace wallfacer::runtime
