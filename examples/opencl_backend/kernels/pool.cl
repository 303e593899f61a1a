// 2-D max pooling over contiguous [planes, H, W] inputs (planes = N * C).

// One item per output element: the window's maximum (NaN wins, the last one, as on the CPU)
// and its flat index h * W + w in the input plane.
__kernel void max_pool2d_f32(BUF(float, out), BUF(long, indices), BUF(const float, in), long planes,
                             long H, long W, long OH, long OW, int kh, int kw, int sh, int sw, int ph,
                             int pw, int dh, int dw) {
  const long i = get_global_id(0);
  if (i >= planes * OH * OW) return;
  const long p = i / (OH * OW), oh = (i / OW) % OH, ow = i % OW;
  __global const float* X = AT(const float, in) + p * H * W;
  float best = -INFINITY;
  long best_at = -1;
  for (int a = 0; a < kh; ++a) {
    const long h = oh * sh - ph + (long)a * dh;
    if (h < 0 || h >= H) continue;
    for (int b = 0; b < kw; ++b) {
      const long w = ow * sw - pw + (long)b * dw;
      if (w < 0 || w >= W) continue;
      const float v = X[h * W + w];
      if (best_at < 0 || v > best || isnan(v)) {  // a later NaN wins too, as on the CPU
        best = v;
        best_at = h * W + w;
      }
    }
  }
  AT(float, out)[i] = best;
  AT(long, indices)[i] = best_at;
}

// Float addition through compare-and-swap (OpenCL 1.2 has integer atomics only):
// overlapping windows send several gradients to one input element.
inline void atomic_add_f32(volatile __global float* at, float v) {
  union { unsigned int u; float f; } old, next;
  do {
    old.f = *at;
    next.f = old.f + v;
  } while (atomic_cmpxchg((volatile __global unsigned int*)at, old.u, next.u) != old.u);
}

// grad_input is zero-filled by the host part; each output gradient goes to the
// element its index names (an index outside the plane is skipped).
__kernel void max_pool2d_backward_f32(BUF(float, grad_in), BUF(const float, grad_out),
                                      BUF(const long, indices), long planes, long HW, long OHW) {
  const long i = get_global_id(0);
  if (i >= planes * OHW) return;
  const long p = i / OHW;
  const long at = AT(const long, indices)[i];
  if (at < 0 || at >= HW) return;
  atomic_add_f32(AT(float, grad_in) + p * HW + at, AT(const float, grad_out)[i]);
}
