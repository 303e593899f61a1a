// acme's GEMM entry point: row-major C = alpha * A @ B + beta * C through the
// vendor BLAS (OpenBLAS from the scipy-openblas32 wheel, symbols prefixed
// `scipy_`). Operands are strided matrix views; a view that is a row-major or a
// transposed (column-major) dense matrix goes to BLAS as is with the matching
// transpose flag, anything else is packed first.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace acme::kernels::nn {

template <class T>
struct Mat {
  const T* p;
  int64_t rows, cols;
  int64_t rs, cs;  // element strides of rows and columns
};

// Multiply-adds from which a GEMM may use several BLAS threads.
constexpr double kGemmThreadedMacs = 32.0 * 1024 * 1024;

namespace gemm_detail {

inline blasint to_blas(int64_t v, const char* op) {
  TORCH_CHECK(v <= std::numeric_limits<blasint>::max(), "acme: ", op,
              ": matrix dimension ", v, " exceeds the 32-bit BLAS limit");
  return static_cast<blasint>(v);
}

// Classifies a view as BLAS-ready: row-major (NoTrans) or column-major
// (Trans), with its leading dimension. Size-1 dims make their stride
// irrelevant, so they never force a copy.
template <class T>
inline bool blas_layout(const Mat<T>& m, CBLAS_TRANSPOSE* tr, int64_t* ld) {
  const bool row_ok = (m.cols <= 1 || m.cs == 1) &&
                      (m.rows <= 1 || m.rs >= std::max<int64_t>(1, m.cols));
  if (row_ok) {
    *tr = CblasNoTrans;
    *ld = (m.rows <= 1) ? std::max<int64_t>(1, m.cols) : m.rs;
    return true;
  }
  const bool col_ok = (m.rows <= 1 || m.rs == 1) &&
                      (m.cols <= 1 || m.cs >= std::max<int64_t>(1, m.rows));
  if (col_ok) {
    *tr = CblasTrans;
    *ld = (m.cols <= 1) ? std::max<int64_t>(1, m.rows) : m.cs;
    return true;
  }
  return false;
}

template <class T>
inline void pack(const Mat<T>& m, std::vector<T>& buf) {
  buf.resize(static_cast<size_t>(m.rows * m.cols));
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) buf[i * m.cols + j] = m.p[i * m.rs + j * m.cs];
}

// Threads for a large GEMM: BLAS's own count (OPENBLAS_NUM_THREADS or the
// cores), capped by torch's intra-op thread setting so torch.set_num_threads
// governs acme's kernels as it governs CPU ones.
inline int default_threads() {
  static const int blas_max = scipy_openblas_get_num_threads();
  return std::max(1, std::min(blas_max, at::get_num_threads()));
}

// Sets BLAS's (process-wide) thread count when it differs from the last one
// set here; the call is cheap but not free, and most calls repeat the count.
inline void use_threads(int n) {
  static std::atomic<int> current{-1};
  if (current.exchange(n, std::memory_order_relaxed) != n) scipy_openblas_set_num_threads(n);
}

}  // namespace gemm_detail

// How gemm() treats BLAS's process-wide thread count.
enum class BlasThreads {
  kBySize,  // sets it per call: 1 below kGemmThreadedMacs, else default_threads()
  // Leaves it as it is: for GEMMs run concurrently on several compute units.
  // Their caller sets 1 (use_threads(1)) from its own thread before the
  // parallel loop; a unit setting the count would change it under another
  // unit's running BLAS call.
  kAsSet,
};

// C (m x n, row stride ldc, unit column stride) = alpha * A (m x k) @ B (k x n)
// + beta * C. beta == 0 ignores C's old contents (NaN included), as torch does.
template <class T>
inline void gemm(const char* op, Mat<T> a, Mat<T> b, T alpha, T beta, T* c, int64_t ldc,
                 BlasThreads threads = BlasThreads::kBySize) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  TORCH_CHECK(b.rows == k, "acme: ", op, ": inner dimensions differ (", k, " vs ", b.rows, ")");
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) {
    // BLAS would still read A and B; the result is just beta * C.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = (beta == T(0)) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  std::vector<T> abuf, bbuf;
  CBLAS_TRANSPOSE ta, tb;
  int64_t lda, ldb;
  if (!gemm_detail::blas_layout(a, &ta, &lda)) {
    gemm_detail::pack(a, abuf);
    a = Mat<T>{abuf.data(), m, k, k, 1};
    ta = CblasNoTrans;
    lda = std::max<int64_t>(1, k);
  }
  if (!gemm_detail::blas_layout(b, &tb, &ldb)) {
    gemm_detail::pack(b, bbuf);
    b = Mat<T>{bbuf.data(), k, n, n, 1};
    tb = CblasNoTrans;
    ldb = std::max<int64_t>(1, n);
  }
  using gemm_detail::to_blas;
  const blasint M = to_blas(m, op), N = to_blas(n, op), K = to_blas(k, op);
  const blasint LDA = to_blas(lda, op), LDB = to_blas(ldb, op);
  const blasint LDC = to_blas(std::max<int64_t>(ldc, 1), op);
  // Small products run on the calling thread only: waking BLAS worker threads
  // costs more than it saves there, and on a busy machine their spin-waiting
  // steals the core the caller needs (measured: 10-50x slowdowns for conv-size
  // GEMMs under load). Large products use BLAS's default thread count.
  if (threads == BlasThreads::kBySize) {
    const bool single = static_cast<double>(m) * n * k < kGemmThreadedMacs;
    gemm_detail::use_threads(single ? 1 : gemm_detail::default_threads());
  }
  if constexpr (std::is_same_v<T, float>) {
    scipy_cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a.p, LDA, b.p, LDB, beta, c, LDC);
  } else {
    scipy_cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a.p, LDA, b.p, LDB, beta, c, LDC);
  }
}

}  // namespace acme::kernels::nn
