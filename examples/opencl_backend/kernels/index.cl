// Indexing: embedding's backward.

inline void atomic_add_f32_idx(volatile __global float* at, float v) {
  union { unsigned int u; float f; } old, next;
  do {
    old.f = *at;
    next.f = old.f + v;
  } while (atomic_cmpxchg((volatile __global unsigned int*)at, old.u, next.u) != old.u);
}

// counts[idx] += 1 for every index (scale_grad_by_freq).
__kernel void embedding_count(BUF(int, counts), BUF(const long, indices), long n, long num_weights) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long t = AT(const long, indices)[i];
  if (t >= 0 && t < num_weights) atomic_inc(AT(int, counts) + t);
}

// grad_weight [num_weights, dim] (zero-filled) += grad [n, dim] rows at their
// indices; padding_idx rows get nothing; with scale, each row divided by its
// index's count.
__kernel void embedding_backward_f32(BUF(float, grad_weight), BUF(const float, grad), BUF(const long, indices),
                                     BUF(const int, counts), long n, long dim, long num_weights, long padding_idx,
                                     int scale) {
  const long i = get_global_id(0);
  if (i >= n * dim) return;
  const long row = i / dim, c = i % dim;
  const long t = AT(const long, indices)[row];
  if (t == padding_idx || t < 0 || t >= num_weights) return;
  float g = AT(const float, grad)[i];
  if (scale) g /= (float)AT(const int, counts)[t];
  atomic_add_f32_idx(AT(float, grad_weight) + t * dim + c, g);
}
