// Prepended to every OpenCL C program of this backend (runtime/device_code.cpp).
//
// A device address reaches a kernel as a buffer and a byte offset into it
// (runtime/device_code.h, buffer_arg): declare the pair with BUF(T, x) and get
// the element pointer with AT(T, x).
#define BUF(T, x) __global T* x##_base, ulong x##_off
#define AT(T, x) ((__global T*)((__global uchar*)x##_base + x##_off))

// Strided operands (runtime/device_code.h, Layout): sizes and element strides of
// up to three operands; stride 0 broadcasts.
#define LAYOUT_DIMS 8
typedef struct {
  int ndim;
  int pad;
  long sizes[LAYOUT_DIMS];
  long strides[3][LAYOUT_DIMS];
} Layout;

// Element offsets of linear index i (row-major over sizes) in operands 0..2.
inline void layout_offsets(const Layout* L, ulong i, long* o0, long* o1, long* o2) {
  long a = 0, b = 0, c = 0;
  for (int d = L->ndim - 1; d >= 0; --d) {
    const long n = L->sizes[d];
    const long idx = (long)(i % (ulong)n);
    i /= (ulong)n;
    a += idx * L->strides[0][d];
    b += idx * L->strides[1][d];
    c += idx * L->strides[2][d];
  }
  *o0 = a;
  *o1 = b;
  *o2 = c;
}
