// Row-major GEMMs through cuBLASLt (cublaslt_gemm.hpp).
#include "cublaslt_gemm.hpp"

#include <cublasLt.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <filesystem>
#include <string>

#include "cuda_device_backend.hpp"

// Calls go through lt() (the library opened on first use); the status text too.
#define WF_CUBLAS_CHECK(call)                                                                                     \
  do {                                                                                                            \
    const cublasStatus_t wf_status_ = (call);                                                                     \
    if (wf_status_ != CUBLAS_STATUS_SUCCESS)                                                                      \
      ::wallfacer::runtime::cuda::throw_cuda(__FILE__, __LINE__, ::wallfacer::runtime::cuda::error_rank(), #call, \
                                             lt().status_string(wf_status_));                                     \
  } while (0)

namespace wallfacer::runtime::cuda {

namespace {

// cuBLASLt is opened when the first LtGemm is made, not linked: the library's static initialisers
// took about 0.28 s of every process start (perf on `wallfacer --help`: three quarters of its
// 0.38 s), which every command paid, `plan` included, though only the GPU trainer runs GEMMs.
struct LtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtGetStatusString) status_string = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set_attribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtGetVersion) version = nullptr;
};

const std::string& cublaslt_file() {
  static const std::string name = fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR);
  return name;
}

// The loader's search (LD_LIBRARY_PATH, the binary's run path, the system's), then the folder
// of the CUDA runtime this binary uses, where a toolkit keeps cuBLASLt too.
void* open_cublaslt() {
  if (void* handle = dlopen(cublaslt_file().c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string searched = dlerror();
  Dl_info runtime{};
  using Malloc = cudaError_t (*)(void**, size_t);
  if (dladdr(reinterpret_cast<void*>(static_cast<Malloc>(&cudaMalloc)), &runtime) != 0 && runtime.dli_fname) {
    const std::string beside = (std::filesystem::path(runtime.dli_fname).parent_path() / cublaslt_file()).string();
    if (void* handle = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  }
  throw CudaError(
      fmt::format("rank {}: cannot open {} (cuBLASLt, for the step's GEMMs; it comes with the CUDA "
                  "toolkit): {}",
                  error_rank(), cublaslt_file(), searched));
}

template <typename Function>
void resolve(void* library, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, symbol));
  if (function == nullptr) throw CudaError(fmt::format("rank {}: {} has no {}", error_rank(), cublaslt_file(), symbol));
}

LtApi load_cublaslt() {
  void* library = open_cublaslt();  // kept open for the process's life
  LtApi api;
  resolve(library, "cublasLtCreate", api.create);
  resolve(library, "cublasLtDestroy", api.destroy);
  resolve(library, "cublasLtGetStatusString", api.status_string);
  resolve(library, "cublasLtMatmul", api.matmul);
  resolve(library, "cublasLtMatmulAlgoGetHeuristic", api.algo_get_heuristic);
  resolve(library, "cublasLtMatmulDescCreate", api.desc_create);
  resolve(library, "cublasLtMatmulDescDestroy", api.desc_destroy);
  resolve(library, "cublasLtMatmulDescSetAttribute", api.desc_set_attribute);
  resolve(library, "cublasLtMatmulPreferenceCreate", api.preference_create);
  resolve(library, "cublasLtMatmulPreferenceDestroy", api.preference_destroy);
  resolve(library, "cublasLtMatmulPreferenceSetAttribute", api.preference_set_attribute);
  resolve(library, "cublasLtMatrixLayoutCreate", api.layout_create);
  resolve(library, "cublasLtMatrixLayoutDestroy", api.layout_destroy);
  resolve(library, "cublasLtGetVersion", api.version);
  return api;
}

const LtApi& lt() {
  static const LtApi api = load_cublaslt();  // a throw leaves it to the next call
  return api;
}

}  // namespace

size_t cublaslt_version() {
  return lt().version();
}

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
    if (c) lt().layout_destroy(c);
    if (second) lt().layout_destroy(second);
    if (first) lt().layout_destroy(first);
    if (desc) lt().desc_destroy(desc);
  }
};

LtGemm::LtGemm(cudaStream_t stream) : stream_(stream) {
  cublasLtHandle_t handle = nullptr;
  WF_CUBLAS_CHECK(lt().create(&handle));
  handle_ = handle;
  WF_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);  // not checked: a destructor must not throw
  if (handle_) lt().destroy(static_cast<cublasLtHandle_t>(handle_));
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
  WF_CUBLAS_CHECK(lt().desc_create(&p->desc, compute, p->f64 ? CUDA_R_64F : CUDA_R_32F));
  const cublasOperation_t op_first = g.transpose_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.transpose_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  WF_CUBLAS_CHECK(lt().desc_set_attribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  WF_CUBLAS_CHECK(lt().desc_set_attribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  WF_CUBLAS_CHECK(
      lt().layout_create(&p->first, data_type(inputs), uint64_t(g.rows_first), uint64_t(g.cols_first), g.ld_first));
  WF_CUBLAS_CHECK(
      lt().layout_create(&p->second, data_type(inputs), uint64_t(g.rows_second), uint64_t(g.cols_second), g.ld_second));
  WF_CUBLAS_CHECK(lt().layout_create(&p->c, data_type(output), uint64_t(g.m), uint64_t(g.n), g.ldc));
  cublasLtMatmulPreference_t preference = nullptr;
  WF_CUBLAS_CHECK(lt().preference_create(&preference));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = [&] {
    const cublasStatus_t s = lt().preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes_, sizeof(workspace_bytes_));
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    return lt().algo_get_heuristic(static_cast<cublasLtHandle_t>(handle_), p->desc, p->first, p->second, p->c, p->c,
                                   preference, 1, &result, &found);
  }();
  lt().preference_destroy(preference);
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
  WF_CUBLAS_CHECK(lt().matmul(static_cast<cublasLtHandle_t>(handle_), p.desc, alpha, b, p.first, a, p.second, beta, c,
                              p.c, c, p.c, &p.algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace wallfacer::runtime::cuda
