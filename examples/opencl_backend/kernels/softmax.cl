// Softmax and log-softmax over the last dim of a contiguous [rows, cols] input,
// and their backward ops. One work-group per row: the max, then the sum of
// exp(x - max), as tree reductions in local memory.
#define SOFTMAX_GROUP 64

inline float group_max(__local float* scratch, float v) {
  const uint lid = get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint step = SOFTMAX_GROUP / 2; step > 0; step >>= 1) {
    if (lid < step) scratch[lid] = fmax(scratch[lid], scratch[lid + step]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

inline float group_sum(__local float* scratch, float v) {
  const uint lid = get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint step = SOFTMAX_GROUP / 2; step > 0; step >>= 1) {
    if (lid < step) scratch[lid] += scratch[lid + step];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

// is_log != 0: log_softmax (x - max - log(sum)); else softmax (exp(x - max) / sum).
__kernel __attribute__((reqd_work_group_size(SOFTMAX_GROUP, 1, 1)))
void softmax_rows_f32(BUF(float, out), BUF(const float, in), ulong cols, int is_log) {
  __local float scratch[SOFTMAX_GROUP];
  const ulong row = get_group_id(0);
  const uint lid = get_local_id(0);
  __global const float* x = AT(const float, in) + row * cols;
  __global float* y = AT(float, out) + row * cols;
  float m = -INFINITY;
  for (ulong c = lid; c < cols; c += SOFTMAX_GROUP) m = fmax(m, x[c]);
  m = group_max(scratch, m);
  float s = 0.0f;
  for (ulong c = lid; c < cols; c += SOFTMAX_GROUP) s += exp(x[c] - m);
  s = group_sum(scratch, s);
  if (is_log) {
    const float ls = log(s);
    for (ulong c = lid; c < cols; c += SOFTMAX_GROUP) y[c] = x[c] - m - ls;
  } else {
    for (ulong c = lid; c < cols; c += SOFTMAX_GROUP) y[c] = exp(x[c] - m) / s;
  }
}

// is_log != 0: grad - exp(output) * sum(grad)       (log_softmax's backward)
// else:     output * (grad - sum(grad * output)) (softmax's backward)
__kernel __attribute__((reqd_work_group_size(SOFTMAX_GROUP, 1, 1)))
void softmax_backward_rows_f32(BUF(float, grad_in), BUF(const float, grad), BUF(const float, output),
                               ulong cols, int is_log) {
  __local float scratch[SOFTMAX_GROUP];
  const ulong row = get_group_id(0);
  const uint lid = get_local_id(0);
  __global const float* g = AT(const float, grad) + row * cols;
  __global const float* o = AT(const float, output) + row * cols;
  __global float* r = AT(float, grad_in) + row * cols;
  float s = 0.0f;
  for (ulong c = lid; c < cols; c += SOFTMAX_GROUP) s += is_log ? g[c] : g[c] * o[c];
  s = group_sum(scratch, s);
  for (ulong c = lid; c < cols; c += SOFTMAX_GROUP)
    r[c] = is_log ? g[c] - exp(o[c]) * s : o[c] * (g[c] - s);
}
