// Indexed copies: gather, scatter, index, index_put, take, put, index_select,
// index_copy, index_fill, index_add, scatter_add (kernels/indexing.cpp).
//
// One kernel, `indexed`, walks an iteration shape. Operand A is the dense side
// (read when scattering, written when gathering), operand B the indexed side:
// its offset is its strides over the iteration dims plus, for each index tensor
// k, index_k * dim_stride[k] (negative indices count from the end). Host defines:
//   ET        the element as moved: uchar, ushort, uint or ulong (its size); with
//             ACCUMULATE the element type itself (float, double, int, long)
//   SCATTER   1: B[...] = A (or += with ACCUMULATE); 0: A = B[...]
// An index out of range cannot raise on the device without a host wait: a
// gather writes 0 there, a scatter skips it.

#if ACCUMULATE
#if defined(ACC_DOUBLE) || defined(ACC_LONG)
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#endif
#if defined(ACC_DOUBLE)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
inline void acc_add(__global ET* p, ET v) {
#if defined(ACC_FLOAT)
  union { uint u; float f; } old, next;
  do {
    old.f = *p;
    next.f = old.f + v;
  } while (atomic_cmpxchg((volatile __global uint*)p, old.u, next.u) != old.u);
#elif defined(ACC_DOUBLE)
  union { ulong u; double f; } old, next;
  do {
    old.f = *p;
    next.f = old.f + v;
  } while (atom_cmpxchg((volatile __global ulong*)p, old.u, next.u) != old.u);
#elif defined(ACC_INT)
  atomic_add((volatile __global int*)p, v);
#else
  atom_add((volatile __global long*)p, v);
#endif
}
#endif

#define MAX_INDICES 4
typedef struct {
  int ndim;
  int nidx;
  long sizes[LAYOUT_DIMS];
  long a[LAYOUT_DIMS];
  long b[LAYOUT_DIMS];
  long idx[MAX_INDICES][LAYOUT_DIMS];
  long dim_size[MAX_INDICES];
  long dim_stride[MAX_INDICES];
} IndexLayout;

__kernel void indexed(BUF(uchar, A), BUF(uchar, B), BUF(const long, i0), BUF(const long, i1), BUF(const long, i2),
                      BUF(const long, i3), IndexLayout L, ulong n) {
  const ulong g = get_global_id(0);
  if (g >= n) return;
  long oa = 0, ob = 0, oi[MAX_INDICES] = {0, 0, 0, 0};
  ulong rest = g;
  for (int d = L.ndim - 1; d >= 0; --d) {
    const long s = L.sizes[d];
    const long p = (long)(rest % (ulong)s);
    rest /= (ulong)s;
    oa += p * L.a[d];
    ob += p * L.b[d];
    for (int k = 0; k < L.nidx; ++k) oi[k] += p * L.idx[k][d];
  }
  __global const long* idx[MAX_INDICES] = {AT(const long, i0), AT(const long, i1), AT(const long, i2),
                                           AT(const long, i3)};
  int ok = 1;
  for (int k = 0; k < L.nidx; ++k) {
    long v = idx[k][oi[k]];
    if (v < 0) v += L.dim_size[k];
    ok = ok && v >= 0 && v < L.dim_size[k];
    ob += v * L.dim_stride[k];
  }
  __global ET* a = (__global ET*)AT(uchar, A);
  __global ET* b = (__global ET*)AT(uchar, B);
#if SCATTER
  if (!ok) return;
#if ACCUMULATE
  acc_add(b + ob, a[oa]);
#else
  b[ob] = a[oa];
#endif
#else
  a[oa] = ok ? b[ob] : (ET)0;
#endif
}
