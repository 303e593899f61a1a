# acmeccl, acme's collective communication library, and the flsdk adapter over
# it (ccl_adapter.cpp), as a static library that CMakeLists.txt links into the
# extension (every source listed; nothing globbed). Like the runtime it needs
# no torch.
include_guard(GLOBAL)
include("${CMAKE_CURRENT_LIST_DIR}/../runtime/runtime.cmake")

set(ACME_CCL_DIR ${CMAKE_CURRENT_LIST_DIR})

add_library(acme_ccl STATIC
  ${ACME_CCL_DIR}/bootstrap.cpp
  ${ACME_CCL_DIR}/comm.cpp
  ${ACME_CCL_DIR}/exec.cpp
  ${ACME_CCL_DIR}/reduce.cpp
  ${ACME_CCL_DIR}/ccl_adapter.cpp
)
set_target_properties(acme_ccl PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_features(acme_ccl PUBLIC cxx_std_20)
target_include_directories(acme_ccl PUBLIC ${ACME_CCL_DIR})
target_link_libraries(acme_ccl PUBLIC acme_runtime)
