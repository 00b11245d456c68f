#!/usr/bin/env bash
# Loom's main job: build, then show what Loom makes of classic datatypes
# (IR, canonical form, kernel layout) and its pack throughput beside MPI_Pack.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_MPI=openmpi -DLOOM_TESTS=OFF >/dev/null
cmake --build build --target loom-inspect
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
./build/tools/loom-inspect "$@"
