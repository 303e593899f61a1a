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

// Layer norm over rows of a contiguous [rows, cols] input, one work-group per
// row: mean, then the biased variance from squared deviations.
__kernel __attribute__((reqd_work_group_size(NORM_GROUP, 1, 1)))
void layer_norm_f32(BUF(float, out), BUF(float, mean_out), BUF(float, rstd_out), BUF(const float, x),
                    BUF(const float, w), BUF(const float, b), long cols, int has_w, int has_b, float eps) {
  __local float scratch[NORM_GROUP];
  const long row = get_group_id(0);
  const uint lid = get_local_id(0);
  __global const float* X = AT(const float, x) + row * cols;
  float s = 0.0f;
  for (long c = lid; c < cols; c += NORM_GROUP) s += X[c];
  const float mean = group_sum_n(scratch, s) / (float)cols;
  float q = 0.0f;
  for (long c = lid; c < cols; c += NORM_GROUP) {
    const float d = X[c] - mean;
    q += d * d;
  }
  const float rstd = 1.0f / sqrt(group_sum_n(scratch, q) / (float)cols + eps);
  for (long c = lid; c < cols; c += NORM_GROUP) {
    float y = (X[c] - mean) * rstd;
    if (has_w) y *= AT(const float, w)[c];
    if (has_b) y += AT(const float, b)[c];
    AT(float, out)[row * cols + c] = y;
  }
  if (lid == 0) {
    AT(float, mean_out)[row] = mean;
    AT(float, rstd_out)[row] = rstd;
  }
}

// Input gradient, one work-group per row:
// dx = rstd * (dy*w - mean(dy*w) - xhat * mean(dy*w*xhat))
__kernel __attribute__((reqd_work_group_size(NORM_GROUP, 1, 1)))
void layer_norm_backward_input_f32(BUF(float, grad_in), BUF(const float, dy), BUF(const float, x),
                                   BUF(const float, mean), BUF(const float, rstd), BUF(const float, w),
                                   long cols, int has_w) {
  __local float scratch[NORM_GROUP];
  const long row = get_group_id(0);
  const uint lid = get_local_id(0);
  __global const float* X = AT(const float, x) + row * cols;
  __global const float* DY = AT(const float, dy) + row * cols;
  const float m = AT(const float, mean)[row], r = AT(const float, rstd)[row];
  float s1 = 0.0f, s2 = 0.0f;
  for (long c = lid; c < cols; c += NORM_GROUP) {
    const float g = DY[c] * (has_w ? AT(const float, w)[c] : 1.0f);
    s1 += g;
    s2 += g * (X[c] - m) * r;
  }
  s1 = group_sum_n(scratch, s1) / (float)cols;
  s2 = group_sum_n(scratch, s2) / (float)cols;
  for (long c = lid; c < cols; c += NORM_GROUP) {
    const float g = DY[c] * (has_w ? AT(const float, w)[c] : 1.0f);
    AT(float, grad_in)[row * cols + c] = r * (g - s1 - (X[c] - m) * r * s2);
  }
}

// Weight and bias gradients, one item per column: sums over the rows.
__kernel void layer_norm_backward_params_f32(BUF(float, grad_w), BUF(float, grad_b), BUF(const float, dy),
                                             BUF(const float, x), BUF(const float, mean), BUF(const float, rstd),
                                             long rows, long cols, int want_w, int want_b) {
  const long c = get_global_id(0);
  if (c >= cols) return;
  float sw = 0.0f, sb = 0.0f;
  for (long r = 0; r < rows; ++r) {
    const float g = AT(const float, dy)[r * cols + c];
    sw += g * (AT(const float, x)[r * cols + c] - AT(const float, mean)[r]) * AT(const float, rstd)[r];
    sb += g;
  }
  if (want_w) AT(float, grad_w)[c] = sw;
  if (want_b) AT(float, grad_b)[c] = sb;
}
