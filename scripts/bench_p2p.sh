#!/usr/bin/env bash
# Point-to-point on one GPU machine, every contender in one run (the
# numbers of docs/results/p2p-*.md): loom-p2p, a plain MPI program, under
#   loom-auto    Loom (LD_PRELOAD) over the system's Open MPI, defaults
#                (contiguous device messages lent as they lie: zero-copy)
#   loom-segments the same with zero-copy off (LOOM_ZCOPY_MIN=off): every
#                message packed into a segment of Loom's
#   loom-nobatch the defaults but each send's pack launched alone (LOOM_BATCH_PACKS=0)
#   loom-proxy   the defaults with the resident copy agent (LOOM_PROXY=1)
#   naive        no Loom: the program copies to pinned host memory itself
#   ucx-cuda     no Loom: Open MPI over UCX built with CUDA, when
#                UCX_CUDA_MPIRUN is set (source ucx-cuda.sh activate ...);
#                then Loom over it too (loom-over-ucx, loom-native below)
# Two ranks; with one GPU they share it, so MPS must be on (the caller's job).
#   scripts/bench_p2p.sh BUILD_DIR OUT_CSV [--quick]
set -uo pipefail
build=${1:?build dir}; out=${2:?csv}; shift 2
extra=("$@")
lib=$(realpath "$build/src/libloom.so")
bin=$(realpath "$build/tools/loom-p2p")
run() {  # label, mpirun flags..., -- program flags...
  local label=$1; shift
  local flags=() ; while [ "$1" != "--" ]; do flags+=("$1"); shift; done; shift
  timeout 300 mpirun -np 2 --oversubscribe "${flags[@]}" "$bin" --label "$label" "$@" "${extra[@]}" \
    | grep -E "^$label," >>"$out" || echo "loom-p2p: $label failed" >&2
}
: >"$out"
for type in contig vector; do
  run loom-auto -x LD_PRELOAD="$lib" -- --type $type
  run loom-segments -x LD_PRELOAD="$lib" -x LOOM_ZCOPY_MIN=off -- --type $type
  run loom-nobatch -x LD_PRELOAD="$lib" -x LOOM_BATCH_PACKS=0 -- --type $type
  run loom-proxy -x LD_PRELOAD="$lib" -x LOOM_PROXY=1 -- --type $type
  run naive -- --type $type --naive
done
# The CUDA-aware peer moves contiguous device buffers only (it crashes on
# derived datatypes).
if [ -n "${UCX_CUDA_MPIRUN:-}" ]; then
  # shellcheck disable=SC2086
  run ucx-cuda $UCX_CUDA_MPIRUN -- --type contig
  # Loom over the peer (LOOM_MPI_CUDA_AWARE=auto finds UCX with CUDA):
  #   loom-over-ucx  on one node Loom keeps its own methods;
  #   loom-native    every rank counts as on a node of its own
  #                  (LOOM_TEST_OFF_NODE), so contiguous device messages go
  #                  to the peer as they lie: the cost of Loom in that path.
  for type in contig vector; do
    # shellcheck disable=SC2086
    run loom-over-ucx $UCX_CUDA_MPIRUN -x LD_PRELOAD="$lib" -- --type $type
    # shellcheck disable=SC2086
    run loom-native $UCX_CUDA_MPIRUN -x LD_PRELOAD="$lib" -x LOOM_TEST_OFF_NODE=1 -- --type $type
  done
fi
