#!/usr/bin/env bash
# Installs what Loom needs to build and test, from Debian/Ubuntu packages
# (and, with LOOM_MPICH_WHEEL=1, PyPI's mpich wheel).
# Installs nothing that is already there; needs root (or sudo) otherwise.
# Arguments: more packages (scripts/demo.sh: python3-matplotlib for its plot).
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config clang-format libgtest-dev
      libopenmpi-dev openmpi-bin libmpich-dev mpich python3-pip "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "loom: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# LOOM_MPICH_WHEEL=1 (scripts/test.sh): PyPI's mpich wheel too (MPICH 5.0,
# not CUDA-built), whose mpi.h declares MPICH's MPIX stream API, which Loom
# then interposes. Unpacked into .whl/ (ignored by git) for the build test.sh
# makes against it.
[ "${LOOM_MPICH_WHEEL:-0}" = 1 ] || exit 0
cd "$(dirname "$0")/.."
whl_dir=.whl/mpich-5.0.2
if [ ! -x "$whl_dir/mpich-5.0.2.data/data/bin/mpicc" ]; then
  if python3 -m pip --version >/dev/null 2>&1 &&
     python3 -m pip download -q --no-deps --only-binary=:all: -d .whl "mpich==5.0.2"; then
    python3 -m zipfile -e .whl/mpich-5.0.2-py3-none-*.whl "$whl_dir"
    chmod +x "$whl_dir"/mpich-5.0.2.data/data/bin/*
  else
    echo "loom: could not fetch the mpich 5.0.2 wheel (pip): its build step is skipped"
  fi
fi
