// Average pooling, fixed windows and adaptive, 2-D and 3-D (2-D: depth 1), and
// their backward, over contiguous [planes, D, H, W] tensors (kernels/avgpool.cpp).
// Host defines: CT (float or double), IN_T / LOAD(p, o), OUT_T / STORE(p, i, v),
// ADAPTIVE (0 or 1). Backward gathers: one item per input element sums the
// gradients of the windows that cover it, so no atomics are needed.

typedef struct {
  long planes, D, H, W, OD, OH, OW;
  long kd, kh, kw, sd, sh, sw, pd, ph, pw;
  long count_include_pad, divisor;  // divisor: 0 = none given
} Pool;

// The window of output o along one dim: [*s, *e) clamped to the input, and its
// size before clamping (padding counted).
inline long window(long o, long in, long out, long k, long s, long p, long* ws, long* we) {
#if ADAPTIVE
  *ws = (o * in) / out;
  *we = ((o + 1) * in + out - 1) / out;
  return *we - *ws;
#else
  long a = o * s - p;
  long b = a + k;
  if (b > in + p) b = in + p;
  const long padded = b - a;
  *ws = a < 0 ? 0 : a;
  *we = b > in ? in : b;
  return padded;
#endif
}

inline CT divisor(const Pool* P, long od, long oh, long ow) {
  long ds, de, hs, he, wss, we;
  const long pd = window(od, P->D, P->OD, P->kd, P->sd, P->pd, &ds, &de);
  const long ph = window(oh, P->H, P->OH, P->kh, P->sh, P->ph, &hs, &he);
  const long pw = window(ow, P->W, P->OW, P->kw, P->sw, P->pw, &wss, &we);
#if ADAPTIVE
  return (CT)((de - ds) * (he - hs) * (we - wss));
#else
  if (P->divisor) return (CT)P->divisor;
  if (P->count_include_pad) return (CT)(pd * ph * pw);
  return (CT)((de - ds) * (he - hs) * (we - wss));
#endif
}

__kernel void avg_pool(BUF(uchar, out), BUF(const uchar, in), Pool P) {
  const long i = get_global_id(0);
  if (i >= P.planes * P.OD * P.OH * P.OW) return;
  const long ow = i % P.OW, oh = (i / P.OW) % P.OH, od = (i / (P.OW * P.OH)) % P.OD;
  const long p = i / (P.OW * P.OH * P.OD);
  __global const IN_T* X = (__global const IN_T*)AT(const uchar, in) + p * P.D * P.H * P.W;
  long ds, de, hs, he, ws, we;
  window(od, P.D, P.OD, P.kd, P.sd, P.pd, &ds, &de);
  window(oh, P.H, P.OH, P.kh, P.sh, P.ph, &hs, &he);
  window(ow, P.W, P.OW, P.kw, P.sw, P.pw, &ws, &we);
  CT sum = 0;
  for (long d = ds; d < de; ++d)
    for (long h = hs; h < he; ++h)
      for (long w = ws; w < we; ++w) sum += LOAD(X, (d * P.H + h) * P.W + w);
  STORE((__global OUT_T*)AT(uchar, out), i, sum / divisor(&P, od, oh, ow));
}

// The outputs along one dim whose windows may hold input x: [*lo, *hi].
inline void covering(long x, long in, long out, long k, long s, long p, long* lo, long* hi) {
#if ADAPTIVE
  *lo = (x * out) / in;
  *hi = ((x + 1) * out + in - 1) / in;
#else
  *lo = (x + p - k + 1 + s - 1) / s;
  if (x + p - k + 1 < 0) *lo = 0;
  *hi = (x + p) / s;
#endif
  if (*lo < 0) *lo = 0;
  if (*hi > out - 1) *hi = out - 1;
}

__kernel void avg_pool_backward(BUF(uchar, grad_in), BUF(const uchar, grad_out), Pool P) {
  const long i = get_global_id(0);
  if (i >= P.planes * P.D * P.H * P.W) return;
  const long w = i % P.W, h = (i / P.W) % P.H, d = (i / (P.W * P.H)) % P.D;
  const long p = i / (P.W * P.H * P.D);
  __global const IN_T* G = (__global const IN_T*)AT(const uchar, grad_out) + p * P.OD * P.OH * P.OW;
  long d0, d1, h0, h1, w0, w1;
  covering(d, P.D, P.OD, P.kd, P.sd, P.pd, &d0, &d1);
  covering(h, P.H, P.OH, P.kh, P.sh, P.ph, &h0, &h1);
  covering(w, P.W, P.OW, P.kw, P.sw, P.pw, &w0, &w1);
  CT sum = 0;
  for (long od = d0; od <= d1; ++od) {
    long ds, de;
    window(od, P.D, P.OD, P.kd, P.sd, P.pd, &ds, &de);
    if (d < ds || d >= de) continue;
    for (long oh = h0; oh <= h1; ++oh) {
      long hs, he;
      window(oh, P.H, P.OH, P.kh, P.sh, P.ph, &hs, &he);
      if (h < hs || h >= he) continue;
      for (long ow = w0; ow <= w1; ++ow) {
        long ws, we;
        window(ow, P.W, P.OW, P.kw, P.sw, P.pw, &ws, &we);
        if (w < ws || w >= we) continue;
        sum += LOAD(G, (od * P.OH + oh) * P.OW + ow) / divisor(&P, od, oh, ow);
      }
    }
  }
  STORE((__global OUT_T*)AT(uchar, grad_in), i, sum);
}
