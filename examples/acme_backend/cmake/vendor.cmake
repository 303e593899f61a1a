# acme's vendor math library: OpenBLAS from the `scipy-openblas32` wheel
# (symbols prefixed `scipy_`, 32-bit BLAS integers), used by the GEMM-based
# kernels (kernels/math/gemm.h: linalg, conv). Included by CMakeLists.txt with
# FLSDK_BACKEND_TARGET naming the extension target.
#
# The wheel is a run-time dependency of torch-fl-acme (pyproject.toml), so the
# installed extension finds the library next to itself in site-packages:
# site-packages/torch_fl_acme/_C*.so -> site-packages/scipy_openblas32/lib.

if(NOT DEFINED FLSDK_BACKEND_TARGET)
  message(FATAL_ERROR "vendor.cmake: FLSDK_BACKEND_TARGET is not set")
endif()

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
          "import scipy_openblas32 as s; print(s.get_include_dir()); print(s.get_lib_dir()); print(s.get_library())"
  OUTPUT_VARIABLE _acme_openblas_info
  ERROR_VARIABLE _acme_openblas_err
  RESULT_VARIABLE _acme_openblas_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _acme_openblas_rc EQUAL 0)
  message(FATAL_ERROR
    "acme needs OpenBLAS from the scipy-openblas32 wheel, but ${Python_EXECUTABLE} cannot "
    "import scipy_openblas32:\n${_acme_openblas_err}\n"
    "Install it into the build environment: `pip install scipy-openblas32`.")
endif()
string(REPLACE "\n" ";" _acme_openblas_info "${_acme_openblas_info}")
list(GET _acme_openblas_info 0 ACME_OPENBLAS_INCLUDE_DIR)
list(GET _acme_openblas_info 1 ACME_OPENBLAS_LIB_DIR)
list(GET _acme_openblas_info 2 ACME_OPENBLAS_LIB_NAME)

find_library(ACME_OPENBLAS_LIBRARY NAMES "${ACME_OPENBLAS_LIB_NAME}"
             HINTS "${ACME_OPENBLAS_LIB_DIR}" NO_DEFAULT_PATH)
if(NOT ACME_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "vendor.cmake: lib${ACME_OPENBLAS_LIB_NAME} not found in "
                      "${ACME_OPENBLAS_LIB_DIR}")
endif()
message(STATUS "acme: OpenBLAS ${ACME_OPENBLAS_LIBRARY} (headers ${ACME_OPENBLAS_INCLUDE_DIR})")

target_include_directories(${FLSDK_BACKEND_TARGET} PRIVATE "${ACME_OPENBLAS_INCLUDE_DIR}")
target_link_libraries(${FLSDK_BACKEND_TARGET} PRIVATE "${ACME_OPENBLAS_LIBRARY}")

# Run-time search path. The build tree finds the build venv's OpenBLAS; the
# installed wheel only its declared dependency, scipy-openblas32, next to it
# in site-packages. No absolute build-machine path in the wheel: a wheel
# installed without its dependency must fail clearly, not load whatever the
# build machine had.
set_property(TARGET ${FLSDK_BACKEND_TARGET} APPEND PROPERTY BUILD_RPATH "${ACME_OPENBLAS_LIB_DIR}")
set_property(TARGET ${FLSDK_BACKEND_TARGET} APPEND PROPERTY INSTALL_RPATH
             "$ORIGIN/../scipy_openblas32/lib")

# acme's vector math (kernels/math/vec_math.h): one object per x86-64 instruction
# set, chosen at run time by what the CPU supports. ATen's vector classes pick
# their implementation from CPU_CAPABILITY; the precompiled header is skipped
# because it was built without these -m flags.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  set_source_files_properties("${CMAKE_CURRENT_SOURCE_DIR}/kernels/vec_math_avx512.cpp" PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mfma;-mf16c"
    COMPILE_DEFINITIONS "CPU_CAPABILITY=AVX512;CPU_CAPABILITY_AVX512"
    SKIP_PRECOMPILE_HEADERS ON)
  # acme's float32 GEMM (kernels/math/sgemm.h): AVX-512F only, no torch headers.
  set_source_files_properties("${CMAKE_CURRENT_SOURCE_DIR}/kernels/sgemm_avx512.cpp" PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-mfma"
    SKIP_PRECOMPILE_HEADERS ON)
  set_source_files_properties("${CMAKE_CURRENT_SOURCE_DIR}/kernels/vec_math_avx2.cpp" PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c"
    COMPILE_DEFINITIONS "CPU_CAPABILITY=AVX2;CPU_CAPABILITY_AVX2"
    SKIP_PRECOMPILE_HEADERS ON)
endif()
