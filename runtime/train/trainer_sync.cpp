// The step program's flat collectives on the real gradients and weights, and its Optimizer op.
// ZeRO 0: every gradient bucket is all-reduced in place over each gradient group in turn (world,
// or LSS's sequence group then its data group). ZeRO 1 and 2: each bucket, padded to a multiple
// of the groups' sizes, is reduce-scattered over the groups in turn, leaving this rank one part of
// every bucket (its shard: the parts concatenated); the Optimizer op updates the shard, and the
// parameter gathers, over the groups in reverse, bring every rank's updated shard back.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include <wallfacer/core/errors.hpp>
#include "trainer_impl.hpp"

namespace wallfacer::train {

using runtime::Backend;
using runtime::Counts;

namespace {

void wait(Backend& backend, runtime::RequestId request) {
  while (!backend.test(request))
    backend.wait_any({request});
}

int member_index(const CommGroup& group, int rank) {
  auto it = std::find(group.ranks.begin(), group.ranks.end(), rank);
  if (it == group.ranks.end()) throw ScheduleError(fmt::format("rank {} is not in group {}", rank, group.name));
  return int(it - group.ranks.begin());
}

// The ranks whose shards the gathers over groups k, k+1, .. of `rank` deliver, in order: the
// last group's gather runs first, so the first group's members are the outermost.
void gather_order_of(const Plan& plan, int rank, size_t k, std::vector<int>& out) {
  const std::vector<int> groups = gradient_groups(plan, rank);
  if (k == groups.size()) {
    out.push_back(rank);
    return;
  }
  for (int member : plan.groups[size_t(groups[k])].ranks)
    gather_order_of(plan, member, k + 1, out);
}

}  // namespace

template <typename T>
void Trainer<T>::Impl::setup_shards() {
  sharded = plan.workload.zero_stage > 0 && !groups.empty();
  int64_t product = 1;
  for (int g : groups) {
    group_sizes.push_back(int64_t(plan.groups[size_t(g)].ranks.size()));
    product *= group_sizes.back();
  }
  if (!sharded) {
    adam_m.assign(layout.size(), T(0));
    adam_v.assign(layout.size(), T(0));
    return;
  }
  piece_start.assign(size_t(plan.num_ranks()), {});
  for (const GradBucket& bucket : roles.buckets) {
    ShardPiece p;
    p.padded = (bucket.count + product - 1) / product * product;
    p.length = p.padded / product;
    p.at = shard_size;
    shard_size += p.length;
    pieces.push_back(p);
    for (int r = 0; r < plan.num_ranks(); ++r) {
      const std::vector<int> of = gradient_groups(plan, r);
      int64_t offset = bucket.offset, part = p.padded;
      for (size_t k = 0; k < of.size(); ++k) {
        part /= int64_t(plan.groups[size_t(of[k])].ranks.size());
        offset += part * member_index(plan.groups[size_t(of[k])], r);
      }
      piece_start[size_t(r)].push_back(offset);
    }
  }
  gather_order_of(plan, backend.rank(), 0, gather_order);
  shard_grad.assign(shard_size, T(0));
  shard_params.assign(shard_size, T(0));
  adam_m.assign(shard_size, T(0));
  adam_v.assign(shard_size, T(0));
  scratch.resize(roles.buckets.size() + size_t(roles.gather_buckets));
  for (std::vector<BackendArray<T>>& levels : scratch)
    for (size_t k = 0; k <= groups.size(); ++k)
      levels.emplace_back(backend);
}

template <typename T>
runtime::FlatCall Trainer<T>::Impl::flat(int32_t op) {
  const OpRole& role = roles.ops[size_t(op)];
  if (role.role == Role::GradSync) return grad_sync(role);
  if (role.role == Role::ParamGather && sharded) return param_gather(role);
  throw ScheduleError(fmt::format("rank {} op {}: a flat collective the trainer cannot bind ({})", backend.rank(), op,
                                  to_string(role.role)));
}

template <typename T>
runtime::FlatCall Trainer<T>::Impl::grad_sync(const OpRole& role) {
  const GradBucket& bucket = roles.buckets.at(size_t(role.bucket));
  if (!sharded) return {grads.data() + bucket.offset, nullptr, bucket.count, {}};
  const ShardPiece& p = pieces[size_t(role.bucket)];
  std::vector<BackendArray<T>>& sc = scratch[size_t(role.bucket)];
  const size_t k = size_t(role.level);
  if (k == 0) {
    sc[0].assign(p.padded, T(0));
    sc[0].copy(sc[0].data(), grads.data() + bucket.offset, bucket.count);
  }
  int64_t in = p.padded;
  for (size_t j = 0; j < k; ++j)
    in /= group_sizes[j];
  const int64_t out = in / group_sizes[k];
  T* recv = shard_grad.data() + p.at;
  if (k + 1 < groups.size()) {
    sc[k + 1].assign(out, T(0));
    recv = sc[k + 1].data();
  }
  return {sc[k].data(), recv, in, Counts(size_t(group_sizes[k]), out)};
}

template <typename T>
runtime::FlatCall Trainer<T>::Impl::param_gather(const OpRole& role) {
  const int64_t K = roles.gather_buckets, kb = role.bucket;
  const int64_t chunk = shard_size * (kb + 1) / K - shard_size * kb / K;
  std::vector<BackendArray<T>>& sc = scratch[roles.buckets.size() + size_t(kb)];
  const size_t level = size_t(role.level);
  int64_t count = chunk;
  for (size_t j = level + 1; j < groups.size(); ++j)
    count *= group_sizes[j];
  T* send = level + 1 == groups.size() ? shard_params.data() + shard_size * kb / K : sc[level + 1].data();
  sc[level].assign(count * group_sizes[level], T(0));
  return {send, sc[level].data(), count, Counts(size_t(group_sizes[level]), count)};
}

// The last gather of a gather bucket: every rank's updated part, into the parameters.
template <typename T>
void Trainer<T>::Impl::flat_finished(int32_t op) {
  const OpRole& role = roles.ops[size_t(op)];
  if (role.role != Role::ParamGather || role.level != 0) return;
  const int64_t K = roles.gather_buckets, kb = role.bucket;
  const int64_t lo = shard_size * kb / K, hi = shard_size * (kb + 1) / K;
  const BackendArray<T>& all = scratch[roles.buckets.size() + size_t(kb)][0];
  // Element s of the chunk, from rank gather_order[p], is parameter piece_start + (s - piece's
  // start) where that falls before the bucket's end (the padding does not): consecutive elements
  // of one piece are consecutive parameters, so each (piece, rank) is one copy.
  for (size_t b = 0; b < pieces.size(); ++b) {
    const int64_t s0 = std::max(lo, pieces[b].at), s1 = std::min(hi, pieces[b].at + pieces[b].length);
    if (s0 >= s1) continue;
    const int64_t end = roles.buckets[b].offset + roles.buckets[b].count;
    for (size_t p = 0; p < gather_order.size(); ++p) {
      const int64_t index = piece_start[size_t(gather_order[p])][b] + (s0 - pieces[b].at);
      const int64_t n = std::clamp<int64_t>(end - index, 0, s1 - s0);
      params.copy(params.data() + index, all.data() + int64_t(p) * (hi - lo) + (s0 - lo), n);
    }
  }
}

// Through the backend's memory, where its collectives work.
template <typename T>
void Trainer<T>::Impl::all_reduce_scalars(std::vector<double>& values) {
  if (groups.empty()) return;
  BackendArray<double> sums(backend);
  sums.upload(values);
  for (int g : groups)
    wait(backend, backend.iallreduce(g, sums.data(), sums.size(), runtime::ElemType::F64));
  sums.download(values);
}

// The step's loss, accuracy and (with_norm) the shards' summed squares, over every rank.
template <typename T>
std::vector<double> Trainer<T>::Impl::step_scalars(bool with_norm) {
  const double scale = counted > 0 ? 1.0 / double(counted) : 0.0;
  std::vector<double> values{loss_sum * scale, double(correct) * scale};
  if (with_norm) values.push_back(kernels->sum_squares(shard_grad.data(), shard_size));
  all_reduce_scalars(values);
  return values;
}

// The Optimizer op: global clipping norm, AdamW on the rank's range, tensor by tensor (weight
// decay is per tensor).
template <typename T>
void Trainer<T>::Impl::optimizer() {
  const std::vector<double> s = step_scalars(sharded);
  result.loss = s[0];
  result.accuracy = s[1];
  result.grad_norm = std::sqrt(sharded ? s[2] : kernels->sum_squares(grads.data(), layout.size()));
  const OptimizerSettings& o = options.optimizer;
  result.lr = learning_rate(o, step_index, options.total_steps);
  runtime::AdamWStep a{result.lr,   clip_scale(o, result.grad_norm), o.beta1, o.beta2, o.eps, o.weight_decay,
                       ++adam.steps};
  if (!sharded) {
    for (const ParameterTensor& t : layout.tensors())
      kernels->adamw(a, t.decay, params.data() + t.offset, grads.data() + t.offset, adam_m.data() + t.offset,
                     adam_v.data() + t.offset, t.numel());
    return;
  }
  const int me = backend.rank();
  for (size_t b = 0; b < pieces.size(); ++b) {
    const int64_t p0 = piece_start[size_t(me)][b], at = pieces[b].at;
    const int64_t valid =
        std::clamp<int64_t>(roles.buckets[b].offset + roles.buckets[b].count - p0, 0, pieces[b].length);
    for (const ParameterTensor& t : layout.tensors()) {
      const int64_t lo = std::max(p0, t.offset), hi = std::min(p0 + valid, t.offset + t.numel());
      if (lo >= hi) continue;
      const int64_t i = at + lo - p0;
      kernels->adamw(a, t.decay, params.data() + lo, shard_grad.data() + i, adam_m.data() + i, adam_v.data() + i,
                     hi - lo);
    }
    shard_params.copy(shard_params.data() + at, params.data() + p0, valid);
    if (valid < pieces[b].length)
      backend.fill(shard_params.data() + at + valid, runtime::elem_type_of<T>(), size_t(pieces[b].length - valid), 0.0);
  }
}

template struct Trainer<float>::Impl;
template struct Trainer<double>::Impl;

}  // namespace wallfacer::train
