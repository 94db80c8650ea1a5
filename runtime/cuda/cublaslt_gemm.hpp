// Internal to the CUDA backend: row-major matrix products through cuBLASLt, the GEMMs of the
// whole-step program. Inputs in fp32, fp64, bf16 or fp16; accumulation in fp32 (fp64 for fp64
// inputs; fp32 inputs run in true fp32, not TF32, so they match the CPU); the output in fp32 or
// the inputs' type. One LtGemm per rank: its handle, a workspace and the algorithms chosen per
// shape. Every cuBLASLt call is checked, a failure naming the file, line and rank. The library is
// opened on first use, not linked (cublaslt_gemm.cpp says why).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace wallfacer::runtime::cuda {

enum class GemmType { F32, F64, BF16, FP16 };

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
};

// The column-major cuBLASLt problem of a row-major one: C = op(A) op(B) row-major is
// Cᵀ = op(B)ᵀ op(A)ᵀ column-major, so the operands swap and m and n exchange. Host-side and
// tested without a GPU.
struct ColumnMajorGemm {
  int64_t m = 0, n = 0, k = 0;  // of the column-major problem
  bool transpose_first = false, transpose_second = false;
  int64_t rows_first = 0, cols_first = 0, ld_first = 0;     // the stored first operand (B)
  int64_t rows_second = 0, cols_second = 0, ld_second = 0;  // the stored second operand (A)
  int64_t ldc = 0;
};
ColumnMajorGemm column_major(const GemmShape& shape);

// The version of the cuBLASLt library the GEMMs use (cublasLtGetVersion), opening it on the first
// call as the first LtGemm does (no GPU needed); throws CudaError when it cannot be opened.
size_t cublaslt_version();

class LtGemm {
 public:
  explicit LtGemm(cudaStream_t stream);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // C[m x n] (+)= op(A) op(B), row-major, A stored m x k (k x m when transposed), B k x n (n x k).
  // `inputs` is the type of A and B, `output` that of C.
  void run(GemmType inputs, GemmType output, const void* a, const void* b, void* c, const GemmShape& shape,
           bool accumulate);

 private:
  struct Cached;
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool, bool>;
  Cached& plan(GemmType inputs, GemmType output, const GemmShape& shape, bool accumulate);

  cudaStream_t stream_;
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Cached>> plans_;
};

}  // namespace wallfacer::runtime::cuda
