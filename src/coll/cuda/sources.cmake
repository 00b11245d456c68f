# Owned by the collectives' reduction: adds its CUDA fold to loom_core (the
# C++20 flag for nvcc is set by pack/cuda/sources.cmake, included first).
# -fmad=false: no fused multiply-adds, so the GPU's bits equal host_reduce's.
target_sources(loom_core PRIVATE ${CMAKE_CURRENT_LIST_DIR}/reduce.cu)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/reduce.cu PROPERTIES COMPILE_OPTIONS
                            "-fmad=false")
