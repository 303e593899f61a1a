// Dropout (kernels/random.cpp), float32 on contiguous tensors. As on GPUs, the
// random bits come from a counter-based generator, Philox-4x32-10: element i
// draws from counter i under the op's key (one 64-bit draw from the device's
// generator on the host), so a work-item needs no state and a seed reproduces
// every op's mask.

inline uint philox_mulhilo(uint a, uint b, uint* hi) {
  const ulong p = (ulong)a * (ulong)b;
  *hi = (uint)(p >> 32);
  return (uint)p;
}

inline uint4 philox4x32_10(uint4 c, uint2 k) {
  for (int r = 0; r < 10; ++r) {
    uint hi0, hi1;
    const uint lo0 = philox_mulhilo(0xD2511F53u, c.x, &hi0);
    const uint lo1 = philox_mulhilo(0xCD9E8D57u, c.z, &hi1);
    c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k += (uint2)(0x9E3779B9u, 0xBB67AE85u);
  }
  return c;
}

// out[i] = in[i] / keep where the uniform draw of counter i is below keep, else
// 0; mask[i] says which (bool, one byte).
__kernel void dropout_f32(BUF(uchar, out), BUF(uchar, mask), BUF(uchar, in), ulong n, float keep,
                          float scale, uint key_lo, uint key_hi) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  const uint4 r = philox4x32_10((uint4)((uint)i, (uint)(i >> 32), 0u, 0u), (uint2)(key_lo, key_hi));
  const float u = (float)(r.x >> 8) * 0x1.0p-24f;  // 24 bits: uniform in [0, 1)
  const bool k = u < keep;
  __global float* o = AT(float, out);
  __global uchar* m = AT(uchar, mask);
  __global const float* x = (__global const float*)AT(float, in);
  m[i] = k ? 1 : 0;
  o[i] = k ? x[i] * scale : 0.0f;
}

// grad_input[i] = grad[i] * scale where mask[i], else 0.
__kernel void dropout_backward_f32(BUF(uchar, out), BUF(uchar, grad), BUF(uchar, mask), ulong n,
                                   float scale) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  __global const float* g = (__global const float*)AT(float, grad);
  __global const uchar* m = (__global const uchar*)AT(uchar, mask);
  AT(float, out)[i] = m[i] ? g[i] * scale : 0.0f;
}
