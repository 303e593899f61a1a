// flsdk's kernel library: the helpers every kernel of a flsdk backend may use
// (acme's kernels use them all). `flsdk gen` copies this folder verbatim into
// generated/kernel_lib/ (fixes reach every backend at its next gen); include
// it from kernels/*.cpp as
//   #include "kernel_lib/common.h"
// and open `using namespace <backend>::common;` in the kernel's namespace.
//
// Host part (any backend):
// dtype.h   - dtype sets, dispatch<Set>(op, device, dtype, lambda), opmath_t,
//             acc_t, cvt<To>(v)
// errors.h  - FL_CHECK / FL_CHECK_T ("<backend>: <op>: ... (device, dtype)")
// args.h    - opt(optional tensor) for host parts
// alloc.h   - broadcast_shape, promote, alloc_output, cast, prepare/make_iter
// random_key.h - generator_for, draw_key: the key of an op's counter-based
//             random stream (include it where needed: not included here)
// Device part run as host code (runtime_primitives: host_kernels; the backend
// defines port.h's functions in kernels/kernel_port.cpp):
// device.h   - DeviceTensor, launch, read_on_host: host part vs device part
// queued_work.h - the device part's closure in recycled memory (launch's queue)
// iter.h     - StridedIter (broadcasting, coalescing) and map1/map2/map3 loops
// pointwise.h - unary_kernel/binary_kernel/ternary_kernel drivers, float_compute
// parallel.h - parallel_for/parallel_reduce over the compute units
// dense.h    - nn::load/store/OutBuf/dispatch_compute: dense staging for BLAS,
//              reductions and row-wise math (included by the kernels that need it)
// docs/writing-a-kernel.md of a scaffolded backend teaches them.
#pragma once

#include "alloc.h"
#include "args.h"
#include "dtype.h"
#include "errors.h"
#include "iter.h"
#include "pointwise.h"
