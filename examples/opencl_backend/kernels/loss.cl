// Negative log-likelihood loss over a contiguous [N, C] input of log-probabilities
// and N int64 targets (reduction: 0 none, 1 mean, 2 sum).
//
// A target outside [0, C) other than ignore_index cannot stop the host (the
// kernel runs after the op returned, as on CUDA, which asserts on the device):
// it reads no memory out of bounds and gives NaN.
#define NLL_GROUP 64

__kernel __attribute__((reqd_work_group_size(NLL_GROUP, 1, 1)))
void nll_loss_forward_f32(BUF(float, out), BUF(float, total_weight), BUF(const float, self),
                          BUF(const long, target), BUF(const float, weight), long N, long C,
                          int has_weight, int reduction, long ignore_index) {
  __local float loss_part[NLL_GROUP];
  __local float weight_part[NLL_GROUP];
  const uint lid = get_local_id(0);
  float loss = 0.0f, total = 0.0f;
  for (long i = lid; i < N; i += NLL_GROUP) {
    const long t = AT(const long, target)[i];
    float l = 0.0f, w = 0.0f;
    if (t != ignore_index) {
      if (t < 0 || t >= C) {
        l = NAN;
        w = NAN;
      } else {
        w = has_weight ? AT(const float, weight)[t] : 1.0f;
        l = -w * AT(const float, self)[i * C + t];
      }
    }
    if (reduction == 0) AT(float, out)[i] = l;
    loss += l;
    total += w;
  }
  loss_part[lid] = loss;
  weight_part[lid] = total;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint step = NLL_GROUP / 2; step > 0; step >>= 1) {
    if (lid < step) {
      loss_part[lid] += loss_part[lid + step];
      weight_part[lid] += weight_part[lid + step];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) {
    // reduction none reports a total weight of 0, as the CPU does
    AT(float, total_weight)[0] = reduction == 0 ? 0.0f : weight_part[0];
    if (reduction == 1) AT(float, out)[0] = loss_part[0] / weight_part[0];
    if (reduction == 2) AT(float, out)[0] = loss_part[0];
  }
}

// grad_input is zero-filled by the host part; this writes the target entries.
__kernel void nll_loss_backward_f32(BUF(float, grad_input), BUF(const float, grad_output),
                                    BUF(const long, target), BUF(const float, weight),
                                    BUF(const float, total_weight), long N, long C, int has_weight,
                                    int reduction, long ignore_index) {
  const long i = get_global_id(0);
  if (i >= N) return;
  const long t = AT(const long, target)[i];
  if (t == ignore_index || t < 0 || t >= C) return;
  const float w = has_weight ? AT(const float, weight)[t] : 1.0f;
  float g = reduction == 0 ? AT(const float, grad_output)[i] : AT(const float, grad_output)[0];
  if (reduction == 1) g /= AT(const float, total_weight)[0];
  AT(float, grad_input)[i * C + t] = -w * g;
}
