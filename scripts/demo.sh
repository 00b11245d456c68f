#!/usr/bin/env bash
# Loom's main job. On a machine with an NVIDIA GPU and the CUDA toolkit:
# build, then run the 3D halo-exchange mini-app (loom-halo) on 2 ranks with
# device buffers, every mode verified, print its comparison table (Loom's
# methods vs naive staging vs the hand-packed reference) and plot it. Ranks
# that share a GPU run under MPS (started here, stopped at the end unless it
# was running already). Elsewhere: what Loom makes of classic datatypes (IR,
# canonical form, kernel layout) and its host pack throughput beside MPI_Pack.
#   scripts/demo.sh [TOOL OPTIONS]     LOOM_DEMO=host forces the host demo;
#   LOOM_DEMO_NP=4 runs the halo on 4 ranks; results go to $LOOM_DEMO_BUILD/demo/
#   (the build folder, default build).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
build=${LOOM_DEMO_BUILD:-build}

host_demo() {
  bash scripts/deps.sh
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_MPI=openmpi -DLOOM_TESTS=OFF >/dev/null
  cmake --build "$build" --target loom-inspect
  "$build/tools/loom-inspect" "$@"
}

gpus=0
if [ "${LOOM_DEMO:-}" != host ] && command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if [ "$gpus" -eq 0 ] || ! command -v nvcc >/dev/null 2>&1; then
  [ "$gpus" -gt 0 ] && echo "loom demo: a GPU but no CUDA toolkit (nvcc): the host demo"
  host_demo "$@"
  exit 0
fi

# What the build needs, and matplotlib for the plot, where missing (the
# test tools of scripts/deps.sh too; it may not reach a network here).
need=0
for c in cmake ninja mpicc.openmpi mpirun.openmpi; do command -v $c >/dev/null || need=1; done
python3 -c "import matplotlib" 2>/dev/null || need=1
if [ $need -eq 1 ]; then
  bash scripts/deps.sh python3-matplotlib || echo "loom demo: scripts/deps.sh failed; going on"
fi
# The GPU's own architecture (9.0 -> 90), so the kernels run natively.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
echo "loom demo: $(nvidia-smi -L | head -1), building for sm_$arch"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_MPI=openmpi -DLOOM_TESTS=OFF \
  -DLOOM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
cmake --build "$build" --target loom-halo

np=${LOOM_DEMO_NP:-2}
mpirun=mpirun
command -v mpirun.openmpi >/dev/null && mpirun=mpirun.openmpi  # the MPI Loom was built for
# Ranks sharing a GPU need MPS, or the GPU time-slices between them (every
# message would then cost ~150 us). Started here only if none runs; stopped
# at the end (also on an error or Ctrl-C) only if started here.
mps_started=0
stop_mps() {
  if [ $mps_started -eq 1 ]; then
    echo "loom demo: stopping MPS"
    echo quit | nvidia-cuda-mps-control || true
    mps_started=0
  fi
}
trap stop_mps EXIT
trap 'exit 130' INT TERM
if [ "$gpus" -lt "$np" ]; then
  if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    echo "loom demo: $np ranks share $gpus GPU(s) and there is no nvidia-cuda-mps-control:" \
      "the GPU time-slices between them, the times show that"
  elif ! echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; then
    nvidia-cuda-mps-control -d
    mps_started=1
    # The control daemon answers once it is up.
    for _ in $(seq 50); do
      echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1 && break
      sleep 0.1
    done
    echo "loom demo: $np ranks share $gpus GPU(s): MPS started (stopped at the end)"
  else
    echo "loom demo: $np ranks share $gpus GPU(s): MPS already running"
  fi
fi

mkdir -p "$build/demo"
csv=$build/demo/halo-np$np.csv
echo "loom demo: $mpirun -np $np loom-halo --nx 64 --ny 64 --nz 32 --q 8 --r 3 --csv $csv $*"
rc=0
"$mpirun" -np "$np" --oversubscribe --bind-to none "$build/tools/loom-halo" \
  --nx 64 --ny 64 --nz 32 --q 8 --r 3 --csv "$csv" "$@" || rc=$?
if [ $rc -ne 0 ]; then
  echo "loom demo: loom-halo failed (exit $rc; 77: no usable GPU on some rank)"
  exit $rc
fi
prc=0
python3 tools/plot_results.py "$csv" || prc=$?
case $prc in
  0) echo "loom demo: table in $csv, plot in ${csv%.csv}.png" ;;
  77) echo "loom demo: table in $csv (no plot: python3 has no matplotlib)" ;;
  *) echo "loom demo: table in $csv (the plot failed, exit $prc)" ;;
esac
exit 0
