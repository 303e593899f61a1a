// acme's vector math for AVX-512 hosts (flags in cmake/vendor.cmake).
#define ACME_VEC_SUFFIX avx512
#include "math/vec_math_impl.h"
