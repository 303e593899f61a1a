// acmeccl: the reduction kernels (internal). dst[i] = op over the inputs of
// src[k][i], for every dtype acme has; float16 and bfloat16 accumulate in
// float and round to nearest even once; integer sums and products wrap; Avg
// divides the total (integers: floor). They run as device work, on views.
#pragma once

#include "acmeccl.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace acmeccl {

// Bytes per element; 0 for an unknown dtype.
inline size_t dtype_size(int dtype) {
  switch (dtype) {
    case acmecclUint8: case acmecclInt8: case acmecclBool: return 1;
    case acmecclInt16: case acmecclFloat16: case acmecclBfloat16: return 2;
    case acmecclInt32: case acmecclFloat32: return 4;
    case acmecclInt64: case acmecclFloat64: return 8;
  }
  return 0;
}

inline const char* dtype_name(int dtype) {
  switch (dtype) {
    case acmecclUint8: return "uint8";
    case acmecclInt8: return "int8";
    case acmecclInt16: return "int16";
    case acmecclInt32: return "int32";
    case acmecclInt64: return "int64";
    case acmecclFloat16: return "float16";
    case acmecclFloat32: return "float32";
    case acmecclFloat64: return "float64";
    case acmecclBool: return "bool";
    case acmecclBfloat16: return "bfloat16";
  }
  return "unknown";
}

inline const char* op_name(int op) {
  switch (op) {
    case acmecclSum: return "sum";
    case acmecclAvg: return "avg";
    case acmecclProd: return "product";
    case acmecclMin: return "min";
    case acmecclMax: return "max";
  }
  return "unknown";
}

// Reduces `n` inputs of `count` elements into dst (which may be one of the
// inputs: element i is read from every input before it is written). `avg_by`:
// with op Avg, the divisor applied to the total (1: none yet, as for a partial
// sum a later step divides). Returns false for an unknown dtype or op.
bool reduce(void* dst, const void* const* src, int n, size_t count, int dtype, int op,
            int avg_by);
// The same result stored into `ndst` buffers. A destination may be an input
// (the same elements: each block of elements is read from every input before
// it is stored), but must not overlap one otherwise. `stream`: with non-temporal stores
// (no read of the destination's lines first, no cache pollution), for buffers
// far larger than the caches; ends with a store fence.
bool reduce_to(void* const* dst, int ndst, const void* const* src, int n, size_t count,
               int dtype, int op, int avg_by, bool stream);
// memcpy with non-temporal stores (and a fence) when `stream`.
void copy(void* dst, const void* src, size_t bytes, bool stream);

// float16 / bfloat16 <-> float (round to nearest even), for tests and kernels.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);

}  // namespace acmeccl
