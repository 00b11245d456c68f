#!/bin/sh
# Runs PROGRAM on NP ranks, each seeing one GPU of its own (rank r sees GPU r)
# from before MPI_Init, as HPC launchers arrange it; skips (exit 77) where
# the machine has fewer GPUs than ranks.
#   gpu_per_rank.sh MPIEXEC NP PROGRAM [ARGS...]
mpiexec=$1; np=$2; shift 2
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -lt "$np" ]; then
  echo "skipped: $np ranks need $np GPUs, this machine has $gpus"
  exit 77
fi
# shellcheck disable=SC2016
exec "$mpiexec" -n "$np" sh -c 'CUDA_VISIBLE_DEVICES=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-0}} exec "$@"' sh "$@"
