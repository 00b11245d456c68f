#!/usr/bin/env bash
# Runs the OSU micro-benchmarks (scripts/peers/build_omb.sh) on device
# buffers (-d cuda) under Loom, as a user would: point-to-point with and
# without derived datatypes (-D vect), every collective with OMB's own data
# validation (-c). One log a benchmark under OUT_DIR, then a markdown table:
# exit status, OMB validation failures, Loom ERROR lines, crashes.
#   scripts/peers/run_omb.sh OMB_BIN_DIR LIBLOOM OUT_DIR [NP] [MAX_BYTES]
# Extra mpirun flags: OMB_MPIRUN_FLAGS. Exits 1 when any run is not clean.
set -uo pipefail
bin=${1:?omb bin dir}; lib=$(realpath "${2:?libloom.so}"); out=${3:?out dir}
np=${4:-2}; max=${5:-1048576}
mkdir -p "$out"
flags=(--oversubscribe --bind-to none -x LD_PRELOAD="$lib" ${OMB_MPIRUN_FLAGS:-})
cases=(
  "osu_latency -d cuda D D" "osu_bw -d cuda D D" "osu_bibw -d cuda D D"
  "osu_latency -d cuda -D vect:64:8 D D" "osu_bw -d cuda -D vect:64:8 D D"
  "osu_latency -d cuda -c D D" "osu_bw -d cuda -c D D"
)
for b in allgather allgatherv allreduce alltoall alltoallv alltoallw barrier bcast gather gatherv \
         reduce reduce_scatter reduce_scatter_block scatter scatterv; do
  cases+=("osu_$b -d cuda -c" "osu_i$b -d cuda -c")
done
for b in allgather allgatherv alltoall alltoallv alltoallw; do
  cases+=("osu_neighbor_$b -d cuda -c" "osu_ineighbor_$b -d cuda -c")
done
bad=0
echo "| benchmark ($np ranks, device buffers) | exit | validation failures | Loom ERROR lines | crash |"
echo "|---|---:|---:|---:|---|"
for c in "${cases[@]}"; do
  read -r name rest <<<"$c"
  [ -x "$bin/$name" ] || continue
  log="$out/$(echo "$c" | tr ' :/' '___').txt"
  # shellcheck disable=SC2086
  timeout 180 mpirun -np "$np" "${flags[@]}" "$bin/$name" $rest -m "1:$max" -i 50 -x 10 >"$log" 2>&1
  rc=$?
  fails=$(grep -c -w "Fail" "$log")
  errors=$(grep -c "^\[loom.*ERROR" "$log")
  crash=$(grep -q -E "signal|Segmentation|core dumped|Aborted" "$log" && echo yes || echo no)
  [ $rc -ne 0 ] || [ "$fails" -ne 0 ] || [ "$errors" -ne 0 ] || [ "$crash" = yes ] && bad=1
  echo "| \`$c\` | $rc | $fails | $errors | $crash |"
done
exit $bad
