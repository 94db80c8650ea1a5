// Gradient synchronisation and the sharded update: one fused collective per gradient group
// (world, or LSS's sequence group then data group), all-reduce under ZeRO 0 and reduce-scatter
// under ZeRO 1 and 2 followed by the all-gather of the updated weights in the reverse order.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include <wallfacer/core/errors.hpp>
#include "trainer_impl.hpp"

namespace wallfacer::train {

using runtime::Backend;
using runtime::Counts;
using runtime::ElemType;

namespace {

// Backend memory holding `count` values of T, released on destruction.
template <typename T>
class BackendArray {
 public:
  BackendArray(Backend& backend, int64_t count)
      : backend_(backend), count_(count), data_(backend.allocate(std::max<size_t>(1, size_t(count) * sizeof(T)))) {}
  ~BackendArray() { backend_.release(data_); }
  BackendArray(const BackendArray&) = delete;
  BackendArray& operator=(const BackendArray&) = delete;
  void* data() const { return data_; }
  void upload(const T* host) { backend_.upload(data_, host, size_t(count_) * sizeof(T)); }
  void download(T* host) const { backend_.download(host, data_, size_t(count_) * sizeof(T)); }

 private:
  Backend& backend_;
  int64_t count_;
  void* data_;
};

void wait(Backend& backend, runtime::RequestId request) {
  while (!backend.test(request))
    backend.wait_any({request});
}

int member_index(const CommGroup& group, int rank) {
  auto it = std::find(group.ranks.begin(), group.ranks.end(), rank);
  if (it == group.ranks.end()) throw ScheduleError(fmt::format("rank {} is not in group {}", rank, group.name));
  return int(it - group.ranks.begin());
}

template <typename T>
void all_reduce(Backend& backend, int group, std::vector<T>& values) {
  BackendArray<T> buffer(backend, int64_t(values.size()));
  buffer.upload(values.data());
  wait(backend, backend.iallreduce(group, buffer.data(), int64_t(values.size()), runtime::elem_type_of<T>()));
  buffer.download(values.data());
}

// Sum over `group` of every member's `values` (chunk j for member j); returns this member's chunk.
template <typename T>
std::vector<T> reduce_scatter(Backend& backend, int group, int size, const std::vector<T>& values) {
  const int64_t chunk = int64_t(values.size()) / size;
  const ElemType type = runtime::elem_type_of<T>();
  BackendArray<T> send(backend, int64_t(values.size()));
  send.upload(values.data());
  std::vector<T> mine(static_cast<size_t>(chunk));
  if (backend.has_reduce_scatter()) {
    BackendArray<T> recv(backend, chunk);
    wait(backend, backend.ireduce_scatter(group, send.data(), recv.data(), Counts(size_t(size), chunk), type));
    recv.download(mine.data());
    return mine;
  }
  // Without one: every member's chunk for me, summed here in member order (deterministic).
  BackendArray<T> recv(backend, chunk * size);
  wait(backend, backend.ialltoallv(group, send.data(), Counts(size_t(size), chunk), recv.data(),
                                   Counts(size_t(size), chunk), type));
  std::vector<T> all(size_t(chunk * size));
  recv.download(all.data());
  for (int j = 0; j < size; ++j)
    for (int64_t i = 0; i < chunk; ++i)
      mine[size_t(i)] = j == 0 ? all[size_t(i)] : mine[size_t(i)] + all[size_t(j * chunk + i)];
  return mine;
}

}  // namespace

template <typename T>
void Trainer<T>::Impl::setup_shards() {
  grads.assign(size_t(layout.size()), T(0));
  int64_t product = 1;
  for (int g : groups)
    product *= int64_t(plan.groups[size_t(g)].ranks.size());
  padded = (layout.size() + product - 1) / product * product;
  shard_lo = 0;
  shard_hi = layout.size();
  if (plan.workload.zero_stage == 0) return;
  shard_hi = padded;
  for (int g : groups) {
    const CommGroup& group = plan.groups[size_t(g)];
    shard_path.emplace_back(shard_lo, shard_hi);
    const int64_t chunk = (shard_hi - shard_lo) / int64_t(group.ranks.size());
    shard_lo += chunk * member_index(group, backend.rank());
    shard_hi = shard_lo + chunk;
  }
}

template <typename T>
void Trainer<T>::Impl::all_reduce_scalars(std::vector<double>& values) {
  for (int g : groups)
    all_reduce(backend, g, values);
}

template <typename T>
void Trainer<T>::Impl::synchronise(std::vector<double>& extra) {
  if (plan.workload.zero_stage == 0) {
    if (groups.empty()) return;
    // The loss and the gradient in one message per group.
    std::vector<T> fused(grads.begin(), grads.end());
    for (double e : extra)
      fused.push_back(T(e));
    // Scalars travel in the training type; fp32 loses nothing the reported loss needs.
    for (int g : groups)
      all_reduce(backend, g, fused);
    std::copy(fused.begin(), fused.begin() + layout.size(), grads.begin());
    for (size_t i = 0; i < extra.size(); ++i)
      extra[i] = double(fused[size_t(layout.size()) + i]);
    return;
  }
  std::vector<T> part(size_t(padded), T(0));
  std::copy(grads.begin(), grads.end(), part.begin());
  for (int g : groups) {
    const CommGroup& group = plan.groups[size_t(g)];
    part = reduce_scatter(backend, g, int(group.ranks.size()), part);
  }
  shard_grad = std::move(part);
  shard_grad.resize(size_t(std::max<int64_t>(0, std::min(shard_hi, layout.size()) - shard_lo)));
  if (extra.size() > 2) {
    double squares = 0;
    for (T v : shard_grad)
      squares += double(v) * double(v);
    extra[2] = squares;
  }
  all_reduce_scalars(extra);
}

template <typename T>
double Trainer<T>::Impl::grad_norm_squared_local() const {
  double squares = 0;
  for (T v : grads)
    squares += double(v) * double(v);
  return squares;
}

template <typename T>
void Trainer<T>::Impl::gather_parameters() {
  // This rank's updated range, gathered group by group in reverse to the whole padded array.
  std::vector<T> piece(size_t(shard_hi - shard_lo), T(0));
  for (int64_t i = shard_lo; i < std::min(shard_hi, layout.size()); ++i)
    piece[size_t(i - shard_lo)] = params[size_t(i)];
  for (size_t k = groups.size(); k-- > 0;) {
    const CommGroup& group = plan.groups[size_t(groups[k])];
    const int64_t chunk = int64_t(piece.size()), size = int64_t(group.ranks.size());
    BackendArray<T> send(backend, chunk), recv(backend, chunk * size);
    send.upload(piece.data());
    wait(backend, backend.iallgatherv(groups[k], send.data(), chunk, recv.data(), Counts(size_t(size), chunk),
                                      runtime::elem_type_of<T>()));
    piece.resize(size_t(chunk * size));
    recv.download(piece.data());
  }
  const int64_t lo = shard_path.empty() ? shard_lo : shard_path.front().first;
  for (int64_t i = 0; i < int64_t(piece.size()) && lo + i < layout.size(); ++i)
    params[size_t(lo + i)] = piece[size_t(i)];
}

template struct Trainer<float>::Impl;
template struct Trainer<double>::Impl;

}  // namespace wallfacer::train
