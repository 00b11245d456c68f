#!/usr/bin/env bash
# The stream GPU tests over PyPI's MPICH 5.0 (its mpi.h declares MPICH's
# MPIX stream API, so Loom interposes MPICH's own functions): build against
# the wheel that `LOOM_MPICH_WHEEL=1 scripts/deps.sh` unpacked into .whl/
# (GPU machines without network: fetch it elsewhere and carry the folder),
# then run `ctest -L gpu -R stream` with MPICH's mpiexec, ranks sharing the
# GPU under MPS when it is there. Without a GPU the tests skip.
# Logs go to $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
whl=$PWD/.whl/mpich-5.0.2/mpich-5.0.2.data/data
[ -x "$whl/bin/mpicc" ] || { echo "no MPICH 5.0 wheel in .whl (LOOM_MPICH_WHEEL=1 scripts/deps.sh)"; exit 2; }
command -v nvcc >/dev/null 2>&1 || export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build-gpu-mpich5 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLOOM_MPI=mpich -DLOOM_MPI_PREFIX="$whl" >"$out/configure-mpich5.log" 2>&1 ||
  { tail -30 "$out/configure-mpich5.log"; exit 1; }
cmake --build build-gpu-mpich5 -j"$(nproc)" --target loom_stream_gpu_tests >"$out/build-mpich5.log" 2>&1 ||
  { grep -E "error" -A3 "$out/build-mpich5.log" | head -40; exit 1; }
mps=0
if command -v nvidia-cuda-mps-control >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
   ! pgrep -f nvidia-cuda-mps-control >/dev/null 2>&1; then
  nvidia-cuda-mps-control -d && mps=1
fi
# -V: a test whose ranks all skip (no GPU, no MPI_THREAD_MULTIPLE) still
# passes in ctest; the counts of gtest's lines below tell.
ctest --test-dir build-gpu-mpich5 -L gpu -R stream -V --timeout 150 \
  >"$out/ctest-gpu-mpich5.log" 2>&1
rc=$?
[ "$mps" = 1 ] && echo quit | nvidia-cuda-mps-control
grep -E "tests passed|\*\*\*|Skipped" "$out/ctest-gpu-mpich5.log" | tail -20
echo "gtest cases run: $(grep -c 'OK \]' "$out/ctest-gpu-mpich5.log"), skipped: $(grep -c 'SKIPPED \] [A-Za-z]' "$out/ctest-gpu-mpich5.log")"
echo "ERROR lines: $(grep -c ERROR "$out/ctest-gpu-mpich5.log")"
exit $rc
