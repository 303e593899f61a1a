// acme's float32 GEMM for AVX-512 hosts (see sgemm.h; flags in
// cmake/vendor.cmake). The classic blocked scheme: B is packed in blocks of
// kSgemmKc x kNc (panels kSgemmNr wide), A in blocks of kMc x kSgemmKc (panels
// kSgemmMr tall), and a micro-kernel multiplies one A panel by one B panel
// into a kSgemmMr x kSgemmNr tile of C held in 24 vector registers. The B
// panel (32 KB) stays in L1 while the A panels of a block stream from L2.
// Edges are zero-padded panels and masked stores, computed by the same code
// as full tiles, so edge elements get the same bits as inner ones.
#include "math/sgemm.h"

#if defined(__x86_64__)  // the whole file: x86-64 only (sgemm_avx512_usable)
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace acme::kernels::nn {
namespace {

constexpr int64_t kMr = kSgemmMr, kNr = kSgemmNr, kKc = kSgemmKc;
// Block sizes, measured on ResNet-18's conv GEMMs and GPT's linears (Zen 5,
// 1 MB L2): 96..240 rows and 512..2048 columns were within noise of each other.
constexpr int64_t kMc = 144;   // rows of A per packed block (12 panels, 144 KB at kc 256)
constexpr int64_t kNc = 2048;  // columns of B per packed block (2 MB at kc 256)
static_assert(kMc % kMr == 0 && kNc % kNr == 0 && kNr == 32);

// A float buffer aligned to 64 bytes that only grows.
struct PackBuffer {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data;
  int64_t size = 0;
  float* get(int64_t n) {
    if (n > size) {
      const int64_t bytes = (n * int64_t(sizeof(float)) + 63) / 64 * 64;
      data.reset(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(bytes))));
      if (!data) throw std::bad_alloc();
      size = n;
    }
    return data.get();
  }
};

// Mask of the first n of 16 lanes (n may be <= 0 or >= 16).
__mmask16 lanes(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
}

// GCC 12's unpack and shuffle intrinsics pass _mm512_undefined_ps() as the
// unused merge source, which -Wuninitialized reports once they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// Transposes the 16 x 16 floats in r: r[i][j] becomes r[j][i]. Three steps,
// each interleaving twice as many contiguous floats as the last (1, 2, then
// 4-float lanes, the last in two shuffles).
void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  const auto lo = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  const auto hi = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  // u[4k + e], 128-bit lane q: rows 4k..4k+3 at column 4q + e.
  for (int k = 0; k < 16; k += 4) {
    u[k] = lo(t[k], t[k + 2]);
    u[k + 1] = hi(t[k], t[k + 2]);
    u[k + 2] = lo(t[k + 1], t[k + 3]);
    u[k + 3] = hi(t[k + 1], t[k + 3]);
  }
  // Row 4q + e of the result: lane q of u[e], u[4 + e], u[8 + e], u[12 + e].
  for (int e = 0; e < 4; ++e) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x44);
    const __m512 v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xEE);
    r[e] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + e] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[8 + e] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + e] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}
#pragma GCC diagnostic pop

// One panel of w <= W lines that are contiguous in p (line l, element p at
// src[l * along + p]): the panel is their transpose, built 16 lines by 16 p at
// a time in registers. A row-major A and a transposed B are laid out so;
// packed element by element, they cost a fifth of the product's time.
template <int64_t W>
void pack_panel_transposed(int64_t w, int64_t kc, const float* src, int64_t along, float* out) {
  for (int64_t g = 0; g < W; g += 16) {
    const int64_t lines = std::clamp<int64_t>(w - g, 0, 16);
    const __mmask16 width = lanes(W - g);
    for (int64_t p0 = 0; p0 < kc; p0 += 16) {
      const int64_t pn = std::min<int64_t>(16, kc - p0);
      const __mmask16 valid = lanes(pn);
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = i < lines ? _mm512_maskz_loadu_ps(valid, src + (g + i) * along + p0)
                         : _mm512_setzero_ps();
      transpose16(r);
      for (int64_t j = 0; j < pn; ++j) _mm512_mask_storeu_ps(out + (p0 + j) * W + g, width, r[j]);
    }
  }
}

// Packs n lines of kc elements (line l, element p at src[l * along + p * depth])
// into panels of W lines: a panel holds kc groups of W contiguous floats, one
// per p; lines past n are zero. A's panels are W = kMr rows (along = A's row
// stride), B's are W = kNr columns (along = B's column stride).
template <int64_t W>
void pack_panels(int64_t n, int64_t kc, const float* src, int64_t along, int64_t depth,
                 float* out) {
  for (int64_t l0 = 0; l0 < n; l0 += W, out += kc * W) {
    const int64_t w = std::min(W, n - l0);
    const float* s = src + l0 * along;
    if (along == 1) {
      // Masked vector copies: lanes past w load as zeros (the padding).
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t g = 0; g < W; g += 16)
          _mm512_mask_storeu_ps(out + p * W + g, lanes(W - g),
                                _mm512_maskz_loadu_ps(lanes(w - g), s + p * depth + g));
    } else if (depth == 1) {
      pack_panel_transposed<W>(w, kc, s, along, out);
    } else {
      if (w < W) std::fill(out, out + kc * W, 0.0f);
      for (int64_t l = 0; l < w; ++l)
        for (int64_t p = 0; p < kc; ++p) out[p * W + l] = s[l * along + p * depth];
    }
  }
}

// The kMr x kNr tile c (rows < mr, columns < nr) from one A panel and one B
// panel over kc: first block: c = alpha * sum + beta * c (beta == 0: c's old
// contents unread); later blocks: c += alpha * sum.
void micro_kernel(int64_t kc, const float* __restrict ap, const float* __restrict bp, float* c,
                  int64_t ldc, int64_t mr, int64_t nr, float alpha, float beta, bool first) {
  __m512 acc[kMr][2];
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(bp + p * kNr);
    const __m512 b1 = _mm512_load_ps(bp + p * kNr + 16);
    const float* a = ap + p * kMr;
#pragma GCC unroll 12
    for (int i = 0; i < kMr; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  const bool read_c = !first || beta != 0.0f;
  const __mmask16 mask0 = lanes(nr), mask1 = lanes(nr - 16);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) {
    if (i >= mr) break;
    float* row = c + i * ldc;
    __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
    if (read_c) {
      c0 = _mm512_maskz_loadu_ps(mask0, row);
      c1 = _mm512_maskz_loadu_ps(mask1, row + 16);
      if (first) {
        c0 = _mm512_mul_ps(vb, c0);
        c1 = _mm512_mul_ps(vb, c1);
      }
    }
    _mm512_mask_storeu_ps(row, mask0, _mm512_fmadd_ps(va, acc[i][0], c0));
    _mm512_mask_storeu_ps(row + 16, mask1, _mm512_fmadd_ps(va, acc[i][1], c1));
  }
}

}  // namespace

void sgemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs,
                  int64_t a_cs, const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c,
                  int64_t ldc) {
  thread_local PackBuffer a_buf, b_buf;
  const int64_t kc_max = std::min(k, kKc);
  float* bp = b_buf.get(kc_max * ((std::min(n, kNc) + kNr - 1) / kNr) * kNr);
  float* ap = a_buf.get(kc_max * ((std::min(m, kMc) + kMr - 1) / kMr) * kMr);
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc);
      pack_panels<kNr>(nc, kc, b + pc * b_rs + jc * b_cs, b_cs, b_rs, bp);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic);
        pack_panels<kMr>(mc, kc, a + ic * a_rs + pc * a_cs, a_rs, a_cs, ap);
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            micro_kernel(kc, ap + ir * kc, bp + jr * kc, c + (ic + ir) * ldc + jc + jr, ldc,
                         std::min(kMr, mc - ir), std::min(kNr, nc - jr), alpha, beta, pc == 0);
          }
        }
      }
    }
  }
}

}  // namespace acme::kernels::nn
#endif  // __x86_64__
