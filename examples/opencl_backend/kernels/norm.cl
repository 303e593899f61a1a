// Batch norm over a contiguous [N, C, S] input (S: the spatial elements, 1 for
// [N, C]). Training: one work-group per channel computes the mean, then the
// biased variance as the mean of squared deviations (two passes: no
// cancellation), writes the output and updates the running statistics with the
// unbiased variance, as PyTorch does.
#define NORM_GROUP 64

inline float group_sum_n(__local float* scratch, float v) {
  const uint lid = get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint step = NORM_GROUP / 2; step > 0; step >>= 1) {
    if (lid < step) scratch[lid] += scratch[lid + step];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

__kernel __attribute__((reqd_work_group_size(NORM_GROUP, 1, 1)))
void batch_norm_train_f32(BUF(float, out), BUF(float, save_mean), BUF(float, save_invstd),
                          BUF(const float, x), BUF(const float, w), BUF(const float, b),
                          BUF(float, running_mean), BUF(float, running_var), long N, long C, long S,
                          int has_w, int has_b, int has_running, float momentum, float eps) {
  __local float scratch[NORM_GROUP];
  const long c = get_group_id(0);
  const uint lid = get_local_id(0);
  const long M = N * S;
  __global const float* X = AT(const float, x);
  float s = 0.0f;
  for (long i = lid; i < M; i += NORM_GROUP) s += X[(i / S) * C * S + c * S + i % S];
  const float mean = group_sum_n(scratch, s) / (float)M;
  float q = 0.0f;
  for (long i = lid; i < M; i += NORM_GROUP) {
    const float d = X[(i / S) * C * S + c * S + i % S] - mean;
    q += d * d;
  }
  const float qsum = group_sum_n(scratch, q);
  const float var = qsum / (float)M;
  const float invstd = 1.0f / sqrt(var + eps);
  const float scale = has_w ? AT(const float, w)[c] : 1.0f;
  const float shift = has_b ? AT(const float, b)[c] : 0.0f;
  for (long i = lid; i < M; i += NORM_GROUP) {
    const long at = (i / S) * C * S + c * S + i % S;
    AT(float, out)[at] = (X[at] - mean) * invstd * scale + shift;
  }
  if (lid == 0) {
    AT(float, save_mean)[c] = mean;
    AT(float, save_invstd)[c] = invstd;
    if (has_running) {
      const float unbiased = qsum / (float)(M - 1);  // NaN for one value, as the CPU
      AT(float, running_mean)[c] = (1.0f - momentum) * AT(float, running_mean)[c] + momentum * mean;
      AT(float, running_var)[c] = (1.0f - momentum) * AT(float, running_var)[c] + momentum * unbiased;
    }
  }
}

// Inference: the running statistics normalize, one item per element.
__kernel void batch_norm_eval_f32(BUF(float, out), BUF(const float, x), BUF(const float, w),
                                  BUF(const float, b), BUF(const float, running_mean),
                                  BUF(const float, running_var), long C, long S, long total,
                                  int has_w, int has_b, float eps) {
  const long i = get_global_id(0);
  if (i >= total) return;
  const long c = (i / S) % C;
  const float invstd = 1.0f / sqrt(AT(const float, running_var)[c] + eps);
  const float scale = has_w ? AT(const float, w)[c] : 1.0f;
  const float shift = has_b ? AT(const float, b)[c] : 0.0f;
  AT(float, out)[i] = (AT(const float, x)[i] - AT(const float, running_mean)[c]) * invstd * scale + shift;
}

// Backward, one work-group per channel: sums of dy and dy * (x - mean), then
// grad_input, and grad_weight / grad_bias when asked for. `mean` and `invstd`
// are the saved statistics (training) or come from the running ones (eval).
__kernel __attribute__((reqd_work_group_size(NORM_GROUP, 1, 1)))
void batch_norm_backward_f32(BUF(float, grad_in), BUF(float, grad_w), BUF(float, grad_b),
                             BUF(const float, dy), BUF(const float, x), BUF(const float, w),
                             BUF(const float, mean_src), BUF(const float, var_src), long N, long C,
                             long S, int has_w, int train, float eps, int want_in, int want_w,
                             int want_b) {
  __local float scratch[NORM_GROUP];
  const long c = get_group_id(0);
  const uint lid = get_local_id(0);
  const long M = N * S;
  __global const float* DY = AT(const float, dy);
  __global const float* X = AT(const float, x);
  const float mean = AT(const float, mean_src)[c];
  // training: var_src holds save_invstd; eval: the running variance
  const float invstd = train ? AT(const float, var_src)[c] : 1.0f / sqrt(AT(const float, var_src)[c] + eps);
  float sdy = 0.0f, sdyx = 0.0f;
  for (long i = lid; i < M; i += NORM_GROUP) {
    const long at = (i / S) * C * S + c * S + i % S;
    sdy += DY[at];
    sdyx += DY[at] * (X[at] - mean);
  }
  sdy = group_sum_n(scratch, sdy);
  sdyx = group_sum_n(scratch, sdyx);
  const float scale = has_w ? AT(const float, w)[c] : 1.0f;
  if (want_in) {
    for (long i = lid; i < M; i += NORM_GROUP) {
      const long at = (i / S) * C * S + c * S + i % S;
      float g;
      if (train) {
        const float proj = (X[at] - mean) * invstd * invstd * sdyx / (float)M;
        g = (DY[at] - sdy / (float)M - proj) * invstd * scale;
      } else {
        g = DY[at] * invstd * scale;
      }
      AT(float, grad_in)[at] = g;
    }
  }
  if (lid == 0) {
    if (want_w) AT(float, grad_w)[c] = sdyx * invstd;
    if (want_b) AT(float, grad_b)[c] = sdy;
  }
}
