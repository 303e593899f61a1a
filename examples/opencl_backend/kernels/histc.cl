// histc (host part: kernels/histc.cpp): counts[bin] += 1 for every element of a
// contiguous input inside [lo, hi]. Host defines: T (the element type), and
// either HIST_FLOAT (lo and hi in T; the bin computed in T as CPU's histc does,
// so counts equal CPU's) or HIST_INT (lo and hi in long; the bin by exact
// integer division, as CUDA's histc on integers). Counts are 32-bit (the host
// refuses 2^31 elements or more); the host converts them to the output dtype.

#ifdef HIST_INT
// floor(d * bins / width) for 0 <= d <= width, exactly: the 128-bit product
// (mul_hi) divided by shift and subtract when it does not fit in 64 bits.
inline ulong scaled_bin(ulong d, ulong bins, ulong width) {
  const ulong lo = d * bins, hi = mul_hi(d, bins);
  if (hi == 0) return lo / width;
  ulong r = hi, q = 0;  // hi < width, as d <= width: the quotient fits in 64 bits
  for (int k = 63; k >= 0; --k) {
    const ulong carry = r >> 63;
    r = (r << 1) | ((lo >> k) & 1UL);
    q <<= 1;
    if (carry || r >= width) {
      r -= width;
      q |= 1UL;
    }
  }
  return q;
}
#define EDGE_T long
#else
#define EDGE_T T
#endif

__kernel void histc_count(BUF(int, counts), BUF(uchar, x), ulong n, long bins, EDGE_T lo, EDGE_T hi) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  const T v = ((__global const T*)AT(uchar, x))[i];
#ifdef HIST_INT
  const long w = (long)v;
  if (w < lo || w > hi) return;
  long pos = (long)scaled_bin((ulong)w - (ulong)lo, (ulong)bins, (ulong)hi - (ulong)lo);
#else
  if (!(v >= lo && v <= hi)) return;  // outside, or NaN
  long pos = (long)((v - lo) * (T)bins / (hi - lo));
#endif
  if (pos == bins) pos -= 1;  // the last bin includes its right edge
  atomic_inc(AT(int, counts) + pos);
}
