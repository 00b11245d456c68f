#!/usr/bin/env bash
# Runs the OSU micro-benchmarks (scripts/peers/build_omb.sh) on device
# buffers (-d cuda) under Loom, as a user would: point-to-point with and
# without derived datatypes (-D vect), every collective with OMB's own data
# validation (-c). One log a benchmark under OUT_DIR, then a markdown table:
# exit status, OMB validation failures, Loom ERROR lines, crashes.
#   scripts/peers/run_omb.sh OMB_BIN_DIR LIBLOOM OUT_DIR [NP] [MAX_BYTES]
# Extra mpirun flags: OMB_MPIRUN_FLAGS (default under Open MPI: --mca op ^avx,
# as Open MPI 4.1's op/avx saturates MPI_CHAR sums from 16 elements on, host
# buffers and no Loom alike, which OMB's validation of its MPI_CHAR
# reductions reports). Exits 1 when any run is not clean.
set -uo pipefail
bin=${1:?omb bin dir}; lib=$(realpath "${2:?libloom.so}"); out=${3:?out dir}
np=${4:-2}; max=${5:-1048576}
mkdir -p "$out"
default_flags=""
mpirun --version 2>&1 | grep -q "Open MPI" && default_flags="--mca op ^avx"
# shellcheck disable=SC2206
flags=(--oversubscribe --bind-to none -x LD_PRELOAD="$lib" ${OMB_MPIRUN_FLAGS:-$default_flags})
# Point-to-point takes the buffers' places last (D D: both on the device).
cases=(
  "osu_latency -d cuda|D D" "osu_bw -d cuda|D D" "osu_bibw -d cuda|D D"
  "osu_latency -d cuda -D vect:64:8|D D" "osu_bw -d cuda -D vect:64:8|D D"
  "osu_latency -d cuda -c|D D" "osu_bw -d cuda -c|D D" "osu_latency -d cuda|D H"
)
for b in allgather allgatherv allreduce alltoall alltoallv alltoallw bcast gather gatherv \
         reduce reduce_scatter reduce_scatter_block scatter scatterv; do
  cases+=("osu_$b -d cuda -c" "osu_i$b -d cuda -c")
done
cases+=("osu_barrier -d cuda" "osu_ibarrier -d cuda")
# OMB 7.4's neighbourhood benchmarks take host buffers only: Loom passes them through.
for b in allgather allgatherv alltoall alltoallv alltoallw; do
  cases+=("osu_neighbor_$b -c" "osu_ineighbor_$b -c")
done
bad=0
echo "| benchmark ($np ranks, device buffers) | exit | validation failures | Loom ERROR lines | crash |"
echo "|---|---:|---:|---:|---|"
for c in "${cases[@]}"; do
  opts=${c%%|*}; where=""
  [ "$opts" != "$c" ] && where=${c#*|}
  read -r name rest <<<"$opts"
  [ -x "$bin/$name" ] || continue
  log="$out/$(echo "$c" | tr ' :/|' '____').txt"
  # shellcheck disable=SC2086
  timeout 180 mpirun -np "$np" "${flags[@]}" "$bin/$name" $rest -m "1:$max" -i 50 -x 10 $where \
    >"$log" 2>&1
  rc=$?
  fails=$(grep -c -w "Fail" "$log")
  errors=$(grep -c "^\[loom.*ERROR" "$log")
  crash=$(grep -q -E "signal|Segmentation|core dumped|Aborted" "$log" && echo yes || echo no)
  [ $rc -ne 0 ] || [ "$fails" -ne 0 ] || [ "$errors" -ne 0 ] || [ "$crash" = yes ] && bad=1
  echo "| \`$name $rest $where\` | $rc | $fails | $errors | $crash |"
done
exit $bad
