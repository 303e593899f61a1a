// Standalone tests of acme's float32 GEMM kernel (kernels/math/sgemm.h), built and
// run by tests/test_sgemm_program.py. Prints "PASS <name>" per test, or "SKIP"
// when the CPU has no AVX-512F.
#include "math/sgemm.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include "harness.h"  // acme's one C++ test harness

using acme::kernels::nn::sgemm_avx512;

namespace {

constexpr int kFileOrder = 0;

// A matrix of rows x cols stored with element strides rs, cs in a buffer of
// its own (strides may leave gaps, filled with NaN so a stray read shows).
struct Strided {
  int64_t rows, cols, rs, cs;
  std::vector<float> data;
  Strided(int64_t r, int64_t c, int64_t rs_, int64_t cs_, std::mt19937& gen)
      : rows(r), cols(c), rs(rs_), cs(cs_),
        data(static_cast<size_t>((r - 1) * rs_ + (c - 1) * cs_ + 1),
             std::numeric_limits<float>::quiet_NaN()) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) data[i * rs + j * cs] = dist(gen);
  }
  float at(int64_t i, int64_t j) const { return data[i * rs + j * cs]; }
};

// Layouts of an r x c operand: row-major, column-major (a transposed view),
// and a strided view of neither kind.
enum Layout { kRowMajor, kColMajor, kGeneric };
void strides(Layout l, int64_t r, int64_t c, int64_t* rs, int64_t* cs) {
  if (l == kRowMajor) { *rs = c; *cs = 1; }
  else if (l == kColMajor) { *rs = 1; *cs = r; }
  else { *rs = 2 * c + 3; *cs = 2; }
}

// C = alpha A B + beta C against a double-precision reference, every layout
// pair, shapes around the kernel's tiles (12 x 32) and k blocks (256).
TEST(matches_reference) {
  std::mt19937 gen(1);
  const int64_t sizes[][3] = {{1, 1, 1},    {12, 32, 1},  {13, 33, 7},  {11, 31, 256},
                              {25, 65, 257}, {1, 100, 300}, {100, 1, 300}, {37, 70, 513},
                              {150, 40, 20}, {5, 2100, 3},  {70, 20, 600}};
  const float alphas[] = {1.0f, -0.5f}, betas[] = {0.0f, 1.0f, 0.25f};
  for (const auto& s : sizes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    for (int la = 0; la < 3; ++la) {
      for (int lb = 0; lb < 3; ++lb) {
        int64_t ars, acs, brs, bcs;
        strides(Layout(la), m, k, &ars, &acs);
        strides(Layout(lb), k, n, &brs, &bcs);
        const Strided a(m, k, ars, acs, gen), b(k, n, brs, bcs, gen);
        for (float alpha : alphas) {
          for (float beta : betas) {
            const int64_t ldc = n + 5;  // padding columns must stay untouched
            std::vector<float> c0(static_cast<size_t>(m * ldc));
            std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
            for (float& v : c0) v = dist(gen);
            std::vector<float> c = c0;
            sgemm_avx512(m, n, k, alpha, a.data.data(), ars, acs, b.data.data(), brs, bcs, beta,
                         c.data(), ldc);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < ldc; ++j) {
                const float got = c[i * ldc + j];
                if (j >= n) {
                  REQUIRE(got == c0[i * ldc + j], "padding C[%ld,%ld] written", (long)i, (long)j);
                  continue;
                }
                double ref = 0, mag = 0;
                for (int64_t p = 0; p < k; ++p) {
                  ref += double(a.at(i, p)) * b.at(p, j);
                  mag += std::fabs(double(a.at(i, p)) * b.at(p, j));
                }
                ref = alpha * ref + beta * double(c0[i * ldc + j]);
                const double tol = 4e-7 * (std::fabs(alpha) * mag + std::fabs(beta * c0[i * ldc + j])) + 1e-30;
                REQUIRE(std::fabs(got - ref) <= tol,
                        "m %ld n %ld k %ld layouts %d/%d alpha %g beta %g: C[%ld,%ld] = %.9g, expected %.9g",
                        (long)m, (long)n, (long)k, la, lb, alpha, beta, (long)i, (long)j, got, ref);
              }
            }
          }
        }
      }
    }
  }
}

// beta == 0 must not read C: NaN and infinity there do not leak into the result.
TEST(beta_zero_ignores_c) {
  std::mt19937 gen(2);
  const int64_t m = 14, n = 40, k = 9;
  const Strided a(m, k, k, 1, gen), b(k, n, n, 1, gen);
  std::vector<float> c(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
  c[3] = std::numeric_limits<float>::infinity();
  sgemm_avx512(m, n, k, 1.0f, a.data.data(), k, 1, b.data.data(), n, 1, 0.0f, c.data(), n);
  for (float v : c) REQUIRE(std::isfinite(v), "C holds %g", v);
}

// C computed in blocks (rows or columns cut anywhere, aligned or not) has
// exactly the bits of C computed in one call: what lets gemm.h cut products
// for the compute units without the result depending on the unit count.
TEST(cut_does_not_change_bits) {
  std::mt19937 gen(3);
  const int64_t m = 61, n = 150, k = 600;  // k spans three k blocks
  const Strided a(m, k, k, 1, gen), b(k, n, 1, k, gen);  // B transposed, as conv's weight grad
  std::vector<float> whole(static_cast<size_t>(m * n));
  sgemm_avx512(m, n, k, 1.5f, a.data.data(), k, 1, b.data.data(), 1, k, 0.0f, whole.data(), n);
  for (int64_t cut : {1, 7, 12, 13, 24, 40}) {
    std::vector<float> rows(static_cast<size_t>(m * n)), cols(static_cast<size_t>(m * n));
    for (int64_t i0 = 0; i0 < m; i0 += cut) {
      const int64_t h = std::min(cut, m - i0);
      sgemm_avx512(h, n, k, 1.5f, a.data.data() + i0 * k, k, 1, b.data.data(), 1, k, 0.0f,
                   rows.data() + i0 * n, n);
    }
    for (int64_t j0 = 0; j0 < n; j0 += cut * 3) {
      const int64_t w = std::min(cut * 3, n - j0);
      sgemm_avx512(m, w, k, 1.5f, a.data.data(), k, 1, b.data.data() + j0 * k, 1, k, 0.0f,
                   cols.data() + j0, n);
    }
    REQUIRE(std::memcmp(rows.data(), whole.data(), whole.size() * sizeof(float)) == 0,
            "rows cut every %ld differ from one call", (long)cut);
    REQUIRE(std::memcmp(cols.data(), whole.data(), whole.size() * sizeof(float)) == 0,
            "columns cut every %ld differ from one call", (long)(cut * 3));
  }
}

// n floats that end where an inaccessible page begins: any read past the end
// faults. (The packers read 16 floats at a time with masked loads; a mask too
// wide would only read into padding, which no check of C can see.)
struct GuardedFloats {
  void* map = nullptr;
  size_t map_bytes = 0;
  float* data = nullptr;
  explicit GuardedFloats(int64_t n) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    const size_t body = (bytes + page - 1) / page * page;
    map_bytes = body + page;
    map = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) std::abort();
    if (mprotect(static_cast<char*>(map) + body, page, PROT_NONE) != 0) std::abort();
    data = reinterpret_cast<float*>(static_cast<char*>(map) + body - bytes);
  }
  ~GuardedFloats() { munmap(map, map_bytes); }
};

// Dense operands in every layout whose last element is the last readable
// float: widths and k not multiples of 16 leave partial vectors at the end.
TEST(reads_nothing_past_the_operands) {
  const int64_t sizes[][3] = {{13, 33, 7}, {5, 3, 19}, {37, 70, 257}, {12, 32, 16}};
  for (const auto& s : sizes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    for (int la = 0; la < 2; ++la) {
      for (int lb = 0; lb < 2; ++lb) {
        int64_t ars, acs, brs, bcs;
        strides(Layout(la), m, k, &ars, &acs);
        strides(Layout(lb), k, n, &brs, &bcs);
        GuardedFloats a(m * k), b(k * n);
        for (int64_t i = 0; i < m * k; ++i) a.data[i] = float(i % 7) - 3.0f;
        for (int64_t i = 0; i < k * n; ++i) b.data[i] = float(i % 5) - 2.0f;
        std::vector<float> c(static_cast<size_t>(m * n));
        sgemm_avx512(m, n, k, 1.0f, a.data, ars, acs, b.data, brs, bcs, 0.0f, c.data(), n);
        double ref = 0;
        for (int64_t p = 0; p < k; ++p) ref += double(a.data[(m - 1) * ars + p * acs]) * b.data[p * brs + (n - 1) * bcs];
        REQUIRE(c[m * n - 1] == float(ref), "layouts %d/%d: last element %g, expected %g", la, lb,
                c[m * n - 1], ref);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) {
    std::printf("SKIP no AVX-512F on this CPU\n");
    return 0;
  }
  return harness::run_tests(argc, argv, "sgemm tests");
}
