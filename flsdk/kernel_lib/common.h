// acme's shared kernel helpers; include this from kernels/*.cpp as
//   #include "common/common.h"
// dtype.h   - dtype sets, dispatch<Set>(op, device, dtype, lambda), opmath_t,
//             acc_t, cvt<To>(v)
// errors.h  - ACME_CHECK / ACME_CHECK_T ("acme: <op>: ... (device, dtype)")
// iter.h    - StridedIter (broadcasting, coalescing) and map1/map2/map3 loops
// alloc.h   - broadcast_shape, promote, alloc_output, cast, prepare/make_iter
// pointwise.h - unary_kernel/binary_kernel/ternary_kernel drivers, float_compute
// The other headers here are included by the kernels that need them (they pull in
// BLAS or the vector math, which elementwise kernels do not): see ../README.md.
// args.h     - opt(optional tensor) for host parts
// device.h   - DeviceTensor, launch, read_on_host: host part vs device part
// parallel.h - parallel_for/parallel_reduce over the compute units
// dense.h    - nn::load/store/OutBuf/dispatch_compute: dense staging (BLAS, reductions)
// gemm.h     - nn::gemm on strided matrix views (vendor BLAS or sgemm.h)
// nn_math.h  - vectorizable exp and sums for softmax and norms
// vec_math.h, vec_tensor.h - acme's vector math on arrays and float32 tensors
#pragma once

#include "alloc.h"
#include "dtype.h"
#include "errors.h"
#include "iter.h"
#include "pointwise.h"
