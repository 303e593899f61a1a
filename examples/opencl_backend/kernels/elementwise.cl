// The elementwise template: one kernel, `ew`, for every op of the unary,
// binary, compare and pointwise op specs, in every dtype. kernels/elementwise.cpp
// builds a program per (op, dtypes) from
//
//   prelude.cl + the defines below + the family's op table (kernels/ew_<family>.cl) + this file
//
// and caches it like any other program (the defines are part of the source text).
//
//   CT, CT_FLOAT, CT_DOUBLE  the compute type (float, double or long) and what it is
//   K(x)                     the literal x in CT (K(0.5) is 0.5f when CT is float)
//   RT                       what the op's EXPR yields (CT, or long for predicates)
//   NIN                      tensor operands read: 1..3 (a, b, c)
//   IN<k>_T, LOAD<k>(p, o)   storage type of operand k and its element o read as CT
//   IN<k>_SCALAR             operand k is the kernel argument v<k> (a number from the host)
//   OUT_T, STORE(p, i, v)    output storage type and the store of an RT value at i
//   OUT_BITS                 bits of the output type (shifts)
//   OP_<name>                which EXPR of the op table
//
// The output is contiguous (the host allocates it); operands are strided by
// rows 0..2 of the Layout (stride 0 broadcasts). p0..p2 are the op's numbers
// (alpha, bounds, eps, ...), already in CT.

#ifndef EXPR
#error "ew: the op table defines no EXPR for this op"
#endif

// float to bfloat16, rounded to nearest even (NaN stays a quiet NaN), as PyTorch's.
inline ushort ew_to_bf16(float f) {
  const uint b = as_uint(f);
  return isnan(f) ? (ushort)0x7fc0 : (ushort)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

__kernel void ew(BUF(uchar, out), BUF(const uchar, x0), BUF(const uchar, x1), BUF(const uchar, x2), Layout L,
                 ulong n, CT v0, CT v1, CT v2, CT p0, CT p1, CT p2) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o0, o1, o2;
  layout_offsets(&L, i, &o0, &o1, &o2);
#if IN0_SCALAR
  const CT a = v0;
#else
  const CT a = LOAD0((__global const IN0_T*)AT(const uchar, x0), o0);
#endif
#if NIN >= 2
#if IN1_SCALAR
  const CT b = v1;
#else
  const CT b = LOAD1((__global const IN1_T*)AT(const uchar, x1), o1);
#endif
#endif
#if NIN >= 3
#if IN2_SCALAR
  const CT c = v2;
#else
  const CT c = LOAD2((__global const IN2_T*)AT(const uchar, x2), o2);
#endif
#endif
  const RT r = EXPR;
  STORE((__global OUT_T*)AT(uchar, out), i, r);
}
