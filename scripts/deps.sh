#!/usr/bin/env bash
# Installs what Loom needs to build and test, from Debian/Ubuntu packages.
# Installs nothing that is already there; needs root (or sudo) otherwise.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config clang-format libgtest-dev
      libopenmpi-dev openmpi-bin libmpich-dev mpich)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "loom: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
