// acme's own float32 GEMM for AVX-512 hosts (sgemm_avx512.cpp), used by
// gemm.h in place of the vendor BLAS's sgemm where the CPU has AVX-512.
//
// Why its own: a BLAS picks its kernels by CPU model, and where it does not
// know the model (or OPENBLAS_CORETYPE pins an older one, as on this project's
// machines) it runs its AVX2 kernels at half the AVX-512 rate. This kernel
// needs only AVX-512F.
//
// Numerics: every element of C sums its k products in order, in blocks of
// kSgemmKc (fused multiply-adds in float), then C = alpha * sum + beta * C for
// the first block and C += alpha * sum for each later one. That depends on k
// alone, not on m, n or where C is cut, so a product cut into blocks of C has
// the bits of the uncut one, whatever the cut.
//
// No torch includes: a plain C++ kernel, testable on its own
// (tests/test_sgemm_program.py).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "vector_isa.h"

namespace acme::kernels::nn {

// Rows and columns of C one micro-kernel call computes, and the k block.
constexpr int64_t kSgemmMr = 12;
constexpr int64_t kSgemmNr = 32;
constexpr int64_t kSgemmKc = 256;

// Products with a side of C shorter than this stay with the vendor BLAS: a
// tile would be mostly padding, and packing the long operand (read once per
// few columns) costs more than the multiply-adds. Measured on Zen 5 at one
// thread: C 512 x 24 (k 4608) 61 GFLOPS here vs 81 in OpenBLAS (Haswell
// kernels); C 64 x 1024 (k 576) 159 vs 112; C 256 x 32 (k 2304) 126 vs 105.
constexpr int64_t kSgemmMinSide = 32;

// C (m x n, row stride ldc, unit column stride) = alpha * A @ B + beta * C, A
// (m x k) and B (k x n) given by element strides of rows and columns (any
// layout). beta == 0 ignores C's old contents (NaN included). Single-threaded;
// m, n, k > 0. Needs AVX-512F: call only when sgemm_avx512_usable().
void sgemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs,
                  int64_t a_cs, const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c,
                  int64_t ldc);

// AVX-512 is the active instruction set (runtime/vector_isa.h: the CPU has it
// and ACME_ISA did not choose a lower one) and the environment does not ask
// for the vendor BLAS (ACME_SGEMM=blas, read once: for comparisons and tests).
// Inline here, not in sgemm_avx512.cpp: that file is compiled for AVX-512 and
// must not run first.
inline bool sgemm_avx512_usable() {
  static const bool blas_asked = [] {
    const char* choice = std::getenv("ACME_SGEMM");
    return choice && std::strcmp(choice, "blas") == 0;
  }();
  return !blas_asked && ::acme::isa::active() == ::acme::isa::kAvx512;
}

}  // namespace acme::kernels::nn
