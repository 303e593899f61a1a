# The OpenCL device runtime: the adapter the generated glue calls
# (generated/runtime_adapter.h) over the OpenCL driver, built as a static library
# linked into the extension. List every runtime source here (nothing is
# globbed); the runtime needs no torch, so it compiles without torch's headers.
include_guard(GLOBAL)

find_package(Threads REQUIRED)

add_library(ocl_runtime STATIC
  ${CMAKE_CURRENT_LIST_DIR}/adapter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/driver.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_code.cpp
  ${CMAKE_CURRENT_LIST_DIR}/copy_strided.cpp
  # The kernels/*.cl sources flsdk gen embeds (device.yaml device_code).
  ${FLSDK_DEVICE_SOURCES}
)
set_target_properties(ocl_runtime PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_features(ocl_runtime PUBLIC cxx_std_20)
target_include_directories(ocl_runtime PUBLIC
  ${CMAKE_CURRENT_LIST_DIR}
  ${CMAKE_CURRENT_LIST_DIR}/../generated
  # Khronos' OpenCL headers (Apache-2.0, third_party/OpenCL-Headers/LICENSE):
  # the driver itself is found at run time (runtime/driver.h), nothing is linked.
  ${CMAKE_CURRENT_LIST_DIR}/../third_party/OpenCL-Headers
)
target_link_libraries(ocl_runtime PUBLIC Threads::Threads ${CMAKE_DL_LIBS})
