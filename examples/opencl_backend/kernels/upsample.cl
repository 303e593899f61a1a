// 2-D nearest and bilinear upsampling, forward and backward, float32, NCHW
// contiguous (host parts: kernels/upsample.cpp). Indices and weights follow
// ATen's CPU kernels (UpSample.h: nearest_idx, area_pixel_compute_source_index,
// guard_index_and_lambda) with the scales the host computed as they do. The
// backward kernels run one work item per (n, c) plane, visiting the outputs in
// the CPU's order, so each input gradient is summed in the CPU's order: no
// atomics, and the same result every run. The four kernels take the same
// arguments; the nearest ones ignore align_corners.

inline long nearest_index(long o, long in, long out, float scale) {
  if (out == in) return o;           // no float arithmetic in the two common cases,
  if (out == 2 * in) return o >> 1;  // as ATen
  return min((long)floor((float)o * scale), in - 1);
}

typedef struct {
  long i0, i1;
  float l0, l1;
} Linear;

inline Linear linear_at(long o, long in, float scale, int align_corners) {
  const float real = align_corners ? scale * (float)o : fmax(scale * ((float)o + 0.5f) - 0.5f, 0.0f);
  Linear r;
  r.i0 = min((long)floor(real), in - 1);
  r.l1 = fmin(fmax(real - (float)r.i0, 0.0f), 1.0f);
  r.l0 = 1.0f - r.l1;
  r.i1 = r.i0 + (r.i0 < in - 1 ? 1 : 0);
  return r;
}

__kernel void nearest2d_f32(BUF(float, out), BUF(const float, in), long planes, long ih, long iw, long oh,
                            long ow, float scale_h, float scale_w, int align_corners) {
  const ulong g = get_global_id(0);
  if (g >= (ulong)(planes * oh * ow)) return;
  const long x = (long)(g % (ulong)ow), y = (long)((g / (ulong)ow) % (ulong)oh), p = (long)(g / (ulong)(ow * oh));
  const long sy = nearest_index(y, ih, oh, scale_h), sx = nearest_index(x, iw, ow, scale_w);
  AT(float, out)[g] = AT(const float, in)[(p * ih + sy) * iw + sx];
}

__kernel void nearest2d_backward_f32(BUF(float, grad_in), BUF(const float, grad_out), long planes, long ih, long iw,
                                     long oh, long ow, float scale_h, float scale_w, int align_corners) {
  const long p = (long)get_global_id(0);
  if (p >= planes) return;
  __global float* gi = AT(float, grad_in) + p * ih * iw;
  __global const float* go = AT(const float, grad_out) + p * oh * ow;
  for (long i = 0; i < ih * iw; ++i) gi[i] = 0.0f;
  for (long y = 0; y < oh; ++y) {
    const long sy = nearest_index(y, ih, oh, scale_h);
    for (long x = 0; x < ow; ++x) gi[sy * iw + nearest_index(x, iw, ow, scale_w)] += go[y * ow + x];
  }
}

__kernel void bilinear2d_f32(BUF(float, out), BUF(const float, in), long planes, long ih, long iw, long oh, long ow,
                             float scale_h, float scale_w, int align_corners) {
  const ulong g = get_global_id(0);
  if (g >= (ulong)(planes * oh * ow)) return;
  const long x = (long)(g % (ulong)ow), y = (long)((g / (ulong)ow) % (ulong)oh), p = (long)(g / (ulong)(ow * oh));
  const Linear h = linear_at(y, ih, scale_h, align_corners), w = linear_at(x, iw, scale_w, align_corners);
  __global const float* src = AT(const float, in) + p * ih * iw;
  const float top = src[h.i0 * iw + w.i0] * w.l0 + src[h.i0 * iw + w.i1] * w.l1;
  const float bottom = src[h.i1 * iw + w.i0] * w.l0 + src[h.i1 * iw + w.i1] * w.l1;
  AT(float, out)[g] = top * h.l0 + bottom * h.l1;
}

__kernel void bilinear2d_backward_f32(BUF(float, grad_in), BUF(const float, grad_out), long planes, long ih, long iw,
                                      long oh, long ow, float scale_h, float scale_w, int align_corners) {
  const long p = (long)get_global_id(0);
  if (p >= planes) return;
  __global float* gi = AT(float, grad_in) + p * ih * iw;
  __global const float* go = AT(const float, grad_out) + p * oh * ow;
  for (long i = 0; i < ih * iw; ++i) gi[i] = 0.0f;
  for (long y = 0; y < oh; ++y) {
    const Linear h = linear_at(y, ih, scale_h, align_corners);
    for (long x = 0; x < ow; ++x) {
      const Linear w = linear_at(x, iw, scale_w, align_corners);
      const float d = go[y * ow + x];
      gi[h.i0 * iw + w.i0] += h.l0 * w.l0 * d;
      gi[h.i0 * iw + w.i1] += h.l0 * w.l1 * d;
      gi[h.i1 * iw + w.i0] += h.l1 * w.l0 * d;
      gi[h.i1 * iw + w.i1] += h.l1 * w.l1 * d;
    }
  }
}
