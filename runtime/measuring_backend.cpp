// MeasuringBackend (measuring_backend.hpp): memory as bookkeeping alone.
#include <wallfacer/runtime/measuring_backend.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::runtime {

namespace {
// Above any user-space mapping of x86-64 and AArch64 Linux (47 and 48 address bits), so a host
// access faults; a 64-bit integer still holds every address handed out.
constexpr uintptr_t kFirstAddress = uintptr_t{1} << 56;
constexpr uintptr_t kAlignment = 256;
}  // namespace

MeasuringBackend::MeasuringBackend(int rank, int size, bool reduce_scatter)
    : rank_(rank), size_(size), reduce_scatter_(reduce_scatter), next_address_(kFirstAddress) {
  static_assert(sizeof(uintptr_t) >= 8, "the measuring backend's addresses need 64 bits");
}

void* MeasuringBackend::allocate(size_t bytes) {
  const uintptr_t address = next_address_;
  next_address_ += (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  live_blocks_.emplace(address, bytes);
  live_ += int64_t(bytes);
  peak_ = std::max(peak_, live_);
  return reinterpret_cast<void*>(address);
}

void MeasuringBackend::release(void* data) {
  if (data == nullptr) return;
  auto it = live_blocks_.find(reinterpret_cast<uintptr_t>(data));
  if (it == live_blocks_.end())
    throw ScheduleError(fmt::format("rank {}: released memory the measuring backend did not hand out", rank_));
  live_ -= int64_t(it->second);
  live_blocks_.erase(it);
}

void MeasuringBackend::download(void* host, const void*, size_t bytes) {
  std::memset(host, 0, bytes);
}

namespace {
int64_t sum(const Counts& counts) {
  int64_t total = 0;
  for (int64_t c : counts)
    total += c;
  return total;
}
}  // namespace

RequestId MeasuringBackend::isend(int, int, const void*, size_t bytes) {
  largest_send_ = std::max(largest_send_, int64_t(bytes));
  return next_++;
}

RequestId MeasuringBackend::irecv(int, int, void*, size_t bytes) {
  largest_recv_ = std::max(largest_recv_, int64_t(bytes));
  return next_++;
}

RequestId MeasuringBackend::collective(int64_t elements, ElemType type) {
  largest_collective_ = std::max(largest_collective_, elements * int64_t(elem_size(type)));
  return next_++;
}

RequestId MeasuringBackend::iallgatherv(int, const void*, int64_t send_count, void*, const Counts& recv_counts,
                                        ElemType type) {
  return collective(send_count + sum(recv_counts), type);
}

RequestId MeasuringBackend::ialltoallv(int, const void*, const Counts& send_counts, void*, const Counts& recv_counts,
                                       ElemType type) {
  return collective(sum(send_counts) + sum(recv_counts), type);
}

RequestId MeasuringBackend::ireduce_scatter(int, const void*, void*, const Counts& recv_counts, ElemType type) {
  const int64_t count = sum(recv_counts);
  largest_reduction_ = std::max(largest_reduction_, count * int64_t(elem_size(type)));
  const int64_t own = recv_counts.empty() ? 0 : *std::max_element(recv_counts.begin(), recv_counts.end());
  return collective(count + own, type);
}

RequestId MeasuringBackend::iallreduce(int, void*, int64_t count, ElemType type) {
  largest_reduction_ = std::max(largest_reduction_, count * int64_t(elem_size(type)));
  return collective(count, type);
}

std::vector<std::string> MeasuringBackend::gather_to_root(const std::string& bytes) {
  if (rank_ != 0) return {};
  return std::vector<std::string>(size_t(size_), bytes);
}

}  // namespace wallfacer::runtime
