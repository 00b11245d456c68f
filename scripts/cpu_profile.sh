#!/usr/bin/env bash
# CPU profile of each MPI rank with gperftools' sampling profiler, where perf
# is not available (the GPU machines): put it between the launcher and the
# program, e.g.
#   mpirun -np 2 scripts/cpu_profile.sh build/tools/loom-halo --modes loom4d ...
#   google-pprof --text --cum build/tools/loom-halo prof/prof.0
# Each rank writes $PROFILE_DIR/prof.<rank> (default ./prof). The profiler
# library is libprofiler.so.0 (Debian/Ubuntu package libgoogle-perftools4;
# on a machine without it, `apt-get download libgoogle-perftools4
# libunwind8 google-perftools` elsewhere and `dpkg -x` them into a folder
# named by PROFILER_ROOT). PROFILE_HZ: samples a second (default 2000; the
# kernel may cap it at its tick rate).
set -euo pipefail
dir=${PROFILE_DIR:-prof}
mkdir -p "$dir"
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}
lib=libprofiler.so.0
if [[ -n "${PROFILER_ROOT:-}" ]]; then
  libdir="$PROFILER_ROOT/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  lib="$libdir/libprofiler.so.0"
fi
export CPUPROFILE="$dir/prof.$rank" CPUPROFILE_FREQUENCY="${PROFILE_HZ:-2000}"
export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
exec "$@"
