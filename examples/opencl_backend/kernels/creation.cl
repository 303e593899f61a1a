// Sequences and eye (kernels/creation.cpp): out[i] of a contiguous output.
// Host defines: CT (float, double or long), OUT_T / STORE(p, i, v), and one of
// SEQ_arange (p0 + i * p1), SEQ_linspace (p0 start, p1 end, p2 step, n steps:
// the first half counts from start, the second back from end, as the CPU;
// one step is start),
// SEQ_logspace (the same exponents, base p3), SEQ_eye (cols = n).

__kernel void seq(BUF(uchar, out), ulong count, long n, CT p0, CT p1, CT p2, CT p3) {
  const ulong i = get_global_id(0);
  if (i >= count) return;
  __global OUT_T* o = (__global OUT_T*)AT(uchar, out);
#if defined(SEQ_arange)
  STORE(o, i, p0 + (CT)i * p1);
#elif defined(SEQ_linspace) || defined(SEQ_logspace)
  const long halfway = n / 2;
  const CT e = ((long)i < halfway || n == 1) ? p0 + p2 * (CT)i : p1 - p2 * (CT)(n - (long)i - 1);
#if defined(SEQ_linspace)
  STORE(o, i, e);
#else
  STORE(o, i, pow(p3, e));
#endif
#elif defined(SEQ_eye)
  STORE(o, i, (long)(i / (ulong)n) == (long)(i % (ulong)n) ? 1 : 0);
#endif
}
