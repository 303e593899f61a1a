// Convolutions of 1 to 3 spatial dims (1-D and 2-D padded to 3 with size-1
// dims), grouped, strided, padded, dilated, and transposed: a direct
// computation, one item per output (or weight) element. Correct for every
// shape nn.Conv*/ConvTranspose* makes; not yet fast (an im2col + GEMM path for
// the common 2-D case is the next step).
//
// Geometry: input [N, CI, I], output [N, CO, O], kernel K, per spatial dim
// stride s, padding p, dilation d; G groups.
typedef struct {
  long N, CI, CO, G;
  long I[3], O[3], K[3], s[3], p[3], d[3];
} Geom;

inline long vol(const long* v) { return v[0] * v[1] * v[2]; }

// out[n, co, o] = bias[co] + sum over ci of co's group and k of
//                 in[n, ci, o*s - p + k*d] * w[co, ci - group start, k]   (w: [CO, CI/G, K])
__kernel void conv_fwd_f32(BUF(float, out), BUF(const float, in), BUF(const float, w), BUF(const float, bias),
                           Geom g, int has_bias) {
  const long i = get_global_id(0);
  const long ov = vol(g.O);
  if (i >= g.N * g.CO * ov) return;
  const long n = i / (g.CO * ov), co = (i / ov) % g.CO, o = i % ov;
  const long o0 = o / (g.O[1] * g.O[2]), o1 = (o / g.O[2]) % g.O[1], o2 = o % g.O[2];
  const long cig = g.CI / g.G, grp = co / (g.CO / g.G);
  const long iv = vol(g.I), kv = vol(g.K);
  float acc = has_bias ? AT(const float, bias)[co] : 0.0f;
  for (long c = 0; c < cig; ++c) {
    __global const float* X = AT(const float, in) + (n * g.CI + grp * cig + c) * iv;
    __global const float* W = AT(const float, w) + (co * cig + c) * kv;
    for (long k0 = 0; k0 < g.K[0]; ++k0) {
      const long a = o0 * g.s[0] - g.p[0] + k0 * g.d[0];
      if (a < 0 || a >= g.I[0]) continue;
      for (long k1 = 0; k1 < g.K[1]; ++k1) {
        const long b = o1 * g.s[1] - g.p[1] + k1 * g.d[1];
        if (b < 0 || b >= g.I[1]) continue;
        for (long k2 = 0; k2 < g.K[2]; ++k2) {
          const long e = o2 * g.s[2] - g.p[2] + k2 * g.d[2];
          if (e < 0 || e >= g.I[2]) continue;
          acc += X[(a * g.I[1] + b) * g.I[2] + e] * W[(k0 * g.K[1] + k1) * g.K[2] + k2];
        }
      }
    }
  }
  AT(float, out)[i] = acc;
}

// The transposed relation, o = i*s - p + k*d:
// out[n, co, o] = bias[co] + sum over ci of co's group, k with (o + p - k*d) = i*s, 0 <= i < I, of
//                 in[n, ci, i] * w[ci, co - group start, k]   (w: [CI, CO/G, K])
// (also the input gradient of a convolution, with the roles of in and out swapped)
__kernel void conv_tfwd_f32(BUF(float, out), BUF(const float, in), BUF(const float, w), BUF(const float, bias),
                            Geom g, int has_bias) {
  const long i = get_global_id(0);
  const long ov = vol(g.O);
  if (i >= g.N * g.CO * ov) return;
  const long n = i / (g.CO * ov), co = (i / ov) % g.CO, o = i % ov;
  const long oo[3] = {o / (g.O[1] * g.O[2]), (o / g.O[2]) % g.O[1], o % g.O[2]};
  const long cig = g.CI / g.G, cog = g.CO / g.G, grp = co / cog, col = co % cog;
  const long iv = vol(g.I), kv = vol(g.K);
  float acc = has_bias ? AT(const float, bias)[co] : 0.0f;
  for (long c = 0; c < cig; ++c) {
    const long ci = grp * cig + c;
    __global const float* X = AT(const float, in) + (n * g.CI + ci) * iv;
    __global const float* W = AT(const float, w) + (ci * cog + col) * kv;
    for (long k0 = 0; k0 < g.K[0]; ++k0) {
      const long t0 = oo[0] + g.p[0] - k0 * g.d[0];
      if (t0 < 0 || t0 % g.s[0] || t0 / g.s[0] >= g.I[0]) continue;
      for (long k1 = 0; k1 < g.K[1]; ++k1) {
        const long t1 = oo[1] + g.p[1] - k1 * g.d[1];
        if (t1 < 0 || t1 % g.s[1] || t1 / g.s[1] >= g.I[1]) continue;
        for (long k2 = 0; k2 < g.K[2]; ++k2) {
          const long t2 = oo[2] + g.p[2] - k2 * g.d[2];
          if (t2 < 0 || t2 % g.s[2] || t2 / g.s[2] >= g.I[2]) continue;
          acc += X[((t0 / g.s[0]) * g.I[1] + t1 / g.s[1]) * g.I[2] + t2 / g.s[2]] *
                 W[(k0 * g.K[1] + k1) * g.K[2] + k2];
        }
      }
    }
  }
  AT(float, out)[i] = acc;
}

// Weight gradient: gw[ca, cbl, k] = sum over n and positions a of A of
//   A[n, ca, a] * B[n, group start of ca + cbl, a*s - p + k*d]
// A: [N, CI, I] (iterated), B: [N, CO, O], gw: [CI, CO/G, K]. A convolution's
// weight gradient is A = grad_output, B = input; a transposed one's A = input,
// B = grad_output.
__kernel void conv_gw_f32(BUF(float, gw), BUF(const float, A), BUF(const float, B), Geom g) {
  const long i = get_global_id(0);
  const long kv = vol(g.K);
  const long cbg = g.CO / g.G;
  if (i >= g.CI * cbg * kv) return;
  const long ca = i / (cbg * kv), cbl = (i / kv) % cbg, k = i % kv;
  const long k0 = k / (g.K[1] * g.K[2]), k1 = (k / g.K[2]) % g.K[1], k2 = k % g.K[2];
  const long cb = (ca / (g.CI / g.G)) * cbg + cbl;
  const long av = vol(g.I), bv = vol(g.O);
  float acc = 0.0f;
  for (long n = 0; n < g.N; ++n) {
    __global const float* X = AT(const float, A) + (n * g.CI + ca) * av;
    __global const float* Y = AT(const float, B) + (n * g.CO + cb) * bv;
    for (long a0 = 0; a0 < g.I[0]; ++a0) {
      const long b0 = a0 * g.s[0] - g.p[0] + k0 * g.d[0];
      if (b0 < 0 || b0 >= g.O[0]) continue;
      for (long a1 = 0; a1 < g.I[1]; ++a1) {
        const long b1 = a1 * g.s[1] - g.p[1] + k1 * g.d[1];
        if (b1 < 0 || b1 >= g.O[1]) continue;
        for (long a2 = 0; a2 < g.I[2]; ++a2) {
          const long b2 = a2 * g.s[2] - g.p[2] + k2 * g.d[2];
          if (b2 < 0 || b2 >= g.O[2]) continue;
          acc += X[(a0 * g.I[1] + a1) * g.I[2] + a2] * Y[(b0 * g.O[1] + b1) * g.O[2] + b2];
        }
      }
    }
  }
  AT(float, gw)[i] = acc;
}
