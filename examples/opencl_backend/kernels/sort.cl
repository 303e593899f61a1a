// Stable sort along rows of a contiguous [rows, n] tensor (kernels/sort.cpp), and
// max_unpool's ordered scatter. Host defines: CT, IN_T / LOAD(p, o) (the compare
// type), ET (the element moved, by size).
//
// sort_rank: one item per element counts the elements that go before it (NaN
// after every number ascending, first descending; ties by index, so the sort is
// stable) and writes itself there. O(n) per element: simple, exact, and fast
// enough for the rows models sort; a merge sort is the next step for long rows.

#if CT_FLOAT
#define EW_ISNAN(x) isnan(x)
#else
#define EW_ISNAN(x) 0
#endif

inline int goes_before(CT y, long k, CT x, long j, int descending) {
  const int ny = EW_ISNAN(y), nx = EW_ISNAN(x);
  if (ny || nx) {
    if (ny && nx) return k < j;
    return descending ? ny : nx;
  }
  if (y == x) return k < j;
  return descending ? y > x : y < x;
}

__kernel void sort_rank(BUF(uchar, values), BUF(long, indices), BUF(const uchar, in), ulong rows, ulong n,
                        int descending) {
  const ulong g = get_global_id(0);
  if (g >= rows * n) return;
  const ulong row = g / n;
  const long j = (long)(g % n);
  __global const IN_T* X = (__global const IN_T*)AT(const uchar, in) + row * n;
  const CT x = LOAD(X, j);
  long rank = 0;
  for (long k = 0; k < (long)n; ++k)
    if (k != j && goes_before(LOAD(X, k), k, x, j, descending)) ++rank;
  ((__global ET*)AT(uchar, values))[row * n + rank] = ((__global const ET*)AT(const uchar, in))[row * n + j];
  AT(long, indices)[row * n + rank] = j;
}

// max_unpool: out [planes, out_n] (zero-filled) gets in[p, i] at index[p, i], one
// item per plane in order, so a repeated index keeps the last value, as the CPU.
__kernel void unpool_plane(BUF(uchar, out), BUF(const uchar, in), BUF(const long, index), ulong planes, ulong n,
                           ulong out_n) {
  const ulong p = get_global_id(0);
  if (p >= planes) return;
  __global ET* o = (__global ET*)AT(uchar, out) + p * out_n;
  __global const ET* x = (__global const ET*)AT(const uchar, in) + p * n;
  __global const long* ix = AT(const long, index) + p * n;
  for (ulong i = 0; i < n; ++i) {
    const long at = ix[i];
    if (at >= 0 && at < (long)out_n) o[at] = x[i];
  }
}
