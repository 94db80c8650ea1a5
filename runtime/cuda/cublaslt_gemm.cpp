// Row-major GEMMs through cuBLASLt (cublaslt_gemm.hpp).
#include "cublaslt_gemm.hpp"

#include <cublasLt.h>
#include <fmt/format.h>

#include "cuda_device_backend.hpp"

#define WF_CUBLAS_CHECK(call)                                                                                     \
  do {                                                                                                            \
    const cublasStatus_t wf_status_ = (call);                                                                     \
    if (wf_status_ != CUBLAS_STATUS_SUCCESS)                                                                      \
      ::wallfacer::runtime::cuda::throw_cuda(__FILE__, __LINE__, ::wallfacer::runtime::cuda::error_rank(), #call, \
                                             cublasLtGetStatusString(wf_status_));                                \
  } while (0)

namespace wallfacer::runtime::cuda {

ColumnMajorGemm column_major(const GemmShape& s) {
  ColumnMajorGemm g;
  g.m = s.n;
  g.n = s.m;
  g.k = s.k;
  // B row-major (k x n, or n x k when transposed) is Bᵀ column-major with the same leading size.
  g.transpose_first = s.transpose_b;
  g.rows_first = s.transpose_b ? s.k : s.n;
  g.cols_first = s.transpose_b ? s.n : s.k;
  g.ld_first = g.rows_first;
  g.transpose_second = s.transpose_a;
  g.rows_second = s.transpose_a ? s.m : s.k;
  g.cols_second = s.transpose_a ? s.k : s.m;
  g.ld_second = g.rows_second;
  g.ldc = s.n;
  return g;
}

namespace {

// 32 MiB: what cuBLAS's documentation recommends as the workspace on Hopper.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

cudaDataType_t data_type(GemmType t) {
  switch (t) {
    case GemmType::F32:
      return CUDA_R_32F;
    case GemmType::F64:
      return CUDA_R_64F;
    case GemmType::BF16:
      return CUDA_R_16BF;
    case GemmType::FP16:
      return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

}  // namespace

struct LtGemm::Cached {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool f64 = false;
  ~Cached() {  // not checked: a destructor must not throw
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (second) cublasLtMatrixLayoutDestroy(second);
    if (first) cublasLtMatrixLayoutDestroy(first);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

LtGemm::LtGemm(cudaStream_t stream) : stream_(stream) {
  cublasLtHandle_t handle = nullptr;
  WF_CUBLAS_CHECK(cublasLtCreate(&handle));
  handle_ = handle;
  WF_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);  // not checked: a destructor must not throw
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

LtGemm::Cached& LtGemm::plan(GemmType inputs, GemmType output, const GemmShape& shape, bool accumulate) {
  const Key key{int(inputs), int(output), shape.m, shape.n, shape.k, shape.transpose_a, shape.transpose_b, accumulate};
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  if (inputs == GemmType::F64 && output != GemmType::F64)
    throw CudaError(fmt::format("rank {}: an fp64 GEMM must write fp64", error_rank()));
  auto p = std::make_unique<Cached>();
  p->f64 = inputs == GemmType::F64;
  const ColumnMajorGemm g = column_major(shape);
  const cublasComputeType_t compute = p->f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  WF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, p->f64 ? CUDA_R_64F : CUDA_R_32F));
  const cublasOperation_t op_first = g.transpose_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.transpose_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  WF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  WF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  WF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->first, data_type(inputs), uint64_t(g.rows_first),
                                             uint64_t(g.cols_first), g.ld_first));
  WF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->second, data_type(inputs), uint64_t(g.rows_second),
                                             uint64_t(g.cols_second), g.ld_second));
  WF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, data_type(output), uint64_t(g.m), uint64_t(g.n), g.ldc));
  cublasLtMatmulPreference_t preference = nullptr;
  WF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = [&] {
    const cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                  &workspace_bytes_, sizeof(workspace_bytes_));
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    return cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->desc, p->first, p->second, p->c,
                                          p->c, preference, 1, &result, &found);
  }();
  cublasLtMatmulPreferenceDestroy(preference);
  WF_CUBLAS_CHECK(status);
  if (found == 0)
    throw CudaError(fmt::format("rank {}: cuBLASLt has no algorithm for a {} x {} x {} GEMM", error_rank(), shape.m,
                                shape.n, shape.k));
  p->algo = result.algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void LtGemm::run(GemmType inputs, GemmType output, const void* a, const void* b, void* c, const GemmShape& shape,
                 bool accumulate) {
  if (shape.m == 0 || shape.n == 0) return;
  const size_t out_size = output == GemmType::F64 ? 8 : output == GemmType::F32 ? 4 : 2;
  if (shape.k == 0) {  // cuBLASLt refuses k = 0; the product is zero
    if (!accumulate) WF_CUDA_CHECK(cudaMemsetAsync(c, 0, size_t(shape.m * shape.n) * out_size, stream_));
    return;
  }
  Cached& p = plan(inputs, output, shape, accumulate);
  const double alpha64 = 1, beta64 = accumulate ? 1 : 0;
  const float alpha32 = 1, beta32 = accumulate ? 1 : 0;
  const void* alpha = p.f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = p.f64 ? static_cast<const void*>(&beta64) : &beta32;
  // The column-major first operand is B, the second A.
  WF_CUBLAS_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.desc, alpha, b, p.first, a, p.second, beta,
                                 c, p.c, c, p.c, &p.algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace wallfacer::runtime::cuda
