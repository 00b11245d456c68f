#!/usr/bin/env bash
# Builds the OSU micro-benchmarks 7.4 (point-to-point and every collective
# directory) with CUDA buffers (-d cuda) against the system MPI, to run
# under Loom as a user would (scripts/peers/run_omb.sh).
#   scripts/peers/build_omb.sh OMB_SRC
# OMB_SRC: the OMB 7.4 release tree (the one used here came from the first
# commit of github.com/sherrywong1220/osu-micro-benchmarks-7.4, an import of
# the release). One change, for CUDA 13: cudaMemPrefetchAsync takes a
# cudaMemLocation (managed-memory runs only; not used here).
set -euo pipefail
src=$1
cuda=${CUDA_HOME:-/usr/local/cuda}
cd "$src"
sed -i 's|    CUDA_CHECK(cudaMemPrefetchAsync(buf, length, devid, um_stream));|    struct cudaMemLocation loc = {cudaMemLocationTypeDevice, devid};\n    CUDA_CHECK(cudaMemPrefetchAsync(buf, length, loc, 0, um_stream));|' c/util/osu_util_mpi.c
./configure CC=mpicc CXX=mpicxx --enable-cuda --with-cuda-include="$cuda/include" \
  --with-cuda-libpath="$cuda/lib64" >/dev/null
for d in pt2pt/standard collective/blocking collective/non_blocking collective/neighborhood; do
  make -j"$(nproc)" -C "c/mpi/$d" >/dev/null
done
