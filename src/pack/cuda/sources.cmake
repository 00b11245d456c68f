# Owned by the GPU engine: adds CUDA sources to loom_core.
# CMake < 3.26 does not know nvcc's C++20 flag; tell it (this directory only).
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
# The GPU engine: kernels and dispatch (pack/cuda), the API and the pools.
# Six kernel instances in one .cu file keep the CUDA build short.
target_sources(loom_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/policy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dispatch.cu
  ${CMAKE_CURRENT_LIST_DIR}/proxy.cu
  ${CMAKE_CURRENT_LIST_DIR}/../gpu_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../pools.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../free_gate.cpp)
# Shared cudart: one CUDA runtime with the application (Loom is preloaded
# into programs that have their own).
set_target_properties(loom_core PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
target_link_libraries(loom_core PUBLIC CUDA::cudart)
target_compile_definitions(loom_core PUBLIC LOOM_HAVE_CUDA=1)

# loom-bench-gpu: the GPU pack benchmark (tools/bench_gpu_pack.cu).
add_executable(loom-bench-gpu ${PROJECT_SOURCE_DIR}/tools/bench_gpu_pack.cu)
target_link_libraries(loom-bench-gpu PRIVATE loom_core loom_warnings)
set_target_properties(loom-bench-gpu PROPERTIES
  CUDA_RUNTIME_LIBRARY Shared
  RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tools)
