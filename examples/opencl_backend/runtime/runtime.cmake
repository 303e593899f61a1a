# The OpenCL device device runtime: the adapter the generated glue calls
# (generated/runtime_adapter.h), built as a static library linked into the
# extension. List every runtime source here (nothing is globbed); the runtime
# needs no torch, so it compiles without torch's headers.
include_guard(GLOBAL)

find_package(Threads REQUIRED)

add_library(ocl_runtime STATIC
  ${CMAKE_CURRENT_LIST_DIR}/adapter.cpp
  # The simulated device adapter.cpp maps onto until your driver replaces it:
  # delete these lines with the folder.
  ${CMAKE_CURRENT_LIST_DIR}/simulator/memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/simulator/streams.cpp
  ${CMAKE_CURRENT_LIST_DIR}/simulator/convert.cpp
  ${CMAKE_CURRENT_LIST_DIR}/simulator/fault_report.cpp
)
set_target_properties(ocl_runtime PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_features(ocl_runtime PUBLIC cxx_std_20)
target_include_directories(ocl_runtime PUBLIC
  ${CMAKE_CURRENT_LIST_DIR}
  ${CMAKE_CURRENT_LIST_DIR}/../generated
)
target_link_libraries(ocl_runtime PUBLIC Threads::Threads)
