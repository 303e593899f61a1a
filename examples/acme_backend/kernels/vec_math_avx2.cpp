// acme's vector math for AVX2 + FMA hosts (flags in cmake/vendor.cmake).
#define ACME_VEC_SUFFIX avx2
#include "math/vec_math_impl.h"
