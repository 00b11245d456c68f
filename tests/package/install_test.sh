#!/usr/bin/env bash
# The install as a user meets it: `cmake --install` into a temporary prefix,
# the files and the SONAME, a consumer built with find_package(Loom) and one
# with pkg-config, both run on 2 ranks under the installed loomrun, and a
# program that knows nothing of Loom run under it on 2 ranks and alone.
# usage: install_test.sh BUILD_DIR WORK_DIR MPI(openmpi|mpich) [MPIEXEC FLAGS...]
set -euo pipefail
build=$1 work=$2 mpi=$3
shift 3
flags=("$@")
src=$(cd "$(dirname "$0")/consumer" && pwd)
fail() { echo "package test: $*" >&2; exit 1; }

rm -rf "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work.install.log" 2>&1 || {
  cat "$work.install.log"; fail "cmake --install failed"; }
mv "$work.install.log" "$work/install.log"

version=$(sed -n 's/^Version: //p' "$prefix"/lib*/pkgconfig/loom.pc)
major=${version%%.*}
libdir=$(dirname "$(ls "$prefix"/lib*/libloom.so."$major")")
for f in "$libdir/libloom.so" "$libdir/libloom.so.$major" "$libdir/libloom.so.$version" \
         "$prefix/include/loom/loom.h" "$prefix/include/loom/stream.h" \
         "$libdir/cmake/Loom/LoomConfig.cmake" "$libdir/cmake/Loom/LoomConfigVersion.cmake" \
         "$libdir/cmake/Loom/LoomTargets.cmake" "$prefix/bin/loomrun" "$prefix/bin/loom-inspect"; do
  [ -e "$f" ] || fail "not installed: ${f#"$prefix"/}"
done
soname=$(objdump -p "$libdir/libloom.so.$version" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = "libloom.so.$major" ] || fail "SONAME is '$soname', not libloom.so.$major"
# Installed tools find the installed library (RPATH), not the build's.
got=$(ldd "$prefix/bin/loom-inspect" | awk '$1 ~ /^libloom[.]so/ {print $3}')
[ "$got" -ef "$libdir/libloom.so.$major" ] ||
  fail "loom-inspect loads '$got', not $libdir/libloom.so.$major"
# Nothing of the build tree leaks into the installed CMake files.
! grep -l "$(cd "$build" && pwd)" "$libdir"/cmake/Loom/*.cmake || fail "build paths in the CMake files"

# find_package(Loom)
cmake -S "$src" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log"; fail "find_package(Loom) consumer did not configure"; }
grep -q "Loom $version for $mpi" "$work/cmake.log" || fail "LoomConfig.cmake: $(grep Loom "$work/cmake.log")"
cmake --build "$work/cmake" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "consumer build"; }

# pkg-config, compiled with the MPI's wrapper (as loom.pc says)
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --modversion loom)" = "$version" ] || fail "pkg-config --modversion loom"
[ "$(pkg-config --variable=mpi loom)" = "$mpi" ] || fail "pkg-config --variable=mpi loom"
[ "$(pkg-config --variable=preload loom)" -ef "$libdir/libloom.so.$major" ] ||
  fail "pkg-config --variable=preload loom: $(pkg-config --variable=preload loom)"
mpicc=$(sed -n 's/^ *set(MPI_C_COMPILER "\(.*\)" CACHE.*/\1/p' "$libdir/cmake/Loom/LoomConfig.cmake")
[ -x "$mpicc" ] || mpicc=mpicc
# shellcheck disable=SC2046
"$mpicc" -o "$work/linked-pc" "$src/linked.c" $(pkg-config --cflags --libs loom) \
  -Wl,-rpath,"$(pkg-config --variable=libdir loom)" || fail "pkg-config consumer build"
"$mpicc" -o "$work/plain" "$src/plain.c" -ldl || fail "plain program build"

# Under the installed launcher: the linked programs, then the plain one (the
# preload and a LOOM_* setting must reach every rank).
loomrun=$prefix/bin/loomrun
[ "$("$loomrun" --lib)" -ef "$libdir/libloom.so.$major" ] || fail "loomrun --lib: $("$loomrun" --lib)"
"$loomrun" -np 2 "${flags[@]}" "$work/cmake/linked" || fail "find_package consumer under loomrun"
"$loomrun" -np 2 "${flags[@]}" "$work/linked-pc" || fail "pkg-config consumer under loomrun"
export LOOM_LOG_SUBSYS=mpi,type
"$loomrun" -np 2 "${flags[@]}" "$work/plain" mpi,type || fail "plain program under loomrun -np 2"
"$loomrun" "$work/plain" mpi,type || fail "plain program under loomrun (one process)"
# The launcher forms: the MPI's own spelling of the preload, settings passed by name.
dry=$("$loomrun" --dry-run mpiexec -n 2 ./app)
if [ "$mpi" = openmpi ]; then
  want="mpiexec -x LD_PRELOAD=$("$loomrun" --lib) -x LOOM_LOG_SUBSYS -n 2 ./app"
else
  want="mpiexec -genv LD_PRELOAD $("$loomrun" --lib) -genv LOOM_LOG_SUBSYS mpi\\,type -n 2 ./app"
fi
[ "$dry" = "$want " ] || fail "loomrun --dry-run: '$dry', want '$want '"
# Without the launcher, the plain program must notice that Loom is missing.
if "$mpicc" --version >/dev/null 2>&1 && "$work/plain" mpi,type >/dev/null 2>&1; then
  fail "the plain program passes without Loom: the check above proves nothing"
fi
echo "package test: installed, found (CMake, pkg-config) and run under loomrun ($mpi)"
