// acme's shared kernel helpers; include this from kernels/*.cpp as
//   #include "common/common.h"
// dtype.h   - dtype sets, dispatch<Set>(op, device, dtype, lambda), opmath_t,
//             acc_t, cvt<To>(v)
// errors.h  - ACME_CHECK / ACME_CHECK_T ("acme: <op>: ... (device, dtype)")
// iter.h    - StridedIter (broadcasting, coalescing) and map1/map2/map3 loops
// alloc.h   - broadcast_shape, promote, alloc_output, cast, prepare/make_iter
// pointwise.h - unary_kernel/binary_kernel/ternary_kernel drivers, float_compute
#pragma once

#include "alloc.h"
#include "dtype.h"
#include "errors.h"
#include "iter.h"
#include "pointwise.h"
