#!/usr/bin/env bash
# One call on a GPU machine (the device tool): build for sm_90, run the GPU
# tests and the host suites, then the benchmark command in $LOOM_BENCH, run
# from the repo root (default: the quick GPU kernel sweep; `none` skips).
# Logs go to $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
{ date -u; nvidia-smi -L; nvidia-smi topo -m; nvcc --version | tail -1; mpirun --version | head -1; } | tee "$out/device.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLOOM_MPI=openmpi >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
ctest --test-dir build-gpu -L gpu --output-on-failure -j1 >"$out/ctest-gpu.log" 2>&1
grep -E "tests passed|Failed|\*\*\*|Skipped" "$out/ctest-gpu.log" | tail -40
ctest --test-dir build-gpu -L "unit|mpi" -j8 >"$out/ctest-host.log" 2>&1
grep -E "tests passed|Failed" "$out/ctest-host.log" | tail -5
[ "${LOOM_BENCH:-}" = none ] && exit 0
eval "${LOOM_BENCH:-./build-gpu/tools/loom-bench-gpu --quick}" 2>&1 | tee "$out/bench.md" | tail -60
