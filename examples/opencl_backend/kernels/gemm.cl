// out[M,N] = alpha * A[M,K] @ B[K,N] + beta * C, for each batch (C broadcast to [M,N] by its
// strides; beta == 0 ignores C, NaN included, as torch.addmm). A and B are read
// through their strides, so transposed views need no copy. out is contiguous.
// 16x16 tiles staged in local memory.
#define TILE 16

__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void gemm_f32(BUF(float, out), BUF(const float, a), BUF(const float, b), BUF(const float, c),
              long M, long N, long K, long a_rs, long a_cs, long b_rs, long b_cs, long c_rs,
              long c_cs, float alpha, float beta, int has_c, long a_bs, long b_bs, long c_bs) {
  // Batches (bmm) are the third dimension of the range; batch strides in elements.
  const long batch = get_global_id(2);
  __local float As[TILE][TILE];
  __local float Bs[TILE][TILE + 1];
  const int tx = get_local_id(0), ty = get_local_id(1);
  const long col = get_group_id(0) * TILE + tx;
  const long row = get_group_id(1) * TILE + ty;
  __global const float* A = AT(const float, a) + batch * a_bs;
  __global const float* B = AT(const float, b) + batch * b_bs;
  float acc = 0.0f;
  for (long k0 = 0; k0 < K; k0 += TILE) {
    const long ka = k0 + tx, kb = k0 + ty;
    As[ty][tx] = (row < M && ka < K) ? A[row * a_rs + ka * a_cs] : 0.0f;
    Bs[ty][tx] = (kb < K && col < N) ? B[kb * b_rs + col * b_cs] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (row < M && col < N) {
    float r = alpha * acc;
    if (has_c && beta != 0.0f) r += beta * AT(const float, c)[batch * c_bs + row * c_rs + col * c_cs];
    AT(float, out)[(batch * M + row) * N + col] = r;
  }
}
