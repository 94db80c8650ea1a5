// The whole-step program's pointwise kernels on the device (step_kernels_device.hpp). Elementwise
// kernels use grid-stride loops; row kernels (RMS norm, cross-entropy) one block per row with a
// block reduction in double; column sums (the norm gain's gradient) one thread per column.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "step_kernels_device.hpp"

namespace wallfacer::runtime::cuda {

[[noreturn]] void throw_cuda(const char* file, int line, int rank, const char* call, const std::string& message);
int& error_rank();

namespace {

// A launch's configuration error, named with the kernel, file, line and rank.
#define WF_STEP_LAUNCHED(name)                                                                             \
  do {                                                                                                     \
    const cudaError_t wf_status_ = cudaGetLastError();                                                     \
    if (wf_status_ != cudaSuccess)                                                                         \
      throw_cuda(__FILE__, __LINE__, error_rank(), name " kernel launch", cudaGetErrorString(wf_status_)); \
  } while (0)

constexpr int kThreads = 256;
constexpr double kNormEps = 1e-5;
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

unsigned blocks_for(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return unsigned(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

#define WF_GRID_STRIDE(i, count) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); i += int64_t(gridDim.x) * blockDim.x)

// Sum over the block (blockDim.x == kThreads); every thread gets the result.
__device__ double block_sum(double value) {
  __shared__ double partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // partial may still be read from a previous call
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < kThreads / 32; ++w)
    total += partial[w];
  return total;
}

template <typename T>
__global__ void embedding_forward_kernel(const T* table, const T* pos_table, const int32_t* tokens,
                                         const int64_t* positions, int64_t rows_per_batch, T* x, int64_t rows,
                                         int64_t width) {
  WF_GRID_STRIDE(i, rows * width) {
    const int64_t r = i / width, j = i % width;
    T value = table[int64_t(tokens[r]) * width + j];
    if (pos_table) value += pos_table[positions[r % rows_per_batch] * width + j];
    x[i] = value;
  }
}

template <typename T>
__global__ void embedding_backward_kernel(const T* dx, const int32_t* tokens, const int64_t* positions,
                                          int64_t rows_per_batch, T* dtable, T* dpos_table, int64_t rows,
                                          int64_t width) {
  WF_GRID_STRIDE(i, rows * width) {
    const int64_t r = i / width, j = i % width;
    atomicAdd(dtable + int64_t(tokens[r]) * width + j, dx[i]);
    if (dpos_table) atomicAdd(dpos_table + positions[r % rows_per_batch] * width + j, dx[i]);
  }
}

template <typename T>
__global__ void rms_norm_forward_kernel(const T* x, const T* gain, T* y, T* rstd, int64_t width) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * width;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x)
    sum += double(xr[j]) * double(xr[j]);
  sum = block_sum(sum);
  const T inv = T(1.0 / sqrt(sum / double(width) + kNormEps));
  if (threadIdx.x == 0) rstd[r] = inv;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x)
    y[r * width + j] = xr[j] * inv * gain[j];
}

template <typename T>
__global__ void rms_norm_backward_rows_kernel(const T* x, const T* gain, const T* rstd, const T* dy, T* dx,
                                              int64_t width) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * width;
  const T* dyr = dy + r * width;
  double dot = 0;  // sum_j gain_j dy_j x_j
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x)
    dot += double(gain[j]) * double(dyr[j]) * double(xr[j]);
  dot = block_sum(dot);
  const T inv = rstd[r];
  const T coeff = T(dot / double(width)) * inv * inv * inv;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x)
    dx[r * width + j] += inv * gain[j] * dyr[j] - coeff * xr[j];
}

// dgain[j] += sum_r dy[r][j] x[r][j] rstd[r], one thread per column (coalesced over j).
template <typename T>
__global__ void rms_norm_backward_gain_kernel(const T* x, const T* rstd, const T* dy, T* dgain, int64_t rows,
                                              int64_t width) {
  WF_GRID_STRIDE(j, width) {
    T sum = 0;
    for (int64_t r = 0; r < rows; ++r)
      sum += dy[r * width + j] * x[r * width + j] * rstd[r];
    dgain[j] += sum;
  }
}

template <typename T>
__global__ void rotary_kernel(T* x, const int64_t* positions, int64_t rows_per_batch, int64_t rows, int heads,
                              int head_dim, double base, bool inverse) {
  const int pairs = head_dim / 2;
  WF_GRID_STRIDE(i, rows * heads * pairs) {
    const int p = int(i % pairs);
    const int64_t rh = i / pairs;  // row * heads + head
    const int64_t r = rh / heads;
    const double angle = double(positions[r % rows_per_batch]) * pow(base, -2.0 * p / head_dim);
    const T c = T(cos(angle)), s = T(inverse ? -sin(angle) : sin(angle));
    T* q = x + rh * head_dim + 2 * p;
    const T a = q[0], b = q[1];
    q[0] = a * c - b * s;
    q[1] = a * s + b * c;
  }
}

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t count) {
  WF_GRID_STRIDE(i, count) {
    out[i] = a[i] + b[i];
  }
}

template <typename T>
__global__ void gelu_forward_kernel(const T* u, T* h, int64_t count) {
  WF_GRID_STRIDE(i, count) {
    const double x = u[i];
    h[i] = T(0.5 * x * (1.0 + tanh(kGeluScale * (x + kGeluCubic * x * x * x))));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(const T* u, const T* dh, T* du, int64_t count) {
  WF_GRID_STRIDE(i, count) {
    const double x = u[i];
    const double t = tanh(kGeluScale * (x + kGeluCubic * x * x * x));
    const double grad = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluScale * (1.0 + 3.0 * kGeluCubic * x * x);
    du[i] = T(double(dh[i]) * grad);
  }
}

template <typename T>
__global__ void swiglu_forward_kernel(const T* g, const T* u, T* h, int64_t count) {
  WF_GRID_STRIDE(i, count) {
    const double x = g[i];
    h[i] = T(x / (1.0 + exp(-x)) * double(u[i]));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t count) {
  WF_GRID_STRIDE(i, count) {
    const double x = g[i];
    const double sig = 1.0 / (1.0 + exp(-x));
    const double d = dh[i], up = u[i];
    du[i] = T(d * x * sig);
    dg[i] = T(d * up * sig * (1.0 + x * (1.0 - sig)));
  }
}

// The first largest logit of a row: (value, index), larger value wins, lower index on ties.
__device__ void better(double& value, int64_t& index, double other_value, int64_t other_index) {
  if (other_value > value || (other_value == value && other_index < index)) {
    value = other_value;
    index = other_index;
  }
}

template <typename T>
__global__ void cross_entropy_kernel(const T* logits, const int32_t* targets, const uint8_t* mask, double scale,
                                     T* dlogits, double* loss, int32_t* correct, int64_t vocab) {
  const int64_t r = blockIdx.x;
  const T* row = logits + r * vocab;
  T* drow = dlogits + r * vocab;
  if (!mask[r]) {
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      drow[j] = T(0);
    if (threadIdx.x == 0) {
      loss[r] = 0;
      correct[r] = 0;
    }
    return;
  }
  double top = -INFINITY;
  int64_t best = vocab;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
    better(top, best, double(row[j]), j);
  for (int offset = 16; offset > 0; offset /= 2)
    better(top, best, __shfl_down_sync(0xffffffffu, top, offset), __shfl_down_sync(0xffffffffu, best, offset));
  __shared__ double tops[kThreads / 32];
  __shared__ int64_t bests[kThreads / 32];
  if (threadIdx.x % 32 == 0) {
    tops[threadIdx.x / 32] = top;
    bests[threadIdx.x / 32] = best;
  }
  __syncthreads();
  top = tops[0];
  best = bests[0];
  for (int w = 1; w < kThreads / 32; ++w)
    better(top, best, tops[w], bests[w]);
  double sum = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
    sum += exp(double(row[j]) - top);
  sum = block_sum(sum);
  const double lse = top + log(sum);
  const int32_t target = targets[r];
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
    drow[j] = T(scale * exp(double(row[j]) - lse));
  __syncthreads();
  if (threadIdx.x == 0) {
    drow[target] -= T(scale);
    loss[r] = lse - double(row[target]);
    correct[r] = best == target ? 1 : 0;
  }
}

template <typename T>
__global__ void sum_squares_kernel(const T* x, int64_t count, double* sum) {
  double local = 0;
  WF_GRID_STRIDE(i, count) {
    local += double(x[i]) * double(x[i]);
  }
  local = block_sum(local);
  if (threadIdx.x == 0) atomicAdd(sum, local);
}

// The arithmetic of the CPU's AdamW (cpu_step_kernels.cpp): moments in T, the step in double.
template <typename T>
__global__ void adamw_kernel(T* params, const T* grads, T* m, T* v, int64_t count, double lr, double grad_scale,
                             double beta1, double beta2, double eps, double weight_decay, double c1, double c2) {
  WF_GRID_STRIDE(i, count) {
    const T g = T(double(grads[i]) * grad_scale);
    m[i] = T(beta1) * m[i] + T(1 - beta1) * g;
    v[i] = T(beta2) * v[i] + T(1 - beta2) * g * g;
    const double update = (double(m[i]) / c1) / (sqrt(double(v[i]) / c2) + eps);
    params[i] = T(double(params[i]) - lr * (update + weight_decay * double(params[i])));
  }
}

}  // namespace

template <typename T>
void launch_embedding_forward(const T* table, const T* pos_table, const int32_t* tokens, const int64_t* positions,
                              int64_t rows_per_batch, T* x, int64_t rows, int64_t width, cudaStream_t stream) {
  if (rows * width == 0) return;
  embedding_forward_kernel<T><<<blocks_for(rows * width), kThreads, 0, stream>>>(table, pos_table, tokens, positions,
                                                                                 rows_per_batch, x, rows, width);
  WF_STEP_LAUNCHED("embedding forward");
}

template <typename T>
void launch_embedding_backward(const T* dx, const int32_t* tokens, const int64_t* positions, int64_t rows_per_batch,
                               T* dtable, T* dpos_table, int64_t rows, int64_t width, cudaStream_t stream) {
  if (rows * width == 0) return;
  embedding_backward_kernel<T><<<blocks_for(rows * width), kThreads, 0, stream>>>(dx, tokens, positions, rows_per_batch,
                                                                                  dtable, dpos_table, rows, width);
  WF_STEP_LAUNCHED("embedding backward");
}

template <typename T>
void launch_rms_norm_forward(const T* x, const T* gain, T* y, T* rstd, int64_t rows, int64_t width,
                             cudaStream_t stream) {
  if (rows == 0) return;
  rms_norm_forward_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(x, gain, y, rstd, width);
  WF_STEP_LAUNCHED("rms norm forward");
}

template <typename T>
void launch_rms_norm_backward(const T* x, const T* gain, const T* rstd, const T* dy, T* dx, T* dgain, int64_t rows,
                              int64_t width, cudaStream_t stream) {
  if (rows == 0) return;
  rms_norm_backward_rows_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(x, gain, rstd, dy, dx, width);
  WF_STEP_LAUNCHED("rms norm backward");
  rms_norm_backward_gain_kernel<T><<<blocks_for(width), kThreads, 0, stream>>>(x, rstd, dy, dgain, rows, width);
  WF_STEP_LAUNCHED("rms norm gain backward");
}

template <typename T>
void launch_rotary(T* x, const int64_t* positions, int64_t rows_per_batch, int64_t rows, int heads, int head_dim,
                   double base, bool inverse, cudaStream_t stream) {
  const int64_t count = rows * heads * (head_dim / 2);
  if (count == 0) return;
  rotary_kernel<T>
      <<<blocks_for(count), kThreads, 0, stream>>>(x, positions, rows_per_batch, rows, heads, head_dim, base, inverse);
  WF_STEP_LAUNCHED("rotary");
}

#define WF_ELEMENTWISE_LAUNCHER(name, label, params, args)             \
  template <typename T>                                                \
  void launch_##name params {                                          \
    if (count == 0) return;                                            \
    name##_kernel<T><<<blocks_for(count), kThreads, 0, stream>>> args; \
    WF_STEP_LAUNCHED(label);                                           \
  }
WF_ELEMENTWISE_LAUNCHER(add, "add", (const T* a, const T* b, T* out, int64_t count, cudaStream_t stream),
                        (a, b, out, count))
WF_ELEMENTWISE_LAUNCHER(gelu_forward, "gelu forward", (const T* u, T* h, int64_t count, cudaStream_t stream),
                        (u, h, count))
WF_ELEMENTWISE_LAUNCHER(gelu_backward, "gelu backward",
                        (const T* u, const T* dh, T* du, int64_t count, cudaStream_t stream), (u, dh, du, count))
WF_ELEMENTWISE_LAUNCHER(swiglu_forward, "swiglu forward",
                        (const T* g, const T* u, T* h, int64_t count, cudaStream_t stream), (g, u, h, count))
WF_ELEMENTWISE_LAUNCHER(swiglu_backward, "swiglu backward",
                        (const T* g, const T* u, const T* dh, T* dg, T* du, int64_t count, cudaStream_t stream),
                        (g, u, dh, dg, du, count))
WF_ELEMENTWISE_LAUNCHER(sum_squares, "sum of squares", (const T* x, int64_t count, double* sum, cudaStream_t stream),
                        (x, count, sum))
#undef WF_ELEMENTWISE_LAUNCHER

template <typename T>
void launch_cross_entropy(const T* logits, const int32_t* targets, const uint8_t* mask, double scale, T* dlogits,
                          double* loss, int32_t* correct, int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_kernel<T>
      <<<unsigned(rows), kThreads, 0, stream>>>(logits, targets, mask, scale, dlogits, loss, correct, vocab);
  WF_STEP_LAUNCHED("cross entropy");
}

template <typename T>
void launch_adamw(T* params, const T* grads, T* m, T* v, int64_t count, double lr, double grad_scale, double beta1,
                  double beta2, double eps, double weight_decay, double c1, double c2, cudaStream_t stream) {
  if (count == 0) return;
  adamw_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(params, grads, m, v, count, lr, grad_scale, beta1, beta2,
                                                              eps, weight_decay, c1, c2);
  WF_STEP_LAUNCHED("adamw");
}

#define WF_STEP_INSTANTIATE(T)                                                                                         \
  template void launch_embedding_forward<T>(const T*, const T*, const int32_t*, const int64_t*, int64_t, T*, int64_t,  \
                                            int64_t, cudaStream_t);                                                    \
  template void launch_embedding_backward<T>(const T*, const int32_t*, const int64_t*, int64_t, T*, T*, int64_t,       \
                                             int64_t, cudaStream_t);                                                   \
  template void launch_rms_norm_forward<T>(const T*, const T*, T*, T*, int64_t, int64_t, cudaStream_t);                \
  template void launch_rms_norm_backward<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t,          \
                                            cudaStream_t);                                                             \
  template void launch_rotary<T>(T*, const int64_t*, int64_t, int64_t, int, int, double, bool, cudaStream_t);          \
  template void launch_add<T>(const T*, const T*, T*, int64_t, cudaStream_t);                                          \
  template void launch_gelu_forward<T>(const T*, T*, int64_t, cudaStream_t);                                           \
  template void launch_gelu_backward<T>(const T*, const T*, T*, int64_t, cudaStream_t);                                \
  template void launch_swiglu_forward<T>(const T*, const T*, T*, int64_t, cudaStream_t);                               \
  template void launch_swiglu_backward<T>(const T*, const T*, const T*, T*, T*, int64_t, cudaStream_t);                \
  template void launch_cross_entropy<T>(const T*, const int32_t*, const uint8_t*, double, T*, double*, int32_t*,       \
                                        int64_t, int64_t, cudaStream_t);                                               \
  template void launch_sum_squares<T>(const T*, int64_t, double*, cudaStream_t);                                       \
  template void launch_adamw<T>(T*, const T*, T*, T*, int64_t, double, double, double, double, double, double, double, \
                                double, cudaStream_t);
WF_STEP_INSTANTIATE(float)
WF_STEP_INSTANTIATE(double)
#undef WF_STEP_INSTANTIATE

}  // namespace wallfacer::runtime::cuda
