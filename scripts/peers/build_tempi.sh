#!/usr/bin/env bash
# Builds TEMPI's own MPI_Pack benchmark (bin/bench-mpi-pack) from a TEMPI
# source tree (github.com/cwpearson/tempi, checked at commit 9e623f0), so
# Loom and TEMPI can be timed by the same program in one run.
#   scripts/peers/build_tempi.sh TEMPI_SRC BUILD_DIR
# Changes to the source, all for today's toolchain or for a fair comparison:
#  - CUDA 13 ships NVTX as headers only (nvtx3/), no libnvToolsExt;
#  - include/partition.hpp uses size_t without <cstddef> (g++ 13);
#  - KaHIP (a git submodule) is off: placement is not used by MPI_Pack;
#  - bench_mpi_pack runs 5 iterations when TEMPI is disabled, 500 otherwise:
#    500 always, so a run under Loom (TEMPI_DISABLE=1) is timed as long.
set -euo pipefail
src=$1 build=$2
cd "$src"
grep -rl "nvToolsExt" --include=*.cpp --include=*.cu --include=*.hpp --include=*.cuh . |
  xargs -r sed -i -E 's|<(nvToolsExt[A-Za-z]*\.h)>|<nvtx3/\1>|'
sed -i 's|target_link_libraries(tempi PUBLIC ${NVTOOLSEXT_LIB})|target_link_libraries(tempi PUBLIC ${CMAKE_DL_LIBS})|' CMakeLists.txt
grep -q '<cstddef>' include/partition.hpp || sed -i '0,/#include/s//#include <cstddef>\n#include/' include/partition.hpp
sed -i 's/nIters = 5;/nIters = 500;/' bin/bench_mpi_pack.cpp
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DTEMPI_ENABLE_KAHIP=OFF -DTEMPI_OUTPUT_LEVEL=WARN >/dev/null
cmake --build "$build" --target bench-mpi-pack
