// Reductions, float32: rows of a contiguous [rows, cols] input.
//
// One work-group per row: each item sums a strided slice of the row, then the
// group adds the partial sums as a tree in local memory (pairwise, as the CPU's
// sum is; a serial loop loses precision on long rows).
#define REDUCE_GROUP 64

__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void sum_rows_f32(BUF(float, out), BUF(const float, in), ulong rows, ulong cols, float scale,
                  int scaled) {
  __local float partial[REDUCE_GROUP];
  const ulong row = get_group_id(0);
  const uint lid = get_local_id(0);
  float acc = 0.0f;
  if (row < rows) {
    __global const float* x = AT(const float, in) + row * cols;
    for (ulong c = lid; c < cols; c += REDUCE_GROUP) acc += x[c];
  }
  partial[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint step = REDUCE_GROUP / 2; step > 0; step >>= 1) {
    if (lid < step) partial[lid] += partial[lid + step];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  // mean: the sum divided by the count (scale = cols), as the CPU divides.
  if (lid == 0 && row < rows) AT(float, out)[row] = scaled ? partial[0] / scale : partial[0];
}
