// The row-major to column-major mapping of the cuBLASLt GEMMs (column_major), without a GPU: a
// naive column-major GEMM (BLAS's definition: op(X) read from the stored matrix with its leading
// dimension) run on the mapped problem must give the naive row-major product, for every
// transpose pair and non-square shapes; and the library opens on first use.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include <cublas_api.h>

#include "cublaslt_gemm.hpp"

namespace wallfacer::testing {
namespace {

using runtime::cuda::column_major;
using runtime::cuda::GemmShape;

// C (col-major, m x n, ld ldc) = op(X) op(Y), X stored rows_x x cols_x col-major with ld_x.
void naive_column_major(const runtime::cuda::ColumnMajorGemm& g, const std::vector<double>& x,
                        const std::vector<double>& y, std::vector<double>& c) {
  auto at = [](const std::vector<double>& v, int64_t ld, int64_t r, int64_t col) { return v[size_t(col * ld + r)]; };
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const double a = g.transpose_first ? at(x, g.ld_first, p, i) : at(x, g.ld_first, i, p);
        const double b = g.transpose_second ? at(y, g.ld_second, j, p) : at(y, g.ld_second, p, j);
        sum += a * b;
      }
      c[size_t(j * g.ldc + i)] = sum;
    }
}

TEST(CublasLtMapping, RowMajorProductsForEveryTransposePair) {
  const int64_t m = 5, n = 3, k = 7;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    std::vector<double> a(size_t(m * k)), b(size_t(k * n));
    for (double& v : a)
      v = u(rng);
    for (double& v : b)
      v = u(rng);
    // Row-major reference: A stored m x k (k x m when transposed), B k x n (n x k).
    std::vector<double> expected(size_t(m * n), 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p)
          expected[size_t(i * n + j)] +=
              (ta ? a[size_t(p * m + i)] : a[size_t(i * k + p)]) * (tb ? b[size_t(j * k + p)] : b[size_t(p * n + j)]);
    const auto g = column_major(GemmShape{m, n, k, ta, tb});
    EXPECT_EQ(g.m, n);
    EXPECT_EQ(g.n, m);
    EXPECT_EQ(g.rows_first * g.cols_first, n * k);
    EXPECT_EQ(g.rows_second * g.cols_second, m * k);
    std::vector<double> c(size_t(m * n), 0);
    naive_column_major(g, b, a, c);  // the first operand is B, the second A
    for (size_t i = 0; i < c.size(); ++i)
      EXPECT_NEAR(c[i], expected[i], 1e-12) << "transpose_a " << ta << " transpose_b " << tb << " element " << i;
  }
}

// cuBLASLt is opened on first use, not linked (its start-up cost every command paid): opening it
// must find the library of the toolkit the backend was compiled against, without a GPU.
TEST(CublasLt, OpensTheLibraryOfItsToolkitOnFirstUse) {
  const size_t version = runtime::cuda::cublaslt_version();
  EXPECT_EQ(version / 10000, size_t(CUBLAS_VER_MAJOR)) << "cuBLASLt version " << version;
  EXPECT_EQ(runtime::cuda::cublaslt_version(), version);  // opened once
}

}  // namespace
}  // namespace wallfacer::testing
