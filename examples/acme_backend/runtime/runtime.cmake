# acme vendor runtime + flsdk runtime adapter, as a static library that
# CMakeLists.txt links into the extension (every runtime source is listed here;
# nothing is globbed).
#
# Position-independent so it can be linked into the backend's shared
# extension module. No torch dependency: the runtime is the vendor's own code.
include_guard(GLOBAL)

find_package(Threads REQUIRED)

set(ACME_RUNTIME_DIR ${CMAKE_CURRENT_LIST_DIR})

add_library(acme_runtime STATIC
  ${ACME_RUNTIME_DIR}/device.cpp
  ${ACME_RUNTIME_DIR}/memory.cpp
  ${ACME_RUNTIME_DIR}/stream.cpp
  ${ACME_RUNTIME_DIR}/options.cpp
  ${ACME_RUNTIME_DIR}/ipc.cpp
  ${ACME_RUNTIME_DIR}/profiling.cpp
  ${ACME_RUNTIME_DIR}/adapter.cpp
  ${ACME_RUNTIME_DIR}/compute_units.cpp
  ${ACME_RUNTIME_DIR}/vector_isa.cpp
)
set_target_properties(acme_runtime PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_features(acme_runtime PUBLIC cxx_std_20)
# acme_runtime.h includes ../generated/runtime_adapter.h relative to itself;
# the generated dir is also public so callers can include the adapter header
# by name.
target_include_directories(acme_runtime PUBLIC
  ${ACME_RUNTIME_DIR}
  ${ACME_RUNTIME_DIR}/../generated
)
target_link_libraries(acme_runtime PUBLIC Threads::Threads)
