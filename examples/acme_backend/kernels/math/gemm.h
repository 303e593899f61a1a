// acme's GEMM entry point: row-major C = alpha * A @ B + beta * C. float32 on
// an AVX-512 host runs acme's own kernel (sgemm.h), which reads any strided
// view, unless C has a side shorter than kSgemmMinSide; the rest goes to the
// vendor BLAS (OpenBLAS from the scipy-openblas32 wheel, symbols prefixed
// `scipy_`). Operands are strided matrix views; for
// BLAS, a view that is a row-major or a transposed (column-major) dense matrix
// goes as is with the matching transpose flag, anything else is packed first.
#pragma once

#include <c10/util/Exception.h>

#include <cblas.h>

#include "kernel_lib/parallel.h"
#include "sgemm.h"

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

// Below kGemmThreadedMacs BLAS runs single-threaded (see gemm()); from
// kGemmSplitMacs on, gemm() cuts C into blocks instead and runs one
// single-threaded BLAS call per block on acme's compute units
// (kernel_lib/parallel.h). A block does at least kGemmBlockMacs multiply-adds
// (a unit's wake-up must pay) and a product at most kGemmMaxBlocks blocks
// (enough to balance a few units; each block repacks the operand it shares).
constexpr double kGemmSplitMacs = 2.0 * 1024 * 1024;
constexpr double kGemmBlockMacs = 1.0 * 1024 * 1024;
constexpr int64_t kGemmMaxBlocks = 8;
static_assert(kGemmSplitMacs >= 2 * kGemmBlockMacs, "a cut product has at least 2 blocks");
// Block lengths are multiples of this, so blocks hold whole tiles of
// OpenBLAS's kernels. Measured with its Haswell kernels: C cut into blocks of
// a multiple of 12 rows has the same bits as from one call (float32 and
// float64; float64 also when cut in columns), while float32 cut in columns
// differs in the last bits near the cuts (OpenBLAS tiles that side by the
// whole width). Either way the bits depend on the cut only, not on the units.
constexpr int64_t kGemmBlockAlign = 24;
static_assert(kGemmBlockAlign % kSgemmMr == 0, "row blocks hold whole tiles of acme's sgemm");

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

// BLAS's own thread count (OPENBLAS_NUM_THREADS or the cores), read once before
// use_threads() first changes it: OpenBLAS reports the count last set, so read
// later, after a small GEMM had set 1, it would say 1 and no GEMM would ever be
// threaded again (a ResNet-18 step runs a small conv GEMM first).
inline int blas_max_threads() {
  static const int n = std::max(1, scipy_openblas_get_num_threads());
  return n;
}

// Threads for a large GEMM: BLAS's own count, capped by torch's intra-op thread
// setting (read process-wide, kernel_lib/parallel.h) so torch.set_num_threads governs
// acme's kernels as it governs CPU ones.
inline int default_threads() {
  return std::max(1, std::min(blas_max_threads(), acme::common::intra_op_threads()));
}

// Sets BLAS's (process-wide) thread count when it differs from the last one
// set here; the call is cheap but not free, and most calls repeat the count.
inline void use_threads(int n) {
  blas_max_threads();  // read BLAS's own count before the first change
  static std::atomic<int> current{-1};
  if (current.exchange(n, std::memory_order_relaxed) != n) scipy_openblas_set_num_threads(n);
}

// How gemm() cuts an m x n x k product: into blocks of `len` rows of C
// (rows) or of `len` columns (!rows); len == 0: not cut. The cut depends on
// m, n, k only, never on the unit count, so each element of C comes from the
// same BLAS call whatever the number of units. C's longer side is cut: each
// block repacks the whole operand the blocks share (B for row blocks, A for
// column blocks), the smaller one then.
struct Cut {
  bool rows = true;
  int64_t len = 0;
};

// own_kernel: acme's sgemm, which has no threads of its own, so products from
// kGemmThreadedMacs on are cut too; its tiles are kSgemmMr rows (kGemmBlockAlign
// is a multiple) by kSgemmNr columns, so column blocks are multiples of that.
inline Cut cut(int64_t m, int64_t n, int64_t k, bool own_kernel) {
  const double macs = static_cast<double>(m) * n * k;
  if (macs < kGemmSplitMacs || (macs >= kGemmThreadedMacs && !own_kernel)) return {};
  const bool rows = m >= n;
  const int64_t side = rows ? m : n;
  const int64_t align = (own_kernel && !rows) ? kSgemmNr : kGemmBlockAlign;
  const int64_t blocks = std::min(kGemmMaxBlocks, static_cast<int64_t>(macs / kGemmBlockMacs));
  const int64_t len = ((side + blocks - 1) / blocks + align - 1) / align * align;
  return {rows, len < side ? len : 0};
}

// block(i0, i1, j0, j1) computes C's block [i0, i1) x [j0, j1): once for the
// whole of C, or for each block of the cut on the compute units (inline when
// nested in a unit's chunk, cut the same way).
template <class F>
inline void for_each_block(int64_t m, int64_t n, const Cut& cut, F&& block) {
  if (cut.len == 0) {
    block(int64_t(0), m, int64_t(0), n);
  } else if (cut.rows) {
    acme::common::parallel_for(m, cut.len,
                               [&](int64_t i0, int64_t i1) { block(i0, i1, int64_t(0), n); });
  } else {
    acme::common::parallel_for(n, cut.len,
                               [&](int64_t j0, int64_t j1) { block(int64_t(0), m, j0, j1); });
  }
}

}  // namespace gemm_detail

#if defined(__x86_64__)
// gemm() for float32 on acme's own kernel (sgemm.h): it reads the strided views
// as they are, and products from kGemmSplitMacs on are cut into blocks of C for
// the compute units, large ones included (the kernel has no threads of its
// own). Its bits do not depend on the cut (sgemm.h), so any unit count gives
// the same C.
inline void gemm_own_kernel(const Mat<float>& a, const Mat<float>& b, float alpha, float beta,
                            float* c, int64_t ldc) {
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  gemm_detail::for_each_block(m, n, gemm_detail::cut(m, n, k, /*own_kernel=*/true),
                              [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    sgemm_avx512(i1 - i0, j1 - j0, k, alpha, a.p + i0 * a.rs, a.rs, a.cs, b.p + j0 * b.cs, b.rs,
                 b.cs, beta, c + i0 * ldc + j0, ldc);
  });
}
#endif  // __x86_64__

// How gemm() treats BLAS's process-wide thread count.
enum class BlasThreads {
  // Sets it per call: 1 below kGemmThreadedMacs (also when the product is cut
  // into blocks for the units, set before their parallel loop), else
  // default_threads().
  kBySize,
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
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_avx512_usable() && std::min(m, n) >= kSgemmMinSide) {
      gemm_own_kernel(a, b, alpha, beta, c, ldc);
      return;
    }
  }
#endif
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
  // Mid-size products (single-threaded BLAS, see above) are cut into blocks
  // for the compute units, whose BLAS calls use the 1 thread set above (or by
  // a kAsSet caller). A block's rows of A (row-major: a row is lda apart;
  // transposed: one element) and columns of B likewise.
  gemm_detail::for_each_block(m, n, gemm_detail::cut(m, n, k, /*own_kernel=*/false),
                              [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const T* ap = a.p + i0 * (ta == CblasNoTrans ? lda : 1);
    const T* bp = b.p + j0 * (tb == CblasNoTrans ? 1 : ldb);
    T* cp = c + i0 * ldc + j0;
    const blasint mb = static_cast<blasint>(i1 - i0), nb = static_cast<blasint>(j1 - j0);
    if constexpr (std::is_same_v<T, float>) {
      scipy_cblas_sgemm(CblasRowMajor, ta, tb, mb, nb, K, alpha, ap, LDA, bp, LDB, beta, cp, LDC);
    } else {
      scipy_cblas_dgemm(CblasRowMajor, ta, tb, mb, nb, K, alpha, ap, LDA, bp, LDB, beta, cp, LDC);
    }
  });
}

}  // namespace acme::kernels::nn
