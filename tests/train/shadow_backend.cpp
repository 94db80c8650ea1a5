// The shadow-memory test backend and its kernels (shadow_backend.hpp).
#include "train/shadow_backend.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <wallfacer/train/cpu_step_kernels.hpp>

namespace wallfacer::test {

using runtime::Counts;
using runtime::ElemType;
using runtime::RequestId;

namespace {

constexpr size_t kRegionBytes = size_t(64) << 30;  // address space only: nothing is ever mapped in
constexpr size_t kGap = 4096;                      // between allocations, so an overrun lands nowhere

int64_t total(const Counts& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t(0));
}

}  // namespace

ShadowBackend::ShadowBackend(runtime::Backend& inner) : inner_(inner), region_bytes_(kRegionBytes) {
  void* p = mmap(nullptr, region_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("shadow backend: cannot reserve its address range");
  region_ = static_cast<char*>(p);
}

ShadowBackend::~ShadowBackend() {
  for (auto& [address, block] : blocks_)
    inner_.release(block.real);
  munmap(region_, region_bytes_);
}

void* ShadowBackend::real(const void* p, size_t bytes, const char* what) const {
  if (p == nullptr && bytes == 0) return nullptr;
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = blocks_.upper_bound(address);
  if (p != nullptr && it != blocks_.begin()) {
    --it;
    const size_t offset = address - it->first;
    if (offset <= it->second.bytes && bytes <= it->second.bytes - offset) {
      ++translations_;
      return static_cast<char*>(it->second.real) + offset;
    }
  }
  throw std::logic_error(
      fmt::format("rank {}: {} is handed {} bytes at {}, not inside one live allocation of the "
                  "backend's memory",
                  rank(), what, bytes, p));
}

void ShadowBackend::set_groups(const std::vector<CommGroup>& groups) {
  groups_ = groups;
  inner_.set_groups(groups);
}

int ShadowBackend::member_index(int group) const {
  const std::vector<int>& ranks = groups_.at(size_t(group)).ranks;
  return int(std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin());
}

void* ShadowBackend::allocate(size_t bytes) {
  const size_t at = (used_ + 255) / 256 * 256;
  if (at + bytes + kGap > region_bytes_) throw std::runtime_error("shadow backend: address range used up");
  used_ = at + bytes + kGap;
  char* shadow = region_ + at;
  blocks_[reinterpret_cast<uintptr_t>(shadow)] = {inner_.allocate(bytes), bytes};
  ++allocations_;
  live_bytes_ += int64_t(bytes);
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return shadow;
}

void ShadowBackend::release(void* data) {
  if (data == nullptr) return;
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(data));
  if (it == blocks_.end())
    throw std::logic_error(fmt::format("rank {}: release of {}, which the backend did not allocate", rank(), data));
  inner_.release(it->second.real);
  live_bytes_ -= int64_t(it->second.bytes);
  blocks_.erase(it);
}

void ShadowBackend::upload(void* dst, const void* host, size_t bytes) {
  inner_.upload(real(dst, bytes, "upload"), host, bytes);
}

void ShadowBackend::download(void* host, const void* src, size_t bytes) {
  inner_.download(host, real(src, bytes, "download"), bytes);
}

void ShadowBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                            size_t rows) {
  if (rows == 0 || row_bytes == 0) return;
  inner_.copy_2d(real(dst, (rows - 1) * dst_pitch + row_bytes, "copy_2d (destination)"), dst_pitch,
                 real(src, (rows - 1) * src_pitch + row_bytes, "copy_2d (source)"), src_pitch, row_bytes, rows);
}

void ShadowBackend::fill(void* dst, ElemType type, size_t count, double value) {
  inner_.fill(real(dst, count * elem_size(type), "fill"), type, count, value);
}

void ShadowBackend::accumulate(void* dst, const void* src, size_t count, ElemType type) {
  inner_.accumulate(real(dst, count * elem_size(type), "accumulate"), real(src, count * elem_size(type), "accumulate"),
                    count, type);
}

RequestId ShadowBackend::isend(int peer, int tag, const void* data, size_t bytes) {
  return inner_.isend(peer, tag, real(data, bytes, "isend"), bytes);
}

RequestId ShadowBackend::irecv(int peer, int tag, void* data, size_t bytes) {
  return inner_.irecv(peer, tag, real(data, bytes, "irecv"), bytes);
}

RequestId ShadowBackend::iallgatherv(int group, const void* send, int64_t send_count, void* recv,
                                     const Counts& recv_counts, ElemType type) {
  const size_t es = elem_size(type);
  return inner_.iallgatherv(group, real(send, size_t(send_count) * es, "all-gather (send)"), send_count,
                            real(recv, size_t(total(recv_counts)) * es, "all-gather (receive)"), recv_counts, type);
}

RequestId ShadowBackend::ialltoallv(int group, const void* send, const Counts& send_counts, void* recv,
                                    const Counts& recv_counts, ElemType type) {
  const size_t es = elem_size(type);
  return inner_.ialltoallv(group, real(send, size_t(total(send_counts)) * es, "all-to-all (send)"), send_counts,
                           real(recv, size_t(total(recv_counts)) * es, "all-to-all (receive)"), recv_counts, type);
}

RequestId ShadowBackend::ireduce_scatter(int group, const void* send, void* recv, const Counts& recv_counts,
                                         ElemType type) {
  const size_t es = elem_size(type);
  const size_t mine = size_t(recv_counts.at(size_t(member_index(group))));
  return inner_.ireduce_scatter(group, real(send, size_t(total(recv_counts)) * es, "reduce-scatter (send)"),
                                real(recv, mine * es, "reduce-scatter (receive)"), recv_counts, type);
}

RequestId ShadowBackend::iallreduce(int group, void* data, int64_t count, ElemType type) {
  return inner_.iallreduce(group, real(data, size_t(count) * elem_size(type), "all-reduce"), count, type);
}

// The attention kernels' operands: their start must be backend memory (their extents follow the
// executor's strides, which its own tests cover).
template <typename T>
void ShadowBackend::forward_impl(const kernels::QueryBlock<T>& q, const kernels::KeyBlock<T>& kv,
                                 const kernels::AttnShape& shape, T* acc_o, T* acc_lse, int64_t acc_row_stride,
                                 int64_t lse_stride) {
  const kernels::QueryBlock<T> rq{r(q.q, 1, "attention (q)"), q.pos, q.rows};
  const kernels::KeyBlock<T> rkv{r(kv.k, 1, "attention (k)"), r(kv.v, 1, "attention (v)"), kv.pos, kv.rows};
  inner_.attention_forward(rq, rkv, shape, r(acc_o, 1, "attention (o)"), r(acc_lse, 1, "attention (lse)"),
                           acc_row_stride, lse_stride);
}

template <typename T>
void ShadowBackend::backward_impl(const kernels::QueryBlock<T>& q, const kernels::KeyBlock<T>& kv,
                                  const kernels::BackwardInputs<T>& in, const kernels::AttnShape& shape, T* dq, T* dk,
                                  T* dv) {
  const kernels::QueryBlock<T> rq{r(q.q, 1, "attention backward (q)"), q.pos, q.rows};
  const kernels::KeyBlock<T> rkv{r(kv.k, 1, "attention backward (k)"), r(kv.v, 1, "attention backward (v)"), kv.pos,
                                 kv.rows};
  const kernels::BackwardInputs<T> rin{r(in.dO, 1, "attention backward (dO)"), r(in.lse, 1, "attention backward (lse)"),
                                       r(in.D, 1, "attention backward (D)"), in.lse_stride};
  inner_.attention_backward(rq, rkv, rin, shape, r(dq, 1, "attention backward (dq)"),
                            r(dk, 1, "attention backward (dk)"), r(dv, 1, "attention backward (dv)"));
}

void ShadowBackend::attention_forward(const kernels::QueryBlock<float>& q, const kernels::KeyBlock<float>& kv,
                                      const kernels::AttnShape& shape, float* acc_o, float* acc_lse,
                                      int64_t acc_row_stride, int64_t lse_stride) {
  forward_impl(q, kv, shape, acc_o, acc_lse, acc_row_stride, lse_stride);
}
void ShadowBackend::attention_forward(const kernels::QueryBlock<double>& q, const kernels::KeyBlock<double>& kv,
                                      const kernels::AttnShape& shape, double* acc_o, double* acc_lse,
                                      int64_t acc_row_stride, int64_t lse_stride) {
  forward_impl(q, kv, shape, acc_o, acc_lse, acc_row_stride, lse_stride);
}
void ShadowBackend::attention_backward(const kernels::QueryBlock<float>& q, const kernels::KeyBlock<float>& kv,
                                       const kernels::BackwardInputs<float>& in, const kernels::AttnShape& shape,
                                       float* dq, float* dk, float* dv) {
  backward_impl(q, kv, in, shape, dq, dk, dv);
}
void ShadowBackend::attention_backward(const kernels::QueryBlock<double>& q, const kernels::KeyBlock<double>& kv,
                                       const kernels::BackwardInputs<double>& in, const kernels::AttnShape& shape,
                                       double* dq, double* dk, double* dv) {
  backward_impl(q, kv, in, shape, dq, dk, dv);
}
void ShadowBackend::backward_prep(const float* o, const float* dO, int64_t rows, int heads, int head_dim,
                                  int64_t row_stride, float* D, int64_t lse_stride) {
  inner_.backward_prep(r(o, 1, "backward_prep (o)"), r(dO, 1, "backward_prep (dO)"), rows, heads, head_dim, row_stride,
                       r(D, 1, "backward_prep (D)"), lse_stride);
}
void ShadowBackend::backward_prep(const double* o, const double* dO, int64_t rows, int heads, int head_dim,
                                  int64_t row_stride, double* D, int64_t lse_stride) {
  inner_.backward_prep(r(o, 1, "backward_prep (o)"), r(dO, 1, "backward_prep (dO)"), rows, heads, head_dim, row_stride,
                       r(D, 1, "backward_prep (D)"), lse_stride);
}
void ShadowBackend::merge_partial(float* o_a, float* lse_a, const float* o_b, const float* lse_b, int64_t rows,
                                  int heads, int head_dim, int64_t row_stride, int64_t lse_stride) {
  inner_.merge_partial(r(o_a, 1, "merge (o)"), r(lse_a, 1, "merge (lse)"), r(o_b, 1, "merge (o)"),
                       r(lse_b, 1, "merge (lse)"), rows, heads, head_dim, row_stride, lse_stride);
}
void ShadowBackend::merge_partial(double* o_a, double* lse_a, const double* o_b, const double* lse_b, int64_t rows,
                                  int heads, int head_dim, int64_t row_stride, int64_t lse_stride) {
  inner_.merge_partial(r(o_a, 1, "merge (o)"), r(lse_a, 1, "merge (lse)"), r(o_b, 1, "merge (o)"),
                       r(lse_b, 1, "merge (lse)"), rows, heads, head_dim, row_stride, lse_stride);
}

// ---- the kernels ------------------------------------------------------------------------------

namespace {

template <typename T>
class ShadowKernels final : public runtime::StepKernels<T> {
 public:
  ShadowKernels(ShadowBackend& b, int64_t* calls) : b_(b), calls_(calls), cpu_(train::make_cpu_step_kernels<T>()) {}
  std::string name() const override { return cpu_->name() + " on shadow memory"; }

  void gemm(const T* a, bool ta, const T* b, bool tb, T* c, int64_t m, int64_t n, int64_t k, bool acc) override {
    cpu_->gemm(in(a, m * k, "gemm (a)"), ta, in(b, k * n, "gemm (b)"), tb, out(c, m * n, "gemm (c)"), m, n, k, acc);
  }
  void embedding_forward(const T* table, const T* pos_table, const int32_t* tokens, const int64_t* positions,
                         int64_t per_batch, T* x, int64_t rows, int64_t width) override {
    cpu_->embedding_forward(
        in(table, rows_of(tokens, rows) * width, "embedding (table)"),
        pos_table ? in(pos_table, rows_of(positions, per_batch) * width, "embedding (pos)") : nullptr, tokens,
        positions, per_batch, out(x, rows * width, "embedding (x)"), rows, width);
  }
  void embedding_backward(const T* dx, const int32_t* tokens, const int64_t* positions, int64_t per_batch, T* dtable,
                          T* dpos, int64_t rows, int64_t width) override {
    cpu_->embedding_backward(
        in(dx, rows * width, "embedding backward (dx)"), tokens, positions, per_batch,
        out(dtable, rows_of(tokens, rows) * width, "embedding backward (dtable)"),
        dpos ? out(dpos, rows_of(positions, per_batch) * width, "embedding backward (dpos)") : nullptr, rows, width);
  }
  void rms_norm_forward(const T* x, const T* gain, T* y, T* rstd, int64_t rows, int64_t width) override {
    cpu_->rms_norm_forward(in(x, rows * width, "rms norm (x)"), in(gain, width, "rms norm (gain)"),
                           out(y, rows * width, "rms norm (y)"), out(rstd, rows, "rms norm (rstd)"), rows, width);
  }
  void rms_norm_backward(const T* x, const T* gain, const T* rstd, const T* dy, T* dx, T* dgain, int64_t rows,
                         int64_t width) override {
    cpu_->rms_norm_backward(in(x, rows * width, "rms norm backward (x)"), in(gain, width, "rms norm backward (gain)"),
                            in(rstd, rows, "rms norm backward (rstd)"), in(dy, rows * width, "rms norm backward (dy)"),
                            out(dx, rows * width, "rms norm backward (dx)"),
                            out(dgain, width, "rms norm backward (dgain)"), rows, width);
  }
  void rotary(T* x, const int64_t* positions, int64_t per_batch, int64_t rows, int heads, int head_dim, double base,
              bool inverse) override {
    cpu_->rotary(out(x, rows * heads * head_dim, "rotary"), positions, per_batch, rows, heads, head_dim, base, inverse);
  }
  void add(const T* a, const T* b, T* o, int64_t count) override {
    cpu_->add(in(a, count, "add (a)"), in(b, count, "add (b)"), out(o, count, "add (out)"), count);
  }
  void gelu_forward(const T* u, T* h, int64_t count) override {
    cpu_->gelu_forward(in(u, count, "gelu (u)"), out(h, count, "gelu (h)"), count);
  }
  void gelu_backward(const T* u, const T* dh, T* du, int64_t count) override {
    cpu_->gelu_backward(in(u, count, "gelu backward (u)"), in(dh, count, "gelu backward (dh)"),
                        out(du, count, "gelu backward (du)"), count);
  }
  void swiglu_forward(const T* g, const T* u, T* h, int64_t count) override {
    cpu_->swiglu_forward(in(g, count, "swiglu (g)"), in(u, count, "swiglu (u)"), out(h, count, "swiglu (h)"), count);
  }
  void swiglu_backward(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t count) override {
    cpu_->swiglu_backward(in(g, count, "swiglu backward (g)"), in(u, count, "swiglu backward (u)"),
                          in(dh, count, "swiglu backward (dh)"), out(dg, count, "swiglu backward (dg)"),
                          out(du, count, "swiglu backward (du)"), count);
  }
  double cross_entropy(const T* logits, const int32_t* targets, const uint8_t* mask, double scale, T* dlogits,
                       int64_t rows, int64_t vocab, int64_t& correct) override {
    return cpu_->cross_entropy(in(logits, rows * vocab, "cross-entropy (logits)"), targets, mask, scale,
                               out(dlogits, rows * vocab, "cross-entropy (dlogits)"), rows, vocab, correct);
  }
  double sum_squares(const T* x, int64_t count) override {
    return cpu_->sum_squares(in(x, count, "sum of squares"), count);
  }
  void adamw(const runtime::AdamWStep& step, bool decay, T* params, const T* grads, T* m, T* v,
             int64_t count) override {
    cpu_->adamw(step, decay, out(params, count, "adamw (params)"), in(grads, count, "adamw (grads)"),
                out(m, count, "adamw (m)"), out(v, count, "adamw (v)"), count);
  }

 private:
  const T* in(const T* p, int64_t n, const char* what) {
    ++*calls_;
    return static_cast<const T*>(b_.real(p, size_t(n) * sizeof(T), what));
  }
  T* out(T* p, int64_t n, const char* what) { return const_cast<T*>(in(p, n, what)); }
  // Rows of a table indexed by `index` (host memory): its largest entry + 1.
  template <typename I>
  static int64_t rows_of(const I* index, int64_t count) {
    int64_t top = -1;
    for (int64_t i = 0; i < count; ++i)
      top = std::max<int64_t>(top, int64_t(index[i]));
    return top + 1;
  }

  ShadowBackend& b_;
  int64_t* calls_;
  std::unique_ptr<runtime::StepKernels<T>> cpu_;
};

}  // namespace

template <typename T>
std::unique_ptr<runtime::StepKernels<T>> make_shadow_kernels(ShadowBackend& backend, int64_t* calls) {
  return std::make_unique<ShadowKernels<T>>(backend, calls);
}

template std::unique_ptr<runtime::StepKernels<float>> make_shadow_kernels(ShadowBackend&, int64_t*);
template std::unique_ptr<runtime::StepKernels<double>> make_shadow_kernels(ShadowBackend&, int64_t*);

}  // namespace wallfacer::test
